"""A team namespace's egress policy: DNS, the namespace, and the destinations a platform admin
allows (TEAM_EGRESS_CIDRS), never the cloud metadata address; a setting that would allow it,
or is no CIDR, stops start-up."""

import subprocess
import sys

import pytest

from queues.manifests.guardrails import egress_destinations, guardrail_manifests
from tests.config.test_settings_and_stack import _clean_env
from tests.conftest import REPO_ROOT
from tests.factories import TeamFactory


def _egress(team) -> list[dict]:
    policy = next(m for m in guardrail_manifests(team, []) if m["metadata"]["name"] == "qm-egress")
    return policy["spec"]["egress"]


@pytest.mark.django_db
def test_the_outside_world_by_default_but_never_the_metadata_address():
    egress = _egress(TeamFactory())
    dns, namespace, allowed = egress
    assert {p["port"] for p in dns["ports"]} == {53}
    assert namespace == {"to": [{"podSelector": {}}]}
    assert allowed == {"to": [{"ipBlock": {"cidr": "0.0.0.0/0",
                                           "except": ["169.254.169.254/32"]}}]}  # fmt: skip


@pytest.mark.django_db
def test_the_destinations_a_platform_admin_allows(settings):
    settings.TEAM_EGRESS_CIDRS = ["10.20.0.0/16", "::/0"]
    allowed = _egress(TeamFactory())[2]["to"]
    # Only a CIDR that holds a metadata address has it carved out.
    assert allowed == [
        {"ipBlock": {"cidr": "10.20.0.0/16"}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
    ]
    settings.TEAM_EGRESS_CIDRS = []
    assert len(_egress(TeamFactory())) == 2  # DNS and the namespace only


def test_a_link_local_range_loses_the_metadata_address():
    assert egress_destinations(["169.254.0.0/16"]) == [
        {"ipBlock": {"cidr": "169.254.0.0/16", "except": ["169.254.169.254/32"]}}
    ]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("169.254.169.254/32", "is a cloud metadata address"),
        ("10.0.0.0/8,banana", "'banana'"),
        ("10.0.0.1/8", "has host bits set"),
    ],
)
def test_start_up_refuses_a_setting_that_would_reach_the_metadata_address(tmp_path, value, said):
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO_ROOT, capture_output=True, text=True,
        env=_clean_env(SECRET_KEY="egress-test", QM_VAR_DIR=str(tmp_path),
                       TEAM_EGRESS_CIDRS=value),
        timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "TEAM_EGRESS_CIDRS" in done.stderr and said in done.stderr, done.stderr[-2000:]
