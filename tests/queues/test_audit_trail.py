"""An audit trail without holes: every write the API offers, taken from its OpenAPI schema (so a
new endpoint cannot be missed), is made once by a person allowed to, and each leaves an audit
event naming that person. The walk below is checked against the schema both ways: a write the
schema has that the walk does not make fails the test, and so does a step the schema lost."""

from __future__ import annotations

from drf_spectacular.generators import SchemaGenerator

from queues.models import AuditEvent, Job
from tests.factories import PASSWORD
from tests.queues.test_job_api import BODY

WRITES = {"post", "put", "patch", "delete"}


def _schema_writes() -> set[str]:
    raw = SchemaGenerator().get_schema(request=None, public=True)
    return {f"{method.upper()} {path}" for path, ops in raw["paths"].items()
            for method in ops if method in WRITES}  # fmt: skip


KUBECONFIG = (
    "apiVersion: v1\nkind: Config\n"
    "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
    "users: [{name: u, user: {token: t}}]\n"
    "contexts: [{name: prod, context: {cluster: c, user: u}}]\ncurrent-context: prod\n"
)


def _walk(w, kubeconfig: str):
    """(schema operation, who, url, body, the audit verb it leaves); urls may name what an
    earlier step made ({token}, {membership}, {cluster}, {pool}, {job})."""
    return [
        ("POST /api/v1/auth/token/", None, "/api/v1/auth/token/",
         {"username": "alice", "password": PASSWORD}, "api_token.create"),
        ("POST /api/v1/tokens/", "alice", "/api/v1/tokens/", {"name": "ci"}, "api_token.create"),
        ("POST /api/v1/tokens/{id}/revoke/", "alice", "/api/v1/tokens/{token}/revoke/", None,
         "api_token.revoke"),
        ("POST /api/v1/departments/", "admin", "/api/v1/departments/",
         {"slug": "ops", "name": "Ops"}, "department.create"),
        ("PUT /api/v1/departments/{slug}/", "admin", "/api/v1/departments/ops/",
         {"slug": "ops", "name": "Operations", "managers": ["maria"]}, "department.update"),
        ("PATCH /api/v1/departments/{slug}/", "admin", "/api/v1/departments/ops/",
         {"name": "Ops"}, "department.update"),
        ("POST /api/v1/teams/", "admin", "/api/v1/teams/",
         {"slug": "speech", "name": "Speech", "department": "ops"}, "team.create"),
        ("PUT /api/v1/teams/{slug}/", "admin", "/api/v1/teams/speech/",
         {"slug": "speech", "name": "Speech", "department": "ops", "cost_centre": "cc-9"},
         "team.update"),
        ("PATCH /api/v1/teams/{slug}/", "admin", "/api/v1/teams/speech/", {"name": "Voice"},
         "team.update"),
        ("POST /api/v1/teams/{slug}/fair-share/", "admin", "/api/v1/teams/speech/fair-share/",
         {"weight": "2"}, "team.fair_share_weight"),
        ("POST /api/v1/teams/{slug}/hold/", "admin", "/api/v1/teams/speech/hold/",
         {"reason": "budget review"}, "team.queue_hold"),
        ("POST /api/v1/teams/{slug}/release/", "admin", "/api/v1/teams/speech/release/", None,
         "team.queue_release"),
        ("POST /api/v1/teams/{slug}/member-fair-sharing/", "maria",
         "/api/v1/teams/vision/member-fair-sharing/", {"enabled": True},
         "team.member_fair_sharing"),
        ("POST /api/v1/departments/{slug}/fair-share/", "admin",
         "/api/v1/departments/ops/fair-share/", {"weight": "2"}, "department.fair_share"),
        ("POST /api/v1/teams/{slug}/pod-security/", "admin", "/api/v1/teams/speech/pod-security/",
         {"exempt": True, "reason": "profiling needs privileged pods"}, "team.pod_security"),
        ("DELETE /api/v1/teams/{slug}/", "admin", "/api/v1/teams/speech/", None, "team.delete"),
        ("POST /api/v1/memberships/", "bob", "/api/v1/memberships/",
         {"team": "vision", "user": "carol", "role": "member"}, "membership.create"),
        ("DELETE /api/v1/memberships/{id}/", "bob", "/api/v1/memberships/{membership}/", None,
         "membership.delete"),
        ("POST /api/v1/clusters/", "admin", "/api/v1/clusters/",
         {"name": "east", "kubeconfig_path": kubeconfig}, "cluster.register"),
        ("PUT /api/v1/clusters/{id}/", "admin", "/api/v1/clusters/{cluster}/",
         {"name": "east", "kubeconfig_path": kubeconfig, "context": "prod"}, "cluster.update"),
        ("PATCH /api/v1/clusters/{id}/", "admin", "/api/v1/clusters/{cluster}/",
         {"prometheus_url": "http://prometheus.example:9090"}, "cluster.update"),
        ("POST /api/v1/clusters/{id}/sync/", "admin", "/api/v1/clusters/{cluster}/sync/", None,
         "cluster.sync"),
        ("POST /api/v1/clusters/{id}/disable/", "admin", "/api/v1/clusters/{cluster}/disable/",
         {"reason": "driver upgrade"}, "cluster.disabled"),
        ("POST /api/v1/clusters/{id}/enable/", "admin", "/api/v1/clusters/{cluster}/enable/",
         {"reason": "drivers upgraded"}, "cluster.enabled"),
        ("POST /api/v1/pools/", "admin", "/api/v1/pools/",
         {"cluster": "east", "name": "h100", "gpu_model": "H100",
          "node_selector": {"accelerator": "h100"}}, "pool.create"),
        ("PUT /api/v1/pools/{id}/", "admin", "/api/v1/pools/{pool}/",
         {"cluster": "east", "name": "h100", "gpu_model": "H100",
          "node_selector": {"accelerator": "nvidia-h100"}}, "pool.update"),
        ("PATCH /api/v1/pools/{id}/", "admin", "/api/v1/pools/{pool}/",
         {"interconnect": "nvlink"}, "pool.update"),
        ("DELETE /api/v1/clusters/{id}/", "admin", "/api/v1/clusters/{cluster}/", None,
         "cluster.deleted"),
        ("POST /api/v1/tiers/", "admin", "/api/v1/tiers/",
         {"name": "urgent", "value": 5000, "preemptible": False}, "tier.create"),
        ("PUT /api/v1/tiers/{id}/", "admin", "/api/v1/tiers/{tier}/",
         {"name": "urgent", "value": 6000, "preemptible": False}, "tier.change"),
        ("PATCH /api/v1/tiers/{id}/", "admin", "/api/v1/tiers/{tier}/",
         {"description": "for deadlines"}, "tier.change"),
        ("PUT /api/v1/approval-policy/", "admin", "/api/v1/approval-policy/",
         {"max_gpus_without_approval": 4}, "approval_policy.update"),
        ("PATCH /api/v1/approval-policy/", "admin", "/api/v1/approval-policy/",
         {"max_gpus_without_approval": 1}, "approval_policy.update"),
        ("POST /api/v1/jobs/", "alice", "/api/v1/jobs/", BODY, "job.submit"),
        ("POST /api/v1/jobs/{id}/approve/", "bob", "/api/v1/jobs/{job}/approve/", None,
         "job.approve"),
        ("POST /api/v1/jobs/", "alice", "/api/v1/jobs/", {**BODY, "name": "second"},
         "job.submit"),
        ("POST /api/v1/jobs/{id}/reject/", "bob", "/api/v1/jobs/{job}/reject/",
         {"reason": "too big for now"}, "job.reject"),
        ("POST /api/v1/jobs/", "alice", "/api/v1/jobs/", {**BODY, "name": "third"},
         "job.submit"),
        ("POST /api/v1/jobs/{id}/cancel/", "alice", "/api/v1/jobs/{job}/cancel/", None,
         "job.cancel"),
        ("POST /api/v1/jobs/{id}/resubmit/", "alice", "/api/v1/jobs/{job}/resubmit/", None,
         "job.submit"),
        ("POST /api/v1/job-templates/", "alice", "/api/v1/job-templates/",
         {"team": "vision", "name": "nightly", "spec": BODY}, "job_template.create"),
        ("DELETE /api/v1/job-templates/{id}/", "alice", "/api/v1/job-templates/{template}/", None,
         "job_template.delete"),
        ("POST /api/v1/sweeps/", "alice", "/api/v1/sweeps/",
         {**BODY, "grid": {"env": {"LR": ["0.1", "0.2"]}}}, "sweep.submit"),
        ("POST /api/v1/sweeps/{id}/cancel/", "alice", "/api/v1/sweeps/{sweep}/cancel/", None,
         "job.cancel"),
        ("POST /api/v1/secrets/", "bob", "/api/v1/secrets/",
         {"team": "vision", "name": "wandb", "values": {"api-key": "k"}}, "secret.create"),
        ("DELETE /api/v1/secrets/{id}/", "bob", "/api/v1/secrets/{secret}/", None,
         "secret.delete"),
        ("POST /api/v1/volumes/", "bob", "/api/v1/volumes/",
         {"team": "vision", "name": "data", "size_gib": 1}, "volume.create"),
        ("PATCH /api/v1/volumes/{id}/", "bob", "/api/v1/volumes/{volume}/", {"size_gib": 2},
         "volume.resize"),
        ("DELETE /api/v1/volumes/{id}/", "bob", "/api/v1/volumes/{volume}/", None,
         "volume.delete"),
        ("POST /api/v1/quota-requests/", "alice", "/api/v1/quota-requests/",
         {"team": "vision", "pool": "{a100}", "nominal_gpus": 6, "justification": "paper"},
         "quota_request.create"),
        ("POST /api/v1/quota-requests/{id}/cancel/", "alice",
         "/api/v1/quota-requests/{quota_request}/cancel/", None, "quota_request.cancel"),
        ("POST /api/v1/quota-requests/", "alice", "/api/v1/quota-requests/",
         {"team": "vision", "pool": "{a100}", "nominal_gpus": 6, "justification": "paper"},
         "quota_request.create"),
        ("POST /api/v1/quota-requests/{id}/reject/", "maria",
         "/api/v1/quota-requests/{quota_request}/reject/", {"reason": "not this month"},
         "quota_request.reject"),
        ("POST /api/v1/quota-requests/", "alice", "/api/v1/quota-requests/",
         {"team": "vision", "pool": "{a100}", "nominal_gpus": 6, "justification": "paper"},
         "quota_request.create"),
        ("POST /api/v1/quota-requests/{id}/approve/", "maria",
         "/api/v1/quota-requests/{quota_request}/approve/", None, "quota_request.approve"),
        ("POST /api/v1/reservations/", "bob", "/api/v1/reservations/",
         {"team": "vision", "pool": "{l4}", "gpus": 1, "starts_at": "2099-01-01T00:00:00Z",
          "ends_at": "2099-01-01T06:00:00Z", "reason": "deadline"}, "reservation.request"),
        ("POST /api/v1/reservations/{id}/cancel/", "bob",
         "/api/v1/reservations/{reservation}/cancel/", None, "reservation.cancel"),
        ("POST /api/v1/reservations/", "bob", "/api/v1/reservations/",
         {"team": "vision", "pool": "{l4}", "gpus": 1, "starts_at": "2099-01-01T00:00:00Z",
          "ends_at": "2099-01-01T06:00:00Z", "reason": "deadline"}, "reservation.request"),
        ("POST /api/v1/reservations/{id}/reject/", "maria",
         "/api/v1/reservations/{reservation}/reject/", {"reason": "use quota"},
         "reservation.reject"),
        ("POST /api/v1/reservations/", "bob", "/api/v1/reservations/",
         {"team": "vision", "pool": "{l4}", "gpus": 1, "starts_at": "2099-01-01T00:00:00Z",
          "ends_at": "2099-01-01T06:00:00Z", "reason": "deadline"}, "reservation.request"),
        ("POST /api/v1/reservations/{id}/approve/", "maria",
         "/api/v1/reservations/{reservation}/approve/", None, "reservation.approve"),
        ("PUT /api/v1/reservation-settings/", "admin", "/api/v1/reservation-settings/",
         {"lead_minutes": 30}, "reservation.settings"),
        ("PATCH /api/v1/quota-auto-approval/", "admin", "/api/v1/quota-auto-approval/",
         {"enabled": True}, "quota_auto_approval.change"),
        ("POST /api/v1/whatif/", "maria", "/api/v1/whatif/", {"name": "plan", "days": 7},
         "whatif.create"),
        ("POST /api/v1/billing/budgets/", "frank", "/api/v1/billing/budgets/",
         {"team": "vision", "month": "2026-12", "amount": "1000"}, "budget.set"),
        ("POST /api/v1/billing/ledger/rate/", "frank", "/api/v1/billing/ledger/rate/",
         {"rate_per_gpu_hour": "1.50"}, "ledger.rate"),
        ("POST /api/v1/billing/prices/", "frank", "/api/v1/billing/prices/",
         {"gpu_model": "L4", "price_per_hour": "1.00", "effective_from": "2026-01-01T00:00:00Z"},
         "price.create"),
        ("PUT /api/v1/billing/energy/", "admin", "/api/v1/billing/energy/",
         {"pue": "1.30", "grams_per_kwh": "300"}, "energy_settings.update"),
        ("POST /api/v1/billing/energy/carbon-intensity/", "admin",
         "/api/v1/billing/energy/carbon-intensity/",
         {"csv": "2026-10-05T10:00:00Z,120\n"}, "carbon_intensity.upload"),
        ("POST /api/v1/billing/gpu-health/{cluster_id}/{node}/return/", "admin",
         "/api/v1/billing/gpu-health/{fault_cluster}/{fault_node}/return/",
         {"reason": "GPU reseated"}, "node.return_to_service"),
        ("POST /api/v1/billing/reports/{month}/{action}/", "frank",
         "/api/v1/billing/reports/2026-10/close/", None, "report.close"),
        ("POST /api/v1/billing/reports/{month}/{action}/", "admin",
         "/api/v1/billing/reports/2026-10/reopen/", {"reason": "late usage"}, "report.reopen"),
    ]  # fmt: skip


# Writes the walk does not make yet, each with why; the test fails when one of them leaves the
# schema (so this list cannot hide a removed endpoint) and lists them, so none is forgotten.
NOT_WALKED = {
    "POST /api/v1/jobs/{id}/resume/": "needs a running job the idle-GPU watch suspended "
    "(audited as job.idle_resume)",
    "POST /api/v1/whatif/{id}/apply/": "needs a what-if run a worker has replayed (audited as "
    "whatif.apply; tests/planning/test_whatif.py checks it)",
    "POST /api/v1/jobs/{id}/checkpoints/": "needs a running job (audited as job.checkpoint; "
    "tests/queues/test_protection.py checks it)",
}


def _fill(body, made):
    """The body with each value "{name}" replaced by what `made` holds under that name."""
    if isinstance(body, dict):
        return {key: _fill(value, made) for key, value in body.items()}
    if isinstance(body, str) and body.startswith("{") and body.endswith("}"):
        return made[body[1:-1]]
    return body


# What a step's answer made, for the urls of later steps.
MADE = {"/api/v1/tokens/": "token", "/api/v1/memberships/": "membership",
        "/api/v1/clusters/": "cluster", "/api/v1/pools/": "pool", "/api/v1/jobs/": "job",
        "/api/v1/tiers/": "tier", "/api/v1/job-templates/": "template", "/api/v1/sweeps/": "sweep",
        "/api/v1/secrets/": "secret", "/api/v1/volumes/": "volume",
        "/api/v1/quota-requests/": "quota_request",
        "/api/v1/reservations/": "reservation"}  # fmt: skip


def test_the_walk_covers_every_write_the_schema_offers(db):
    writes = _schema_writes()
    walked = {step[0] for step in _walk({}, "")}
    assert walked <= writes, f"Steps for writes the schema no longer has: {walked - writes}"
    assert set(NOT_WALKED) <= writes, set(NOT_WALKED) - writes
    missing = writes - walked - set(NOT_WALKED)
    assert not missing, f"Writes the audit walk does not make: {sorted(missing)}"


def _gpu_fault(w) -> dict:
    """A GPU fault the loop contained, for the walk to return its node to service."""
    from django.utils import timezone

    from billing.models import GpuFault

    GpuFault.objects.create(
        cluster=w["cluster"], node_name="a100-node-0", gpu_uuid="GPU-walk", reason="XID 79",
        detected_at=timezone.now(), state="contained",
    )  # fmt: skip
    return {"fault_cluster": w["cluster"].pk, "fault_node": "a100-node-0"}


def test_every_write_leaves_an_audit_event_naming_who(sim_jobs, api, tmp_path):
    w = sim_jobs
    from fleet.models import GpuModel

    GpuModel.objects.create(name="H100")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    made: dict[str, object] = {"a100": w["pools"]["a100"].pk, "l4": w["pools"]["l4"].pk,
                               **_gpu_fault(w)}  # fmt: skip
    holes = []
    for operation, who, url, body, verb in _walk(w, str(kubeconfig)):
        api.logout()
        if who:
            api.force_login(w[who])
        url = url.format(**made)
        body = _fill(body, made)
        method = operation.split()[0].lower()
        seen = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
        answer = getattr(api, method)(url, body, format="json")
        assert answer.status_code < 300, (operation, answer.status_code, answer.content[:300])
        data = answer.json() if answer.content else {}
        if method == "post" and isinstance(data, dict) and "id" in data and url in MADE:
            made[MADE[url]] = data["id"]
        events = AuditEvent.objects.filter(id__gt=seen, verb=verb)
        if who:
            events = events.filter(actor=w[who])
        if not events.exists():
            holes.append((operation, verb))
    assert not holes, f"Writes that left no audit event by whoever made them: {holes}"
    assert Job.objects.filter(resubmitted_from__isnull=False).exists()


def test_an_event_says_what_changed(jw, tmp_path):
    """Before and after hold only what changed, by name, as the person left it."""
    from fleet.services.clusters import cluster_register, cluster_update
    from fleet.services.pools import pool_update
    from queues.services.tenancy import membership_set

    admin, bob = jw["admin"], jw["bob"]
    membership_set(actor=bob, team=jw["vision"], username="alice", role="lead")
    event = AuditEvent.objects.get(verb="membership.update")
    assert (event.actor, event.before, event.after) == (
        bob, {"user": "alice", "role": "member"}, {"user": "alice", "role": "lead"})  # fmt: skip
    membership_set(actor=bob, team=jw["vision"], username="alice", role="lead")  # no change
    assert AuditEvent.objects.filter(verb__startswith="membership.").count() == 1
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    east = cluster_register(actor=admin, name="east", kubeconfig_path=str(kubeconfig))
    assert AuditEvent.objects.get(verb="cluster.register").after["name"] == "east"
    cluster_update(actor=admin, cluster=east, prometheus_url="http://prom.example:9090")
    event = AuditEvent.objects.get(verb="cluster.update")
    assert (event.before, event.after) == (
        {"prometheus_url": ""}, {"prometheus_url": "http://prom.example:9090"})  # fmt: skip
    pool_update(actor=admin, pool=jw["pools"]["a100"], interconnect="nvlink")
    event = AuditEvent.objects.get(verb="pool.update")
    assert (event.actor, event.before, event.after) == (
        admin, {"interconnect": "pcie"}, {"interconnect": "nvlink"})  # fmt: skip
