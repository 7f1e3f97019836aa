"""Team volumes and secrets end to end against kubesim: a lead creates a volume (reconciled into
a bound claim, repaired when deleted in the cluster) and sets secrets (values only in the
cluster); a job mounts the volume, reads the secret, gets CPU and memory, and runs; members
read, leads change, other teams see nothing; bad input is a field error; a cluster that does
not answer leaves nothing half-written."""

import base64
import logging

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.urls import reverse

from core.errors import ClusterRefused
from fleet.models import Cluster
from kubesim.testing import wait_stepping
from queues.models import AuditEvent, Job, TeamSecret, TeamVolume
from queues.services import storage
from queues.services.jobs.apply import job_apply
from queues.services.reconcile import cluster_check_drift, cluster_reconcile
from tests.queues.builders import submit, sync_until


def _pvc(sim, team, name):
    return sim["sim"].kube.get("v1", "PersistentVolumeClaim", name, team.namespace)


def _volume(sim, name="datasets", **kw):
    volume = storage.volume_create(
        actor=sim["bob"], team=sim["vision"], cluster=sim["cluster"], name=name,
        size_gib=kw.pop("size_gib", 100), **kw,
    )  # fmt: skip
    cluster_reconcile(cluster_id=sim["cluster"].pk)
    return volume


def _wait_bound(sim, volume):
    """The claim once Bound (kubesim's clock stepping meanwhile, kubesim.testing.wait_stepping)."""

    def bound():
        claim = _pvc(sim, volume.team, volume.name)
        return claim if claim and (claim.get("status") or {}).get("phase") == "Bound" else None

    claim = wait_stepping(bound, timeout=10, interval=0.1)
    if claim is None:
        raise AssertionError(
            f"claim {volume.name} never bound: {_pvc(sim, volume.team, volume.name)}"
        )
    return claim


def test_a_leads_volume_becomes_a_bound_claim_and_is_repaired(sim_jobs):
    volume = _volume(sim_jobs, storage_class="standard")
    claim = _wait_bound(sim_jobs, volume)
    assert claim["spec"]["resources"]["requests"] == {"storage": "100Gi"}
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["metadata"]["labels"]["quartermaster.dev/team"] == "vision"
    assert AuditEvent.objects.filter(verb="volume.create").count() == 1
    # Deleted in the cluster behind the portal's back: the drift check puts it back.
    sim_jobs["sim"].kube.delete("v1", "PersistentVolumeClaim", "datasets", volume.team.namespace)
    assert cluster_check_drift(cluster_id=sim_jobs["cluster"].pk)["drifted"]
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    _wait_bound(sim_jobs, volume)
    # It grows, never shrinks.
    storage.volume_resize(actor=sim_jobs["bob"], volume=volume, size_gib=150)
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    assert _pvc(sim_jobs, volume.team, "datasets")["spec"]["resources"]["requests"] == {
        "storage": "150Gi"
    }
    with pytest.raises(ValidationError, match="only grows"):
        storage.volume_resize(actor=sim_jobs["bob"], volume=volume, size_gib=10)


def test_volume_input_and_who_may_change_it(sim_jobs):
    with pytest.raises(PermissionDenied):
        storage.volume_create(actor=sim_jobs["alice"], team=sim_jobs["vision"],
                              cluster=sim_jobs["cluster"], name="mine", size_gib=1)  # fmt: skip
    with pytest.raises(ValidationError) as bad:
        storage.volume_create(actor=sim_jobs["bob"], team=sim_jobs["vision"],
                              cluster=sim_jobs["cluster"], name="Data Sets", size_gib=0,
                              access_mode="Sometimes")  # fmt: skip
    assert set(bad.value.message_dict) == {"name", "size_gib", "access_mode"}
    with pytest.raises(ValidationError, match="has no StorageClass 'fast'.*standard"):
        storage.volume_create(actor=sim_jobs["bob"], team=sim_jobs["vision"],
                              cluster=sim_jobs["cluster"], name="fast", size_gib=1,
                              storage_class="fast")  # fmt: skip
    _volume(sim_jobs, name="dup")
    with pytest.raises(ValidationError, match="already has a volume named dup"):
        _volume(sim_jobs, name="dup")
    assert TeamVolume.objects.count() == 1


def test_secret_values_live_only_in_the_cluster(sim_jobs, caplog):
    caplog.set_level(logging.DEBUG)
    secret = storage.secret_set(
        actor=sim_jobs["bob"], team=sim_jobs["vision"], cluster=sim_jobs["cluster"],
        name="wandb", values={"api-key": "s3cr3t-value"},
    )  # fmt: skip
    namespace = sim_jobs["vision"].namespace
    live = sim_jobs["sim"].kube.get("v1", "Secret", "wandb", namespace)
    assert base64.b64decode(live["data"]["api-key"]).decode() == "s3cr3t-value"
    assert secret.keys == ["api-key"] and len(secret.fingerprint) == 64
    # Nothing in the database holds the value, in any table, and no log line says it.
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(
                f'SELECT count(*) FROM "{table}" AS row WHERE row::text LIKE %s',  # noqa: S608
                ["%s3cr3t-value%"],
            )
            assert cursor.fetchone()[0] == 0, table
    assert "s3cr3t-value" not in caplog.text
    assert storage.secret_states(secrets=[secret]) == {secret.pk: "ok"}
    sim_jobs["sim"].kube.apply({**live, "data": {"api-key": base64.b64encode(b"x").decode()}},
                               force=True)  # fmt: skip
    assert storage.secret_states(secrets=[secret]) == {secret.pk: "changed"}
    sim_jobs["sim"].kube.delete("v1", "Secret", "wandb", namespace)
    assert storage.secret_states(secrets=[secret]) == {secret.pk: "missing"}
    # Setting it again replaces the values and the fingerprint.
    again = storage.secret_set(actor=sim_jobs["bob"], team=sim_jobs["vision"],
                               cluster=sim_jobs["cluster"], name="wandb",
                               values={"api-key": "other"})  # fmt: skip
    assert again.pk == secret.pk and again.fingerprint != secret.fingerprint
    assert storage.secret_states(secrets=[again]) == {again.pk: "ok"}


def test_a_secret_is_not_saved_when_the_cluster_does_not_take_it(sim_jobs):
    Cluster.objects.filter(pk=sim_jobs["cluster"].pk).update(enabled=False)
    sim_jobs["cluster"].refresh_from_db()
    with pytest.raises(ClusterRefused, match="disabled; nothing was saved"):
        storage.secret_set(actor=sim_jobs["bob"], team=sim_jobs["vision"],
                           cluster=sim_jobs["cluster"], name="wandb",
                           values={"k": "v"})  # fmt: skip
    assert not TeamSecret.objects.exists()


def test_a_job_mounts_a_volume_reads_a_secret_and_gets_cpu_and_memory(sim_jobs):
    _wait_bound(sim_jobs, _volume(sim_jobs))
    storage.secret_set(actor=sim_jobs["bob"], team=sim_jobs["vision"],
                       cluster=sim_jobs["cluster"], name="wandb",
                       values={"api-key": "k"})  # fmt: skip
    storage.secret_set(actor=sim_jobs["bob"], team=sim_jobs["vision"],
                       cluster=sim_jobs["cluster"], name="ghcr", kind="registry",
                       registry="ghcr.io", username="bot", password="pw")  # fmt: skip
    job = submit(sim_jobs, gpus_per_worker=1, expected_runtime_seconds=2, shm_size="8Gi",
                 volumes=[{"volume": "datasets", "mount_path": "/data", "read_only": True}],
                 secret_env={"WANDB_API_KEY": "wandb/api-key"})  # fmt: skip
    # The a100 nodes of the test fleet: their CPU and memory divided by their GPUs.
    node = sim_jobs["cluster"].nodes.filter(pool__name="a100").first()
    assert job.cpu_millis == node.cpu_allocatable_millis // node.gpu_allocatable
    assert job.memory_mib == node.memory_allocatable_mib // node.gpu_allocatable
    assert job_apply(job_id=job.pk) == "applied"
    obj = sim_jobs["sim"].kube.get("batch/v1", "Job", job.k8s_name, job.team.namespace)
    pod_spec = obj["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
    } in container["env"]
    assert container["volumeMounts"] == [
        {"name": "vol-datasets", "mountPath": "/data", "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    assert pod_spec["imagePullSecrets"] == [{"name": "ghcr"}]
    assert (
        container["resources"]["requests"]["memory"] == container["resources"]["limits"]["memory"]
    )
    assert sync_until(job, Job.State.SUCCEEDED).state == Job.State.SUCCEEDED


def test_a_job_naming_what_the_team_does_not_have_gets_field_errors(sim_jobs):
    with pytest.raises(ValidationError) as bad:
        submit(sim_jobs, cpu="lots", memory="900Ti", shm_size="8Gi",
               volumes=[{"volume": "nope", "mount_path": "/data"}],
               secret_env={"TOKEN": "nope/key"})  # fmt: skip
    errors = bad.value.message_dict
    assert "Not a Kubernetes quantity" in errors["cpu"][0]
    assert errors["memory"][0].startswith("At most ") and "pool a100" in errors["memory"][0]
    assert "no volume named 'nope'" in errors["volumes"][0]
    assert "no secret named 'nope'" in errors["secret_env"][0]
    with pytest.raises(ValidationError, match="is used by the container itself"):
        _wait_bound(sim_jobs, _volume(sim_jobs))
        submit(sim_jobs, volumes=[{"volume": "datasets", "mount_path": "/etc"}])
    with pytest.raises(ValidationError, match="held in the worker's memory"):
        submit(sim_jobs, memory="1Gi", shm_size="2Gi")
    assert not Job.objects.exists()


def test_a_volume_or_secret_in_use_is_not_deleted(sim_jobs):
    volume = _volume(sim_jobs)
    secret = storage.secret_set(actor=sim_jobs["bob"], team=sim_jobs["vision"],
                                cluster=sim_jobs["cluster"], name="wandb",
                                values={"api-key": "k"})  # fmt: skip
    submit(sim_jobs, volumes=[{"volume": "datasets", "mount_path": "/data"}],
           secret_env={"KEY": "wandb/api-key"})  # fmt: skip
    with pytest.raises(ValidationError, match="Jobs that have not finished mount datasets"):
        storage.volume_delete(actor=sim_jobs["bob"], volume=volume)
    with pytest.raises(ValidationError, match="Unfinished jobs read wandb"):
        storage.secret_delete(actor=sim_jobs["bob"], secret=secret)
    with pytest.raises(ValidationError, match="read the keys api-key"):
        storage.secret_set(actor=sim_jobs["bob"], team=sim_jobs["vision"],
                           cluster=sim_jobs["cluster"], name="wandb",
                           values={"new": "v"})  # fmt: skip
    Job.objects.update(state=Job.State.CANCELLED)
    storage.volume_delete(actor=sim_jobs["bob"], volume=volume)
    storage.secret_delete(actor=sim_jobs["bob"], secret=secret)
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    assert _pvc(sim_jobs, sim_jobs["vision"], "datasets") is None
    assert sim_jobs["sim"].kube.get("v1", "Secret", "wandb", volume.team.namespace) is None


def test_the_api_by_role(sim_jobs, api_as):
    def bob():
        return api_as(sim_jobs["bob"])

    def alice():
        return api_as(sim_jobs["alice"])

    def carol():
        return api_as(sim_jobs["carol"])

    made = bob().post(
        reverse("volume-list"),
        {"team": "vision", "name": "datasets", "size_gib": 10},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["status"] == "Creating" and made.json()["cluster"] == "kubesim"
    refused = alice().post(
        reverse("volume-list"), {"team": "vision", "name": "mine", "size_gib": 1}, format="json"
    )
    assert refused.status_code == 403 and "lead" in refused.json()["detail"]
    assert alice().get(reverse("volume-list")).json()["count"] == 1
    assert carol().get(reverse("volume-list")).json()["count"] == 0
    assert carol().get(reverse("volume-detail", args=[made.json()["id"]])).status_code == 404
    bad = bob().post(
        reverse("volume-list"), {"team": "vision", "name": "x y", "size_gib": "big"}, format="json"
    )
    assert bad.status_code == 400 and "size_gib" in bad.json()
    body = {"team": "vision", "name": "wandb", "values": {"api-key": "v1"}}
    first = bob().post(reverse("secret-list"), body, format="json")
    assert first.status_code == 201 and "values" not in first.json()
    body["values"] = {"api-key": "v2"}
    second = bob().post(reverse("secret-list"), body, format="json")
    assert second.status_code == 200 and second.json()["fingerprint"] != first.json()["fingerprint"]
    detail = alice().get(reverse("secret-detail", args=[first.json()["id"]])).json()
    assert detail["in_cluster"] == "ok" and detail["keys"] == ["api-key"]
    assert "v2" not in str(detail)
    assert alice().delete(reverse("secret-detail", args=[first.json()["id"]])).status_code == 403
    Cluster.objects.filter(pk=sim_jobs["cluster"].pk).update(enabled=False)
    other = {"team": "vision", "name": "other", "values": {"k": "v"}}
    down = bob().post(reverse("secret-list"), other, format="json")
    assert down.status_code == 503 and "nothing was saved" in down.json()["detail"]
    assert not TeamSecret.objects.filter(name="other").exists()
    # A delete while the cluster does not answer is done in the portal at once and in the
    # cluster by a task when it answers again.
    gone = bob().delete(reverse("secret-detail", args=[first.json()["id"]]))
    assert gone.status_code == 204 and not TeamSecret.objects.filter(name="wandb").exists()
    Cluster.objects.filter(pk=sim_jobs["cluster"].pk).update(enabled=True)
    assert sim_jobs["sim"].kube.get("v1", "Secret", "wandb", sim_jobs["vision"].namespace)
    assert storage.secret_remove_from_cluster(
        cluster_id=sim_jobs["cluster"].pk, team_id=sim_jobs["vision"].pk, name="wandb"
    )
    assert sim_jobs["sim"].kube.get("v1", "Secret", "wandb", sim_jobs["vision"].namespace) is None


def test_a_pools_share_per_gpu_sets_job_defaults_and_the_cluster_queue(sim_jobs, api_as):
    a100 = sim_jobs["pools"]["a100"]
    admin = api_as(sim_jobs["admin"])
    url = reverse("pool-detail", args=[a100.pk])
    derived = admin.get(url).json()
    assert derived["cpu_per_gpu_setting"] is None and derived["cpu_per_gpu"] != "10"
    bad = admin.patch(url, {"cpu_per_gpu": "ten"}, format="json")
    assert bad.status_code == 400 and "quantity" in bad.json()["cpu_per_gpu"][0]
    changed = admin.patch(url, {"cpu_per_gpu": "10", "memory_per_gpu": "40Gi"}, format="json")
    assert changed.status_code == 200, changed.content
    assert (changed.json()["cpu_per_gpu"], changed.json()["memory_per_gpu"]) == ("10", "40Gi")
    assert changed.json()["cpu_per_gpu_setting"] == "10"
    job = submit(sim_jobs, gpus_per_worker=2)
    assert (job.cpu_millis, job.memory_mib) == (20_000, 80 * 1024)
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    cq = sim_jobs["sim"].kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "qm-vision")
    flavor = next(f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "a100")
    # vision holds 8 A100s and may borrow 4: 80 CPUs and 320Gi, borrowing 40 and 160Gi.
    assert flavor["resources"][:2] == [
        {"name": "cpu", "nominalQuota": "80", "borrowingLimit": "40"},
        {"name": "memory", "nominalQuota": "320Gi", "borrowingLimit": "160Gi"},
    ]
    # The job fits the queue: Kueue admits it with its CPU and memory.
    assert job_apply(job_id=job.pk) == "applied"
    assert sync_until(job, (Job.State.RUNNING, Job.State.SUCCEEDED)).state in (
        Job.State.RUNNING, Job.State.SUCCEEDED,
    )  # fmt: skip
