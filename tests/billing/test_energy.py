"""Energy and carbon per job, team and month (issue #35): the arithmetic against hand-computed
figures, the carbon intensity series upload, who sees which figures, and the export columns."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from openpyxl import load_workbook

from billing.energy import EnergySums, add_figures, energy_figures
from billing.models import CarbonIntensityHour, EnergySettings
from queues.models import AuditEvent
from tests.billing.conftest import make_job, make_price
from tests.factories import UsageHourFactory

H = datetime(2026, 10, 5, 10, tzinfo=UTC)
# 300 W for one hour, in joules.
J_300W_HOUR = 300 * 3600


def test_the_arithmetic_of_two_gpus_for_three_hours_at_300_watts():
    """2 GPUs × 3 h × 300 W = 1.8 kWh; × PUE 1.2 = 2.16 kWh; × 400 g/kWh = 864 g."""
    sums = EnergySums(joules=6 * J_300W_HOUR, measured_rows=6, weighted=6 * J_300W_HOUR * 400.0)
    figures = energy_figures(sums, pue=Decimal("1.2"))
    assert figures["gpu_energy_kwh"] == "1.800"
    assert figures["facility_energy_kwh"] == "2.160"
    assert figures["co2e_kg"] == "0.864"
    assert figures["gpu_hours_not_measured"] == "0.0000"
    assert "estimate" in figures["estimate"]


def test_nothing_measured_is_not_zero_and_missing_intensity_is_no_estimate():
    unmeasured = energy_figures(EnergySums(seconds_not_measured=5400), pue=Decimal("1.2"))
    assert unmeasured["gpu_energy_kwh"] is None and unmeasured["co2e_kg"] is None
    assert unmeasured["facility_energy_kwh"] is None
    assert unmeasured["gpu_hours_not_measured"] == "1.5000"
    # Energy in an hour without any carbon intensity: kWh yes, CO2e no.
    partial = EnergySums(joules=2 * J_300W_HOUR, measured_rows=2, weighted=J_300W_HOUR * 400.0,
                         joules_without_intensity=J_300W_HOUR)  # fmt: skip
    figures = energy_figures(partial, pue=Decimal("1.0"))
    assert figures["gpu_energy_kwh"] == "0.600" and figures["co2e_kg"] is None


def test_adding_frozen_figures_keeps_unknowns_unknown():
    a = energy_figures(EnergySums(joules=J_300W_HOUR, measured_rows=1, weighted=J_300W_HOUR
                                  * 400.0), pue=Decimal("1.2"))  # fmt: skip
    b = energy_figures(EnergySums(seconds_not_measured=3600), pue=Decimal("1.2"))
    total = add_figures([a, b, None])
    assert total["gpu_energy_kwh"] == "0.300" and total["co2e_kg"] == "0.144"
    assert total["gpu_hours_not_measured"] == "1.0000"
    assert add_figures([b])["gpu_energy_kwh"] is None
    assert add_figures([None]) is None


def _site(pue="1.20", grams="400.0"):
    EnergySettings.objects.update_or_create(
        pk=1, defaults={"pue": Decimal(pue), "grams_per_kwh": grams and Decimal(grams)}
    )


def _job_hours(prod, job, *, unmeasured_hours=1):
    """2 GPUs × 3 h at 300 W, then `unmeasured_hours` GPU-hours with no energy reading."""
    for i in range(3):
        for uuid in ("GPU-a", "GPU-b"):
            UsageHourFactory(
                cluster=prod["cluster"], hour=H + timedelta(hours=i), gpu_uuid=uuid, pod="w-0",
                team=job.team, job=job, gpu_model=prod["a100"], energy_joules=J_300W_HOUR,
            )  # fmt: skip
    for i in range(unmeasured_hours):
        UsageHourFactory(
            cluster=prod["cluster"], hour=H + timedelta(hours=3 + i), gpu_uuid="GPU-a", pod="w-0",
            team=job.team, job=job, gpu_model=prod["a100"], energy_joules=None,
        )  # fmt: skip


@pytest.fixture
def measured(world, prod):
    make_price(prod["a100"], "2.0000")
    _site()
    job = make_job(world["vision"], world["alice"], name="measured")
    _job_hours(prod, job)
    return job


def test_a_jobs_energy_in_the_api_and_on_its_page(world, measured, api_as, client):
    body = api_as(world["alice"]).get(reverse("billing-api-job-usage", args=[measured.pk])).json()
    energy = body["energy"]
    assert energy["gpu_energy_kwh"] == "1.800"
    assert energy["facility_energy_kwh"] == "2.160"
    assert energy["co2e_kg"] == "0.864"
    assert energy["gpu_hours_not_measured"] == "1.0000"  # the 4th hour: counted, not 0 kWh
    assert body["cost"] == "14.00"  # 7 GPU-hours × 2.00: energy beside the cost
    client.force_login(world["alice"])
    panel = client.get(reverse("billing-job-usage", args=[measured.pk])).content.decode()
    assert 'data-testid="energy-job"' in panel
    assert "1.800 kWh" in panel and "0.864 kg CO2e" in panel
    assert "1.00 GPU-h not measured" in panel


def test_the_hourly_series_replaces_the_constant_where_it_has_the_hour(world, measured, api_as):
    """Hour 0 at 100 g/kWh, the others at the constant 400: 2×0.3 kWh×100 + 4×0.3×400 = 540 g,
    × PUE 1.2 = 648 g."""
    CarbonIntensityHour.objects.create(hour=H, grams_per_kwh=100.0)
    body = api_as(world["alice"]).get(reverse("billing-api-job-usage", args=[measured.pk])).json()
    assert body["energy"]["co2e_kg"] == "0.648"
    # No constant: the hours the series lacks have no intensity, so no CO2e estimate at all.
    _site(grams=None)
    body = api_as(world["alice"]).get(reverse("billing-api-job-usage", args=[measured.pk])).json()
    assert body["energy"]["co2e_kg"] is None and body["energy"]["gpu_energy_kwh"] == "1.800"


def test_the_months_report_per_team_and_in_total(world, measured, prod, api_as):
    other = make_job(world["nlp"], world["carol"], name="theirs")
    UsageHourFactory(cluster=prod["cluster"], hour=H, gpu_uuid="GPU-n", pod="n-0",
                     team=other.team, job=other, gpu_model=prod["a100"],
                     energy_joules=2 * J_300W_HOUR)  # fmt: skip
    body = api_as(world["frank"]).get(reverse("billing-api-report", args=["2026-10"])).json()
    teams = {t["team"]: t for t in body["teams"]}
    assert teams["vision"]["energy"]["gpu_energy_kwh"] == "1.800"
    assert teams["vision"]["energy"]["co2e_kg"] == "0.864"
    assert teams["vision"]["lines"][0]["energy"]["facility_energy_kwh"] == "2.160"
    assert teams["nlp"]["energy"]["gpu_energy_kwh"] == "0.600"
    assert body["totals"]["energy"]["gpu_energy_kwh"] == "2.400"
    assert body["totals"]["energy"]["gpu_hours_not_measured"] == "1.0000"
    # The team billing page shows the team's.
    from django.test import Client

    page = Client()
    page.force_login(world["bob"])
    team_page = page.get(reverse("billing-team", args=["vision"]))
    assert team_page.status_code == 200


def test_who_sees_which_energy(world, measured, api_as, client):
    """As for cost: the job's owner and team, their managers, finance; nobody else."""
    url = reverse("billing-api-job-usage", args=[measured.pk])
    assert api_as(world["carol"]).get(url).status_code == 404  # another team's member
    assert api_as(world["pablo"]).get(url).status_code == 404  # another department's manager
    assert api_as(world["maria"]).get(url).json()["energy"]["gpu_energy_kwh"] == "1.800"
    report = reverse("billing-api-report", args=["2026-10"])
    carol = api_as(world["carol"]).get(report).json()
    assert "vision" not in {t["team"] for t in carol["teams"]}
    assert carol["totals"]["energy"]["gpu_energy_kwh"] is None  # nlp has none this month
    pablo = api_as(world["pablo"]).get(report, {"format": "csv"}).content.decode()
    assert "vision" not in pablo
    client.force_login(world["carol"])
    page = client.get(reverse("billing-report", args=["2026-10"])).content.decode()
    assert "1.800 kWh" not in page


def test_exports_carry_energy_columns_marked_as_estimates(world, measured, api_as):
    client = api_as(world["frank"])
    url = reverse("billing-api-report", args=["2026-10"])
    rows = list(csv.DictReader(io.StringIO(client.get(url, {"format": "csv"}).content.decode())))
    vision = next(r for r in rows if r["team"] == "vision")
    total = next(r for r in rows if r["team"] == "TOTAL")
    assert vision["gpu_energy_kwh"] == "1.800"
    assert vision["facility_energy_kwh_estimate"] == "2.160"
    assert vision["co2e_kg_estimate"] == "0.864"
    assert vision["gpu_hours_energy_not_measured"] == "1.0000"
    assert total["gpu_energy_kwh"] == "1.800"
    focus = list(csv.DictReader(io.StringIO(client.get(url, {"format": "focus"}).content.decode())))
    line = focus[0]
    assert line["x_GpuEnergyKWh"] == "1.800"
    assert line["x_FacilityEnergyKWhEstimate"] == "2.160"
    assert line["x_CO2eKgEstimate"] == "0.864"
    assert line["x_EnergyNotMeasuredGpuHours"] == "1.0000"
    custom = [c for c in line if c not in ("BilledCost",) and c.startswith("x_")]
    assert len(custom) == 4
    ws = load_workbook(io.BytesIO(client.get(url, {"format": "xlsx"}).content)).active
    header = [c.value for c in ws[1]]
    row = [c.value for c in ws[2]]
    assert row[header.index("co2e_kg_estimate")] == pytest.approx(0.864)


def test_an_unmeasured_team_shows_not_measured_never_zero(world, prod, api_as):
    _site()
    job = make_job(world["vision"], world["alice"], name="dark")
    UsageHourFactory(
        cluster=prod["cluster"], hour=H, gpu_uuid="GPU-d", pod="d-0", team=job.team, job=job,
        gpu_model=prod["a100"], energy_joules=None,
    )  # fmt: skip
    client = api_as(world["frank"])
    url = reverse("billing-api-report", args=["2026-10"])
    rows = list(csv.DictReader(io.StringIO(client.get(url, {"format": "csv"}).content.decode())))
    vision = next(r for r in rows if r["team"] == "vision")
    assert vision["gpu_energy_kwh"] == "" and vision["co2e_kg_estimate"] == ""
    assert vision["gpu_hours_energy_not_measured"] == "1.0000"


# ---------------------------------------------------------------------------------------------
# Settings and the series upload

GOOD = "hour_start,grams_per_kwh\n2026-10-05T10:00:00Z,100\n2026-10-05T11:00:00+00:00,250.5\n"


def _upload(client, text: str):
    return client.post(
        reverse("billing-api-carbon-intensity"),
        {"file": SimpleUploadedFile("grid.csv", text.encode(), content_type="text/csv")},
        format="multipart",
    )


def test_an_admin_uploads_a_series_and_the_upload_is_audited(world, api_as):
    r = _upload(api_as(world["admin"]), GOOD)
    assert r.status_code == 201 and r.json() == {"hours": 2}
    assert dict(CarbonIntensityHour.objects.values_list("hour", "grams_per_kwh")) == {
        H: 100.0, H + timedelta(hours=1): 250.5,
    }  # fmt: skip
    event = AuditEvent.objects.get(verb="carbon_intensity.upload")
    assert event.actor == world["admin"] and event.after["hours"] == 2
    # Uploading the hour again replaces it.
    assert _upload(api_as(world["admin"]), "2026-10-05T10:00:00Z,90\n").status_code == 201
    assert CarbonIntensityHour.objects.get(hour=H).grams_per_kwh == 90.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-10-05T10:00:00Z,1\n2026-10-05T11:00:00Z,abc\n", "line 2: 'abc' is not a number"),
        ("2026-10-05T10:00:00Z,1\n2026-10-05T11:00:00Z,50%\n", "line 2: '50%' is not a number"),
        ("hour,g\nyesterday,100\n", "line 2: 'yesterday' is not an ISO 8601"),
        ("2026-10-05T10:30:00Z,100\n", "is not the start of an hour"),
        ("2026-10-05T10:00:00Z,-5\n", "zero or more"),
        ("2026-10-05T10:00:00Z,nan\n", "zero or more"),
        ("2026-10-05T10:00:00Z,1,2\n", "expected 2 columns"),
        ("2026-10-05T10:00:00Z,1\n2026-10-05T10:00:00Z,2\n", "is given twice"),
        ("2026-13-45T10:00:00Z,1\n", "is not an ISO 8601"),
        ("hour_start,grams_per_kwh\n", "no hours"),
    ],
)
def test_a_bad_series_is_400_with_its_lines_and_nothing_is_stored(world, api_as, text, expected):
    r = _upload(api_as(world["admin"]), GOOD.split("\n", 1)[1] + text if "twice" in expected
                else text)  # fmt: skip
    assert r.status_code == 400, r.content
    assert any(expected in message for message in r.json()["file"]), r.json()
    assert not CarbonIntensityHour.objects.exists()


def test_a_binary_or_missing_file_is_400(world, api_as):
    client = api_as(world["admin"])
    r = client.post(
        reverse("billing-api-carbon-intensity"),
        {"file": SimpleUploadedFile("x.csv", b"\xff\xfe\x00bad")},
        format="multipart",
    )
    assert r.status_code == 400 and "UTF-8" in r.json()["file"][0]
    r = client.post(reverse("billing-api-carbon-intensity"), {}, format="multipart")
    assert r.status_code == 400 and "file" in r.json()


def test_only_platform_admins_set_pue_and_upload(world, api_as, client):
    assert _upload(api_as(world["frank"]), GOOD).status_code == 403
    assert _upload(api_as(world["alice"]), GOOD).status_code == 403
    url = reverse("billing-api-energy")
    assert api_as(world["frank"]).put(url, {"pue": "1.1"}, format="json").status_code == 403
    assert api_as(world["frank"]).get(url).json()["pue"] == "1.20"  # the default
    assert api_as(world["alice"]).get(url).status_code == 403
    r = api_as(world["admin"]).put(url, {"pue": "0.9"}, format="json")
    assert r.status_code == 400 and "pue" in r.json()
    r = api_as(world["admin"]).put(url, {"pue": "1.35", "grams_per_kwh": "210"}, format="json")
    assert r.status_code == 200 and r.json()["pue"] == "1.35"
    site = EnergySettings.current()
    assert site.pue == Decimal("1.35") and site.grams_per_kwh == Decimal("210")
    event = AuditEvent.objects.get(verb="energy_settings.update")
    assert event.actor == world["admin"] and event.before["pue"] == "1.20"
    client.force_login(world["alice"])
    assert client.get(reverse("billing-energy")).status_code == 403


def test_the_settings_page_saves_and_shows_upload_errors(world, client):
    client.force_login(world["admin"])
    url = reverse("billing-energy")
    assert client.get(url).status_code == 200
    r = client.post(url, {"action": "settings", "pue": "1.15", "grams_per_kwh": "300"})
    assert r.status_code == 302 and EnergySettings.current().pue == Decimal("1.15")
    bad = SimpleUploadedFile("grid.csv", b"2026-10-05T10:00:00Z,lots\n", content_type="text/csv")
    r = client.post(url, {"action": "series", "file": bad})
    assert r.status_code == 400 and "is not a number" in r.content.decode()
    good = SimpleUploadedFile("grid.csv", GOOD.encode(), content_type="text/csv")
    r = client.post(url, {"action": "series", "file": good})
    assert r.status_code == 302
    page = client.get(url).content.decode()
    assert "2 hours from 2026-10-05 10:00" in page and "by admin" in page
    r = client.post(url, {"action": "settings", "pue": "abc"})
    assert r.status_code == 400


def test_the_api_takes_the_series_as_json_text_too(world, api_as):
    url = reverse("billing-api-carbon-intensity")
    r = api_as(world["admin"]).post(url, {"csv": GOOD}, format="json")
    assert r.status_code == 201 and r.json() == {"hours": 2}
    # A lone surrogate (JSON escapes one) is refused, never stored and never a 500.
    body = '{"csv": "2026-10-05T10:00:00Z,1\\ud800\\n"}'
    r = api_as(world["admin"]).post(url, body, content_type="application/json")
    assert r.status_code == 400, r.content
    assert CarbonIntensityHour.objects.count() == 2
    r = api_as(world["admin"]).post(url, {"csv": 5}, format="json")
    assert r.status_code == 400 and "file" in r.json()


def test_a_series_with_a_stray_carriage_return_is_a_400_and_old_line_endings_are_lines(
    world, api_as
):
    """Found by the schema property tests (#32): a carriage return inside a line made the csv
    module raise, a 500. Any line ending is one now; what still cannot be read is a 400."""
    url = reverse("billing-api-carbon-intensity")
    client = api_as(world["admin"])
    r = client.post(url, {"csv": "\r£X\t\b"}, format="json")
    assert r.status_code == 400, r.content
    assert "file" in r.json()
    r = client.post(url, {"csv": "2026-10-05T10:00:00Z,1\r2026-10-05T11:00:00Z,2\r"}, format="json")
    assert r.status_code == 201 and r.json() == {"hours": 2}, r.content
