"""seed_governance (idempotent, every demo team gets quota) and export_manifests."""

import yaml
from django.core.management import call_command

from fleet.demo import seed_fleet
from queues.demo import seed_people
from queues.governance_demo import seed_governance
from queues.models import ApprovalPolicy, ManagedObject, PriorityTier, Quota, Team
from tests.crd_validation import assert_valid_manifest


def test_seed_governance_is_idempotent(db, django_capture_on_commit_callbacks):
    seed_people()
    seed_fleet()
    with django_capture_on_commit_callbacks(execute=False):
        first = seed_governance()
        second = seed_governance()
    assert first["quotas_created"] > 0 and second["quotas_created"] == 0
    assert list(PriorityTier.objects.values_list("name", "value")) == [
        ("production", 1000),
        ("experiment-high", 500),
        ("experiment", 100),
        ("development", 10),
    ]
    assert PriorityTier.objects.get(is_default=True).name == "experiment"
    assert not PriorityTier.objects.get(name="production").preemptible
    for team in Team.objects.all():
        assert Quota.objects.filter(team=team, nominal_gpus__gt=0).exists(), team
    assert ApprovalPolicy.objects.count() == 1
    rows = ManagedObject.objects.all()
    assert rows.filter(kind="ClusterQueue").count() == Team.objects.count()
    for row in rows:
        assert_valid_manifest(row.desired)


def test_export_manifests_writes_one_file_per_object(
    db, tmp_path, django_capture_on_commit_callbacks
):
    seed_people()
    seed_fleet()
    with django_capture_on_commit_callbacks(execute=False):
        seed_governance()
    call_command("export_manifests", str(tmp_path))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "clusterqueue-qm-vision.yaml" in files
    assert "resourceflavor-a100.yaml" in files
    assert "localqueue-team-vision-vision.yaml" in files
    cq = yaml.safe_load((tmp_path / "clusterqueue-qm-vision.yaml").read_text())
    assert cq["kind"] == "ClusterQueue" and cq["spec"]["cohortName"] == "qm-research"
    for path in tmp_path.iterdir():
        assert_valid_manifest(yaml.safe_load(path.read_text()))
