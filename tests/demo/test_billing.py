"""The demo seed: prices, budgets and last month's history, idempotent."""

from billing.models import Budget, UsageHour
from billing.periods import month_start
from billing.selectors.reports import finance_report
from demo.billing import seed_billing
from demo.fleet import seed_fleet
from demo.queues import seed_people, seed_quotas
from fleet.models import GpuPrice


def test_seed_billing_is_idempotent_and_gives_last_month_a_report(db, settings, tmp_path):
    settings.KUBECONFIG = str(tmp_path / "kubeconfig")
    seed_people()
    seed_fleet()
    seed_quotas()
    first = seed_billing()
    assert first["usage_rows"] == 64 * (first["usage_rows"] // 64) > 0
    again = seed_billing()
    assert again["usage_rows"] == 0 and again["prices"] == 0
    assert GpuPrice.objects.count() == 4
    assert Budget.objects.count() == 5
    last = UsageHour.objects.order_by("hour").first().hour
    report = finance_report(month=month_start(last))
    assert len(report["teams"]) == 5
    assert float(report["totals"]["cost"]) > 0
    assert report["idle_capacity"]


def test_the_demo_history_tells_the_truth(db, settings, tmp_path):
    """History jobs belong to their team's members, were submitted when they ran, name their
    cluster and command, have a complete timeline, and this month is filled up to now."""
    from django.utils import timezone

    from billing.dcgm import hour_start
    from queues.models import Job, Membership

    settings.KUBECONFIG = str(tmp_path / "kubeconfig")
    seed_people()
    seed_fleet()
    seed_quotas()
    seeded_at = timezone.now()  # the hours closed when seeding began are the ones filled
    seed_billing()
    jobs = Job.objects.filter(name__startswith="history-").select_related("team", "owner")
    assert jobs.count() > 100
    owners = {job.owner.username for job in jobs}
    assert len(owners) > 3  # not everything alice's
    members = set(Membership.objects.values_list("team_id", "user_id"))
    assert all((job.team_id, job.owner_id) in members for job in jobs)
    now = timezone.now()
    for job in jobs[:200]:
        assert job.created_at == job.submitted_at < job.queued_at < job.admitted_at
        assert job.admitted_at < job.started_at < job.finished_at <= now
        assert job.command and job.cluster_id and job.k8s_name.endswith(f"-{job.pk}")
        assert [t.to_state for t in job.transitions.all()] == [
            "submitted", "queued", "admitted", "running", "succeeded"
        ]  # fmt: skip
    from billing.periods import month_bounds

    first_hour = month_bounds(month_start(now))[0]
    rows = UsageHour.objects.filter(hour__gte=first_hour, hour__lt=hour_start(now))
    if hour_start(now) > first_hour:
        assert rows.exists()
        latest = rows.order_by("-hour").first().hour
        assert latest >= hour_start(seeded_at) - timezone.timedelta(hours=1)
