"""The governance tasks called directly: unreachable clusters, lagging objects, expiry."""

import datetime as dt

from django.utils import timezone

from queues import tasks
from queues.models import ManagedObject
from queues.services import reconcile
from tests.queues.builders import quota_world_setup


def test_unreachable_cluster_is_recorded_not_raised(world, settings):
    settings.KUBE_MAX_ATTEMPTS = 1
    quota_world = quota_world_setup(
        world
    )  # its cluster's kubeconfig is /dev/null: no usable configuration
    tasks.check_drift(quota_world["cluster"].pk)
    result = tasks.reconcile_cluster(quota_world["cluster"].pk)
    # Namespaces fail, so what lives in them (each team's LocalQueue and 5 guard rails) waits
    # instead of failing with a 404.
    assert result == {"failed": 12, "waiting": 18}
    errors = ManagedObject.objects.exclude(last_error="")
    assert errors.exists()
    assert "Cannot load the cluster configuration" in errors.first().last_error


def test_lagging_objects_are_found_for_the_beat(world):
    quota_world = quota_world_setup(world)
    lagging = reconcile.managed_objects_sync(cluster=quota_world["cluster"])
    assert sorted(reconcile.managed_objects_lagging()) == sorted(lagging)
    # Objects that failed a moment ago are left to their own retry for now.
    ManagedObject.objects.filter(pk=lagging[0]).update(last_error_at=timezone.now())
    assert lagging[0] not in reconcile.managed_objects_lagging()
    ManagedObject.objects.filter(pk=lagging[0]).update(
        last_error_at=timezone.now() - dt.timedelta(minutes=5)
    )
    assert lagging[0] in reconcile.managed_objects_lagging()


def test_missing_cluster_task_is_a_no_op(db):
    assert tasks.reconcile_cluster(987654) is None
    assert tasks.apply_managed_object(987654) == "gone"
