"""The borrowing and lending ledger: who borrowed from whom, sampled from admitted workloads in
kubesim; priced at finance's rate on the monthly bill, frozen when a month is closed; its page
and API, scoped like every billing figure."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.exports import report_csv, report_focus_csv
from billing.models import LedgerHour, LedgerRate, LedgerState, MonthlyReport
from billing.periods import month_start
from billing.selectors.reports import build_report
from billing.services.ledger import (
    borrowing_split,
    ledger_rate_set,
    ledger_record,
    ledger_sample_cluster,
)
from billing.services.months import report_close
from fleet.models import Cluster, GpuModel, NodePool
from queues.backends.kueue import held_by_queue, held_by_team_and_pool
from queues.backends.volcano import held_by_volcano_queue
from queues.models import AuditEvent, Quota
from queues.services.jobs.apply import job_apply
from tests.queues.builders import sim_jobs_setup, submit, sync_until

LAST_MONTH = month_start(month_start(timezone.now().date()) - timedelta(days=1))
T0 = datetime(LAST_MONTH.year, LAST_MONTH.month, 3, 10, 0, tzinfo=UTC)


def _quota(team, pool, nominal, lending=None):
    return Quota(team=team, pool=pool, nominal_gpus=nominal, lending_limit=lending)


def _ids(*objs):
    return tuple(o.pk for o in objs)


@pytest.fixture
def pools(world):
    cluster = Cluster.objects.create(name="prod", kubeconfig_path="/dev/null", is_default=True)
    model = GpuModel.objects.create(name="A100", dcgm_model_names=["NVIDIA A100"])
    a100 = NodePool.objects.create(cluster=cluster, name="a100", gpu_model=model)
    return {"cluster": cluster, "a100": a100, **world}


def test_a_team_borrows_what_it_holds_beyond_quota_and_its_cohort_lends_it(pools):
    w = pools
    teams = {t.pk: t for t in (w["vision"], w["nlp"], w["recsys"])}
    quotas = [
        _quota(w["vision"], w["a100"], 8),
        _quota(w["nlp"], w["a100"], 4),
        _quota(w["recsys"], w["a100"], 8),  # another department: never lends to research
    ]
    for q in quotas:
        q.team_id, q.pool_id = q.team.pk, q.pool.pk
    held = {_ids(w["vision"], w["a100"]): 11, _ids(w["recsys"], w["a100"]): 2}
    split = borrowing_split(held=held, quotas=quotas, teams=teams)
    assert split == {
        _ids(w["vision"], w["a100"]): (3, 0),
        _ids(w["nlp"], w["a100"]): (0, 3),
    }


def test_lending_is_shared_in_proportion_to_idle_quota_within_the_lending_limit(pools, world):
    from tests.factories import TeamFactory

    w = pools
    third = TeamFactory(slug="speech", name="Speech", department=w["research"])
    teams = {t.pk: t for t in (w["vision"], w["nlp"], third)}
    quotas = [
        _quota(w["vision"], w["a100"], 2),
        _quota(w["nlp"], w["a100"], 8, lending=6),  # 8 idle, lends at most 6
        _quota(third, w["a100"], 3),  # 3 idle
    ]
    for q in quotas:
        q.team_id, q.pool_id = q.team.pk, q.pool.pk
    held = {_ids(w["vision"], w["a100"]): 8}  # borrows 6 of the 9 lendable
    split = borrowing_split(held=held, quotas=quotas, teams=teams)
    assert split[_ids(w["vision"], w["a100"])] == (6, 0)
    assert split[_ids(w["nlp"], w["a100"])] == (0, 4)  # 6 × 6/9
    assert split[_ids(third, w["a100"])] == (0, 2)  # 6 × 3/9
    lent = sum(v[1] for v in split.values())
    assert lent == 6


def test_only_workloads_holding_quota_count(pools):
    admitted = {
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admission": {
                "clusterQueue": "qm-vision",
                "podSetAssignments": [
                    {
                        "flavors": {"nvidia.com/gpu": "a100", "cpu": "a100"},
                        "resourceUsage": {"nvidia.com/gpu": "6", "cpu": "12"},
                    },
                ],  # fmt: skip
            },
        }
    }
    finished = {
        "status": {
            **admitted["status"],
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Finished", "status": "True"},
            ],
        }
    }
    pending = {"status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]}}
    held = held_by_queue([admitted, finished, pending], {"a100": "nvidia.com/gpu"})
    assert dict(held) == {("qm-vision", "a100"): 6}


def _workload(cq, gpus):
    return {
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admission": {
                "clusterQueue": cq,
                "podSetAssignments": [
                    {
                        "flavors": {"nvidia.com/gpu": "a100"},
                        "resourceUsage": {"nvidia.com/gpu": str(gpus)},
                    },
                ],  # fmt: skip
            },
        }
    }


def test_samples_credit_the_time_between_them_split_at_the_hour(pools):
    w = pools
    Quota.objects.create(team=w["vision"], pool=w["a100"], nominal_gpus=8, borrowing_limit=4)
    Quota.objects.create(team=w["nlp"], pool=w["a100"], nominal_gpus=4)
    held = held_by_team_and_pool([_workload("qm-vision", 10)], cluster=w["cluster"])
    assert held == {(w["vision"].pk, w["a100"].pk): 10}
    start = T0 + timedelta(minutes=59)
    assert ledger_record(cluster=w["cluster"], held=held, now=start) == 0  # first: no span
    ledger_record(cluster=w["cluster"], held=held, now=start + timedelta(seconds=90))
    rows = {(r.hour, r.team.slug): r for r in LedgerHour.objects.select_related("team")}
    # 60 s in the first hour, 30 s in the next; 2 GPUs borrowed from nlp all along.
    assert rows[(T0, "vision")].borrowed_seconds == 120
    assert rows[(T0 + timedelta(hours=1), "vision")].borrowed_seconds == 60
    assert rows[(T0, "nlp")].lent_seconds == 120
    assert rows[(T0 + timedelta(hours=1), "nlp")].lent_seconds == 60
    # A silence longer than MAX_GAP is a gap: only the last 3 minutes are credited.
    ledger_record(cluster=w["cluster"], held=held, now=start + timedelta(hours=2))
    later = LedgerHour.objects.get(hour=T0 + timedelta(hours=2), team=w["vision"])
    assert later.borrowed_seconds == 2 * 180


@pytest.fixture
def sim_jobs(world, sim_cluster_synced):
    return sim_jobs_setup(world, sim_cluster_synced)


def test_borrowing_in_kubesim_is_sampled_into_the_ledger(sim_jobs):
    # vision: 8 A100 of its own and may borrow 4; nlp lends its 4 idle A100.
    job = submit(sim_jobs, name="wide", workers=3, gpus_per_worker=4, expected_runtime_seconds=900)
    job_apply(job_id=job.pk)
    job = sync_until(job, "running")
    assert job.state == "running"
    cluster = sim_jobs["cluster"]
    now = timezone.now()
    ledger_sample_cluster(cluster=cluster, now=now)
    ledger_sample_cluster(cluster=cluster, now=now + timedelta(seconds=60))
    a100 = sim_jobs["pools"]["a100"]
    borrowed = LedgerHour.objects.filter(team=sim_jobs["vision"], pool=a100)
    lent = LedgerHour.objects.filter(team=sim_jobs["nlp"], pool=a100)
    assert sum(r.borrowed_seconds for r in borrowed) == 4 * 60
    assert sum(r.lent_seconds for r in lent) == 4 * 60
    assert not LedgerHour.objects.filter(team=sim_jobs["recsys"]).exists()
    assert LedgerState.objects.get(cluster=cluster).last_sample_at == now + timedelta(seconds=60)


def test_borrowing_on_a_volcano_cluster_is_read_from_the_team_queues(world):
    """vision runs 12 A100 GPUs on a Volcano cluster where its queue deserves 8: it borrowed
    4 from its department, which nlp's idle 4 lent."""
    from queues.manifests.quotas import VOLCANO_QUEUE_API, volcano_pool_queue_name
    from tests.conftest import wait_until
    from tests.fixtures_cluster import make_sim_cluster

    with make_sim_cluster(scheduler="volcano") as sim:
        sim.sync()
        w = sim_jobs_setup(world, sim)
        job = submit(w, name="wide", workers=3, gpus_per_worker=4, expected_runtime_seconds=900)
        assert job_apply(job_id=job.pk) == "applied"
        assert sync_until(job, "running").state == "running"
        queue = volcano_pool_queue_name(w["vision"], sim.pools["a100"])

        def allocated():  # kubesim writes queue status a moment after it binds
            live = sim.kube.get(VOLCANO_QUEUE_API, "Queue", queue) or {}
            return (live.get("status") or {}).get("allocated", {}).get("nvidia.com/gpu") == "12"

        assert wait_until(allocated, timeout=10)
        now = timezone.now()
        ledger_sample_cluster(cluster=sim.cluster, now=now)
        ledger_sample_cluster(cluster=sim.cluster, now=now + timedelta(seconds=60))
    a100 = sim.pools["a100"]
    assert sum(r.borrowed_seconds for r in LedgerHour.objects.filter(
        team=w["vision"], pool=a100)) == 4 * 60  # fmt: skip
    assert sum(r.lent_seconds for r in LedgerHour.objects.filter(
        team=w["nlp"], pool=a100)) == 4 * 60  # fmt: skip
    assert held_by_volcano_queue({(1, 2): {"status": {"allocated": {"nvidia.com/gpu": "3"}}},
                                  (1, 3): None}, {2: "nvidia.com/gpu", 3: "nvidia.com/gpu"}) == {
        (1, 2): 3}  # fmt: skip


@pytest.fixture
def ledger_month(pools):
    w = pools
    hours = [(w["vision"], 7200, 0), (w["nlp"], 0, 5400), (w["recsys"], 0, 1800)]
    for team, borrowed, lent in hours:
        LedgerHour.objects.create(
            hour=T0, cluster=w["cluster"], pool=w["a100"], team=team,
            borrowed_seconds=borrowed, lent_seconds=lent, samples=60,
        )  # fmt: skip
    LedgerRate.objects.create(
        rate_per_gpu_hour=Decimal("0.5000"), effective_from=T0 - timedelta(days=1)
    )
    # From noon on the rate doubles: an hour is priced at the rate in force at its start.
    LedgerRate.objects.create(
        rate_per_gpu_hour=Decimal("1.0000"), effective_from=T0 + timedelta(hours=2)
    )
    LedgerHour.objects.create(
        hour=T0 + timedelta(hours=3), cluster=w["cluster"], pool=w["a100"], team=w["vision"],
        borrowed_seconds=3600, lent_seconds=0, samples=60,
    )  # fmt: skip
    return w


def test_the_monthly_bill_charges_borrowers_and_credits_lenders_as_separate_lines(ledger_month):
    report = build_report(month=LAST_MONTH)
    rows = {r["team"]: r for r in report["teams"]}
    vision = rows["vision"]["ledger"]
    # 2 GPU-h at 0.50 then 1 GPU-h at 1.00
    assert vision["gpu_hours_borrowed"] == "3.0000"
    assert vision["charge"] == "2.00" and vision["credit"] == "0.00"
    assert rows["nlp"]["ledger"]["credit"] == "0.75" and rows["nlp"]["ledger"]["net"] == "-0.75"
    assert rows["recsys"]["ledger"]["credit"] == "0.25"
    assert rows["nlp"]["amount_due"] == str(Decimal(rows["nlp"]["cost"]) - Decimal("0.75"))
    assert report["totals"]["ledger_charges"] == "2.00"
    assert report["totals"]["ledger_credits"] == "1.00"


def test_the_exports_carry_the_ledger_lines_and_their_totals_add_up(ledger_month):
    report = build_report(month=LAST_MONTH)
    rows = list(csv.DictReader(io.StringIO(report_csv(report))))
    vision = [r for r in rows if r["team"] == "vision"]
    assert [(r["gpu_model"], r["cost"]) for r in vision] == [
        ("borrowed from the cohort (3.0000 GPU-hours)", "2.00")]  # fmt: skip
    nlp = [r for r in rows if r["team"] == "nlp"]
    assert [(r["gpu_model"], r["cost"]) for r in nlp] == [
        ("lent to the cohort (1.5000 GPU-hours)", "-0.75")]  # fmt: skip
    total = next(r for r in rows if r["team"] == "TOTAL")
    lines = [r for r in rows if r["team"] != "TOTAL"]
    assert sum(Decimal(r["cost"]) for r in lines) == Decimal(total["cost"])
    assert Decimal(total["cost"]) == Decimal(report["totals"]["cost"]) + Decimal("2.00") - Decimal(
        "1.00"
    )
    focus = list(csv.DictReader(io.StringIO(report_focus_csv(report))))
    by_team = {(r["SubAccountId"], r["ChargeCategory"]): r for r in focus}
    assert by_team[("vision", "Usage")]["BilledCost"] == "2.00"
    assert by_team[("vision", "Usage")]["ConsumedQuantity"] == "3.0000"
    assert by_team[("nlp", "Credit")]["BilledCost"] == "-0.75"
    assert by_team[("recsys", "Credit")]["ServiceName"] == "GPU quota borrowing"
    # A closed month exports its frozen lines alike.
    report_close(actor=ledger_month["frank"], month=LAST_MONTH)
    frozen = MonthlyReport.objects.get(month=LAST_MONTH).snapshot
    assert report_csv(frozen) == report_csv(report)


def test_closing_a_month_freezes_its_ledger_lines(ledger_month):
    w = ledger_month
    report_close(actor=w["frank"], month=LAST_MONTH)
    # Late samples after the close do not change what was billed.
    LedgerHour.objects.filter(team=w["vision"]).update(borrowed_seconds=36000)
    frozen = MonthlyReport.objects.get(month=LAST_MONTH).snapshot
    vision = next(r for r in frozen["teams"] if r["team"] == "vision")
    assert vision["ledger"]["charge"] == "2.00"


def test_ledger_api_shows_each_caller_only_their_teams(ledger_month, api_as):
    w = ledger_month
    month = f"{LAST_MONTH:%Y-%m}"

    def teams_seen(user):
        response = api_as(user).get(f"/api/v1/billing/ledger/?month={month}")
        assert response.status_code == 200
        return {r["team"] for r in response.json()["teams"]}

    assert teams_seen(w["frank"]) == {"vision", "nlp", "recsys"}
    assert teams_seen(w["alice"]) == {"vision"}
    assert teams_seen(w["carol"]) == {"nlp"}
    assert teams_seen(w["maria"]) == {"vision", "nlp"}
    assert teams_seen(w["pablo"]) == {"recsys"}
    bad = api_as(w["frank"]).get("/api/v1/billing/ledger/?month=2026-13")
    assert bad.status_code == 400 and "month" in bad.json()


def test_ledger_api_of_a_closed_month_answers_the_frozen_lines(ledger_month, api_as):
    w = ledger_month
    report_close(actor=w["frank"], month=LAST_MONTH)
    LedgerHour.objects.filter(team=w["nlp"]).delete()
    body = api_as(w["carol"]).get(f"/api/v1/billing/ledger/?month={LAST_MONTH:%Y-%m}").json()
    assert body["closed"] is True
    assert [(r["team"], r["credit"]) for r in body["teams"]] == [("nlp", "0.75")]


def test_only_finance_sets_the_rate_and_bad_rates_say_what_to_fix(pools, api_as):
    w = pools
    url = "/api/v1/billing/ledger/rate/"
    denied = api_as(w["alice"]).post(url, {"rate_per_gpu_hour": "1"}, format="json")
    assert denied.status_code == 403
    negative = api_as(w["frank"]).post(url, {"rate_per_gpu_hour": "-1"}, format="json")
    assert negative.status_code == 400 and "rate_per_gpu_hour" in negative.json()
    junk = api_as(w["frank"]).post(url, {"rate_per_gpu_hour": "lots"}, format="json")
    assert junk.status_code == 400 and "rate_per_gpu_hour" in junk.json()
    assert not LedgerRate.objects.exists()
    made = api_as(w["frank"]).post(url, {"rate_per_gpu_hour": "0.4", "note": "FY27"}, format="json")
    assert made.status_code == 201 and made.json()["rate_per_gpu_hour"] == "0.4000"
    assert api_as(w["alice"]).get(url).json()[0]["note"] == "FY27"
    event = AuditEvent.objects.get(verb="ledger.rate")
    assert event.after["rate_per_gpu_hour"] == "0.4000"


def test_the_service_refuses_what_the_form_might_let_through(pools):
    w = pools
    from django.core.exceptions import PermissionDenied, ValidationError

    with pytest.raises(PermissionDenied):
        ledger_rate_set(actor=w["maria"], rate_per_gpu_hour="1")
    with pytest.raises(ValidationError) as exc:
        ledger_rate_set(actor=w["frank"], rate_per_gpu_hour="0.00001")
    assert "four decimal places" in str(exc.value)


def test_ledger_page_scoped_and_finance_form_errors(ledger_month, client):
    w = ledger_month
    client.force_login(w["alice"])
    page = client.get(f"/billing/ledger/?month={LAST_MONTH:%Y-%m}")
    assert page.status_code == 200
    body = page.content.decode()
    assert 'data-team="vision"' in body and 'data-team="nlp"' not in body
    assert "Set the borrowing rate" not in body
    assert client.post("/billing/ledger/", {"rate_per_gpu_hour": "1"}).status_code == 403
    client.force_login(w["frank"])
    bad = client.post("/billing/ledger/", {"rate_per_gpu_hour": "-2"})
    assert bad.status_code == 400 and "greater than or equal to 0" in bad.content.decode()
    assert client.get("/billing/ledger/?month=nonsense").status_code == 404
