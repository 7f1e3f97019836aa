"""Fleet services called directly: validation rules, permissions, after-commit effects."""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from fleet.models import Cluster, NodePool
from fleet.services.clusters import (
    cluster_delete,
    cluster_register,
    cluster_sync_request,
    cluster_update,
)
from fleet.services.pools import pool_create, pool_saved

pytestmark = pytest.mark.django_db


def _pool(actor, fleet, **overrides):
    args = {
        "cluster": fleet["cluster"],
        "name": "h100",
        "gpu_model": fleet["a100"],
        "node_selector": {"accelerator": "nvidia-h100"},
    }
    args.update(overrides)
    return pool_create(actor=actor, **args)


def test_taint_without_value_gets_exists_toleration(world, fleet):
    pool = _pool(world["admin"], fleet, taints=[{"key": "dedicated", "effect": "NoExecute"}])
    assert pool.tolerations == [{"key": "dedicated", "effect": "NoExecute", "operator": "Exists"}]


def test_given_tolerations_are_kept(world, fleet):
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    pool = _pool(
        world["admin"],
        fleet,
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        tolerations=tolerations,
    )
    assert pool.tolerations == tolerations


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("node_selector", {}, "at least one node label"),
        ("node_selector", ["accelerator"], "as an object"),
        ("node_selector", {"bad key!": "x"}, "not a valid label key"),
        ("node_selector", {"a": "x" * 70}, "not a valid label value"),
        ("taints", [{"key": "k", "effect": "NoSchedule", "colour": "red"}], "unknown fields"),
        ("taints", "nvidia.com/gpu", "as a list"),
        ("tolerations", [{"key": "k", "operator": "Maybe"}], "Equal or Exists"),
        ("tolerations", [{"key": "k", "operator": "Exists", "value": "v"}], "takes no value"),
        ("tolerations", [{"key": "x\x00y", "operator": "Exists"}], "not a valid taint key"),
        ("tolerations", [{"key": "k", "value": "v\n"}], "not a valid taint value"),
        (
            "tolerations",
            [{"key": "k", "operator": "Exists", "tolerationSeconds": "60"}],
            "whole number",
        ),
        ("name", "Not A Label", "DNS-1123"),
    ],
)
def test_pool_validation(world, fleet, field, value, message):
    with pytest.raises(ValidationError) as caught:
        _pool(world["admin"], fleet, **{field: value})
    assert message in " ".join(caught.value.message_dict[field])
    assert not NodePool.objects.filter(name="h100").exists()


def test_pool_saved_is_announced_after_commit(world, fleet, django_capture_on_commit_callbacks):
    seen = []

    def receiver(sender, pool_id, **kwargs):
        seen.append(pool_id)

    pool_saved.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            pool = _pool(world["admin"], fleet)
            assert seen == []
        assert seen == [pool.pk]
    finally:
        pool_saved.disconnect(receiver)


def test_only_admins_write(world, fleet, kubeconfig):
    for who in ("alice", "maria", "frank"):
        with pytest.raises(PermissionDenied):
            _pool(world[who], fleet)
        with pytest.raises(PermissionDenied):
            cluster_register(actor=world[who], name="x", kubeconfig_path=kubeconfig)
        with pytest.raises(PermissionDenied):
            cluster_sync_request(actor=world[who], cluster=fleet["cluster"])


def test_in_cluster_takes_no_kubeconfig(world, kubeconfig):
    with pytest.raises(ValidationError) as caught:
        cluster_register(
            actor=world["admin"], name="x", in_cluster=True, kubeconfig_path=kubeconfig
        )
    assert "in_cluster" in caught.value.message_dict
    cluster = cluster_register(actor=world["admin"], name="inside", in_cluster=True)
    assert cluster.in_cluster and cluster.is_default


def test_a_deleted_cluster_is_hidden_at_once_and_removed_when_nothing_refers_to_it(
    world, kubeconfig, monkeypatch, django_capture_on_commit_callbacks
):
    from tests.queues.builders import run_tasks_eagerly

    cluster = cluster_register(actor=world["admin"], name="x", kubeconfig_path=kubeconfig)
    run_tasks_eagerly(monkeypatch)
    with django_capture_on_commit_callbacks(execute=True):
        cluster_delete(actor=world["admin"], cluster=cluster)
        assert Cluster.objects.get(pk=cluster.pk).deleted_at is not None
    assert not Cluster.objects.exists()


def test_cluster_update_rejects_unknown_fields(world, fleet):
    with pytest.raises(ValidationError):
        cluster_update(actor=world["admin"], cluster=fleet["cluster"], colour="red")
