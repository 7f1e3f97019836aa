"""seed_quotas (idempotent, every demo team gets quota) and export_manifests."""

import yaml
from django.core.management import call_command

from demo.fleet import seed_fleet
from demo.queues import seed_people, seed_quotas
from queues.models import ApprovalPolicy, ManagedObject, PriorityTier, Quota, Team
from tests.crd_validation import assert_valid_manifest


def test_seed_quotas_is_idempotent(db, django_capture_on_commit_callbacks):
    seed_people()
    seed_fleet()
    with django_capture_on_commit_callbacks(execute=False):
        first = seed_quotas()
        second = seed_quotas()
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
    # The Language team shares its queue among its members; turned off, a re-seed leaves it off.
    assert list(Team.objects.filter(member_fair_sharing=True).values_list("slug", flat=True)) == [
        "nlp"
    ]
    Team.objects.filter(slug="nlp").update(member_fair_sharing=False)
    with django_capture_on_commit_callbacks(execute=False):
        seed_quotas()
    assert not Team.objects.filter(member_fair_sharing=True).exists()
    Team.objects.filter(slug="nlp").update(member_fair_sharing=True)
    with django_capture_on_commit_callbacks(execute=False):
        seed_quotas()
    rows = ManagedObject.objects.all()
    assert rows.filter(kind="ClusterQueue").count() == Team.objects.count()
    assert rows.filter(kind="LocalQueue", namespace="team-nlp").count() == 3  # team + 2 members
    for row in rows:
        assert_valid_manifest(row.desired)


def test_export_manifests_writes_one_file_per_object(
    db, tmp_path, django_capture_on_commit_callbacks
):
    seed_people()
    seed_fleet()
    with django_capture_on_commit_callbacks(execute=False):
        seed_quotas()
    call_command("export_manifests", str(tmp_path))
    # Two clusters: a folder each.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kubesim", "lab"]
    main = tmp_path / "kubesim"
    files = sorted(p.name for p in main.iterdir())
    assert "clusterqueue-qm-vision.yaml" in files
    assert "resourceflavor-a100.yaml" in files
    # The demo's A100 racks: a Topology that the pool's flavor names.
    assert "topology-a100.yaml" in files
    flavor = yaml.safe_load((main / "resourceflavor-a100.yaml").read_text())
    assert flavor["spec"]["topologyName"] == "a100"
    assert "localqueue-team-vision-vision.yaml" in files
    cq = yaml.safe_load((main / "clusterqueue-qm-vision.yaml").read_text())
    assert cq["kind"] == "ClusterQueue" and cq["spec"]["cohortName"] == "qm-research"
    # The lab cluster is Volcano's: the teams with quota in its pool have their leaf Queues.
    lab = [yaml.safe_load(p.read_text()) for p in (tmp_path / "lab").iterdir()]
    queues = {m["metadata"]["name"] for m in lab if m["kind"] == "Queue"}
    leaves = {name.rsplit("-", 1)[0] for name in queues if "-l40s-" in name}
    assert leaves == {"qm-vision-l40s", "qm-robotics-l40s"}
    for path in [*main.iterdir(), *(tmp_path / "lab").iterdir()]:
        assert_valid_manifest(yaml.safe_load(path.read_text()))


def test_demo_state_applies_cleanly_to_the_demo_fleet(
    db, settings, django_capture_on_commit_callbacks
):
    from kubernetes import config

    from fleet import kube
    from kubesim.testing import running_kubesim
    from queues.services.reconcile import cluster_reconcile
    from tests.fixtures_cluster import CRDS_DIR, REPO_ROOT
    from tests.kubesim import kueue_helpers as helpers

    with running_kubesim(
        fleet=REPO_ROOT / "kubesim" / "fleets" / "demo.yaml", crds_dir=CRDS_DIR
    ) as sim:
        settings.KUBECONFIG = sim.kubeconfig
        settings.KUBE_CONTEXT = ""
        seed_people()
        cluster = seed_fleet()
        with django_capture_on_commit_callbacks(execute=False):
            seed_quotas()
        try:
            result = cluster_reconcile(cluster_id=cluster.pk)
            assert set(result) == {"applied"}, result
            assert not ManagedObject.objects.exclude(last_error="").exists()
            cq = kube.client_for(cluster).get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "qm-vision")
            assert cq["spec"]["resourceGroups"][0]["flavors"][0]["name"] == "a100"
            # Every demo team can run a one-GPU job at once, with no set-up.
            api = config.new_client_from_config(sim.kubeconfig)
            for team in Team.objects.all():
                helpers.job(api, team.namespace, f"demo-{team.slug}", queue=team.slug, gpus=1)
            for team in Team.objects.all():
                helpers.wait_for(
                    lambda team=team: helpers.is_admitted(api, team.namespace, f"demo-{team.slug}"),
                    message=f"{team.slug}'s demo job admitted",
                )
            api.close()
        finally:
            kube.clear_client_cache()
