"""The alert rules the chart ships (deploy/helm/quartermaster/files/alert-rules.yaml): valid for
`promtool check rules`, each alert unit-tested by `promtool test rules` (alert_rules_test.yaml:
it fires on the series that should raise it, after its `for`, and not on the others), and every
metric they read is one the portal exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.urls import reverse

from cluster import helm

RULES = helm.CHART / "files" / "alert-rules.yaml"
UNIT_TESTS = Path(__file__).with_name("alert_rules_test.yaml")
ALERTS = {
    "QuartermasterClusterUnreachable",
    "QuartermasterQueueBackingUp",
    "QuartermasterBillingIngestionBehind",
    "QuartermasterNoWorkerHeartbeat",
}


def _promtool(*args: str) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: scripts/ensure-test-services.sh installs Debian's "
                    "prometheus package", pytrace=False)  # fmt: skip
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120)


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_promtool_checks_the_rules():
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout
    assert {r["alert"] for r in _rules()} == ALERTS


def test_promtool_refuses_a_broken_rule(tmp_path):
    broken = tmp_path / "rules.yaml"
    broken.write_text(RULES.read_text().replace("> 100", "> > 100", 1))
    done = _promtool("check", "rules", str(broken))
    assert done.returncode != 0 and "QuartermasterQueueBackingUp" in done.stdout + done.stderr


def test_each_alert_fires_and_stays_quiet_as_its_unit_test_says():
    done = _promtool("test", "rules", str(UNIT_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    tested = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    cases = [case for test in tested for case in test["alert_rule_test"]]
    for alert in ALERTS:
        mine = [c for c in cases if c["alertname"] == alert]
        assert any(c["exp_alerts"] for c in mine), f"{alert}: never expected to fire"
        assert any(not c["exp_alerts"] for c in mine), f"{alert}: never expected to stay quiet"


def test_the_unit_tests_catch_an_alert_that_no_longer_fires(tmp_path):
    rules = tmp_path / "alert-rules.yaml"
    rules.write_text(RULES.read_text().replace("> 7200", "> 72000", 1))
    tests = tmp_path / "alert_rules_test.yaml"
    tests.write_text(UNIT_TESTS.read_text().replace(
        "../../deploy/helm/quartermaster/files/alert-rules.yaml", str(rules)))  # fmt: skip
    done = _promtool("test", "rules", str(tests))
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "alertname: QuartermasterBillingIngestionBehind" in said


@pytest.mark.django_db
def test_every_metric_the_rules_read_is_exported(client):
    from prometheus_client.parser import text_string_to_metric_families

    # The metric families web's /metrics declares (a gauge of an empty fleet has no sample).
    text = client.get(reverse("metrics")).content.decode()
    exported = {f.name for f in text_string_to_metric_families(text)}
    read = {name for r in _rules() for name in re.findall(r"quartermaster_\w+", r["expr"])}
    assert read and read <= exported, read - exported
