"""Reconcile the desired Kueue/Volcano objects into the cluster, one ManagedObject row each.

The database holds what should exist (`desired`, `desired_generation`); an apply records what
the cluster accepted (`applied_generation`, `applied_manifest`) or why it refused (`last_error`).
Kubernetes is only called here, from Celery tasks, never inside a transaction.
"""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from fleet import kube
from fleet.models import Cluster, NodePool
from fleet.selectors.inventory import pool_worker_sizes
from fleet.services.cluster_health import cluster_may_call
from queues.backends import backend_for
from queues.manifests import quotas as manifests
from queues.manifests.common import manifest_diff, manifest_hash, manifest_identity
from queues.manifests.reservations import quotas_with_reservations
from queues.models import (
    Department,
    Job,
    ManagedObject,
    Membership,
    PriorityTier,
    Quota,
    Team,
    TeamVolume,
)
from queues.selectors.reservations import reservations_in_force
from queues.services.audit import audit

logger = logging.getLogger(__name__)

# Referenced objects first: namespaces before what lives in them, flavors/cohorts/parent
# queues before the queues that name them. Deletes go in the reverse order.
KIND_ORDER = {
    "Namespace": 0,
    "Topology": 0,
    "PersistentVolumeClaim": 1,
    "ResourceQuota": 1,
    "LimitRange": 1,
    "NetworkPolicy": 1,
    "RoleBinding": 1,
    "ResourceFlavor": 1,
    "Cohort": 1,
    "WorkloadPriorityClass": 1,
    "PriorityClass": 1,
    "Queue": 2,
    "ClusterQueue": 3,
    "LocalQueue": 4,
}
QUEUE_KINDS = ("ClusterQueue", "Queue")
# Kinds whose live status the drift check keeps for pages (queue usage, a volume's phase).
# (LocalQueues: the usage Kueue remembers for member fair sharing; Cohorts: a department's
# share in the organisation.)
OBSERVED_KINDS = (
    *QUEUE_KINDS, "LocalQueue", "Cohort", "PersistentVolumeClaim", "ResourceQuota"
)  # fmt: skip
# A permanently refused manifest is tried again after this long (a CRD may have been installed,
# a webhook fixed), or at once when its desired state changes.
PERMANENT_RETRY_AFTER = timezone.timedelta(minutes=15)


def _sort_key(row: ManagedObject):
    # A department's Volcano parent queue (no parent) before the team queues under it.
    parent_first = 0 if row.owner_type == manifests.OWNER_DEPARTMENT else 1
    return (KIND_ORDER.get(row.kind, 5), parent_first, row.namespace, row.name)


def _locked_rows():
    """Managed objects locked FOR UPDATE, and only they: the model's ordering joins the
    cluster, whose row a plain select_for_update() would lock too. Recording one apply would
    then take the object's row and then the cluster's, while a sync (a quota approval's, in a
    web request) takes the cluster's and then the objects': the two deadlocked, and the
    approval failed with a 500 while a worker applied."""
    return ManagedObject.objects.select_for_update(of=("self",))


# -- desired state → rows ----------------------------------------------------------------------


def member_queues(*, cluster: Cluster, teams) -> dict[int, list[tuple]]:
    """Per team id, [(user, weight)] whose own LocalQueue the cluster needs: every member of a
    team that shares its queue fairly among members, and whoever still has an unfinished job
    submitted to theirs (the team may have stopped sharing, the member may have left)."""
    out: dict[int, dict[int, tuple]] = {}
    fair = [team.pk for team in teams if team.member_fair_sharing]
    weights = {}
    for m in Membership.objects.filter(team__in=teams).select_related("user"):
        weights[(m.team_id, m.user_id)] = m.fair_share_weight
        if m.team_id in fair:
            out.setdefault(m.team_id, {})[m.user_id] = (m.user, m.fair_share_weight)
    queued = (
        Job.objects.filter(Q(cluster=cluster) | Q(cluster__isnull=True))
        .exclude(local_queue="")
        .exclude(state__in=Job.FINAL_STATES)
        .values_list("team_id", "owner_id")
        .distinct()
    )
    missing = {(team_id, owner_id) for team_id, owner_id in queued
               if owner_id not in out.get(team_id, {})}  # fmt: skip
    users = get_user_model().objects.in_bulk({owner_id for _, owner_id in missing})
    for team_id, owner_id in missing:
        weight = weights.get((team_id, owner_id))
        out.setdefault(team_id, {})[owner_id] = (users[owner_id], weight)
    return {team_id: list(by_user.values()) for team_id, by_user in out.items()}


def cluster_desired_state(*, cluster: Cluster) -> list[tuple[str, int, dict]]:
    """(owner_type, owner_id, manifest) for everything the portal wants in the cluster."""
    pools = list(cluster.pools.order_by("name"))
    teams = list(Team.objects.select_related("department").order_by("slug"))
    return backend_for(cluster).cluster_objects(
        cluster=cluster,
        pools=pools,
        sizes=pool_worker_sizes(pools=pools),
        departments=list(Department.objects.order_by("slug")),
        teams=teams,
        tiers=list(PriorityTier.objects.order_by("-value", "name")),
        # The quotas as the reservations in force change them (lead time, window).
        quotas=quotas_with_reservations(
            Quota.objects.filter(pool__cluster=cluster).select_related("pool", "team__department"),
            reservations_in_force(pools=pools),
            quota_class=Quota,
        ),
        volumes=list(TeamVolume.objects.filter(cluster=cluster).select_related("team__department")),
        members=member_queues(cluster=cluster, teams=teams),
    )


# -- desired state → rows ----------------------------------------------------------------------


def managed_objects_sync(*, cluster: Cluster) -> list[int]:
    """Upsert one row per desired object and flag the ones no longer desired.

    Returns the ids of rows whose desired generation is ahead of what was applied. Only reads
    the database; safe inside a web request.
    """
    desired = cluster_desired_state(cluster=cluster)
    with transaction.atomic():
        # The cluster row is the mutex: two syncs never interleave their inserts.
        Cluster.objects.select_for_update().get(pk=cluster.pk)
        rows = {(r.kind, r.namespace, r.name): r for r in _locked_rows().filter(cluster=cluster)}
        seen = set()
        for owner_type, owner_id, manifest in desired:
            api_version, kind, namespace, name = manifest_identity(manifest)
            key = (kind, namespace, name)
            seen.add(key)
            digest = manifest_hash(manifest)
            row = rows.get(key)
            if row is None:
                ManagedObject.objects.create(
                    cluster=cluster,
                    api_version=api_version,
                    kind=kind,
                    namespace=namespace,
                    name=name,
                    owner_type=owner_type,
                    owner_id=owner_id,
                    desired=manifest,
                    desired_hash=digest,
                )
            elif row.desired_hash != digest or row.delete_requested:
                row.api_version = api_version
                row.owner_type, row.owner_id = owner_type, owner_id
                row.desired, row.desired_hash = manifest, digest
                row.desired_generation += 1
                row.delete_requested = False
                row.save()
        for key, row in rows.items():
            if key not in seen and not row.delete_requested:
                row.delete_requested = True
                row.desired_generation += 1
                row.save(update_fields=["delete_requested", "desired_generation"])
    return list(
        ManagedObject.objects.filter(cluster=cluster)
        .filter(applied_generation__lt=F("desired_generation"))
        .values_list("pk", flat=True)
    )


# -- apply one row -----------------------------------------------------------------------------


def managed_object_apply(*, object_id: int, force: bool = False) -> str:
    """Apply (or delete) one object if it lags; returns what happened.

    Idempotent: a row already applied at its desired generation is left alone, and server-side
    apply of the same manifest is a no-op in the cluster. TransientError propagates so the task
    retries; PermanentError is stored on the row (and on waiting quota requests).
    """
    row = ManagedObject.objects.select_related("cluster").filter(pk=object_id).first()
    if row is None:
        return "gone"
    if row.applied_generation >= row.desired_generation:
        return "up-to-date"
    if not row.cluster.enabled:
        return "cluster disabled"
    if (
        not force
        and row.failed_generation == row.desired_generation
        and row.last_error_at
        and timezone.now() - row.last_error_at < PERMANENT_RETRY_AFTER
    ):
        # The cluster refused exactly this manifest a moment ago; asking again won't help.
        return "failed-earlier"
    generation, desired = row.desired_generation, row.desired
    try:
        client = kube.client_for(row.cluster)
        if row.delete_requested:
            client.delete(row.api_version, row.kind, row.name, row.namespace or None)
        else:
            client.apply(desired, force=True)
    except kube.TransientError as exc:
        _record_error(row.pk, exc, permanent=False)
        raise
    except kube.PermanentError as exc:
        _record_error(row.pk, exc, permanent=True)
        return "failed"
    return _record_success(row.pk, generation)


def managed_object_cluster_id(*, object_id: int) -> int | None:
    """The cluster a managed object belongs to (None once it is gone)."""
    rows = ManagedObject.objects.filter(pk=object_id).values_list("cluster_id", flat=True)
    return rows.first()


def _record_success(object_id: int, generation: int) -> str:
    with transaction.atomic():
        row = _locked_rows().filter(pk=object_id).first()
        if row is None:
            return "gone"
        if row.delete_requested and row.desired_generation == generation:
            audit(
                actor=None,
                verb="managed_object.delete",
                obj=row,
                team=_team_of(row),
                before=row.applied_manifest,
                manifest_diff=manifest_diff(row.applied_manifest, None, name=str(row)),
                message=f"Deleted {row} from cluster {row.cluster_id}.",
            )
            row.delete()
            return "deleted"
        if row.applied_generation >= generation:
            return "up-to-date"
        diff = manifest_diff(row.applied_manifest, row.desired, name=str(row))
        # desired may have moved on since we read it; record only what we actually sent.
        sent_current = row.desired_generation == generation
        if sent_current:
            audit(
                actor=None,
                verb="managed_object.apply",
                obj=row,
                team=_team_of(row),
                manifest_diff=diff,
                message=f"Applied {row} (generation {generation}).",
            )
            row.applied_manifest = row.desired
            row.applied_hash = row.desired_hash
        row.applied_generation = generation
        row.applied_at = timezone.now()
        row.last_error = ""
        row.last_error_at = None
        row.failed_generation = None
        row.attempts = 0
        row.save()
    return "applied"


def _record_error(object_id: int, exc: kube.KubeError, *, permanent: bool) -> None:
    message = exc.describe()
    with transaction.atomic():
        row = _locked_rows().filter(pk=object_id).first()
        if row is None:
            return
        row.last_error = message if permanent else f"Will retry: {message}"
        row.last_error_at = timezone.now()
        row.failed_generation = row.desired_generation if permanent else None
        row.attempts += 1
        row.save(update_fields=["last_error", "last_error_at", "failed_generation", "attempts"])
        if permanent:
            audit(
                actor=None,
                verb="managed_object.apply_failed",
                obj=row,
                team=_team_of(row),
                message=f"The cluster refused {row}: {message}",
            )


def _team_of(row: ManagedObject):
    if row.owner_type != manifests.OWNER_TEAM:
        return None
    return Team.objects.filter(pk=row.owner_id).select_related("department").first()


# -- whole cluster -----------------------------------------------------------------------------


def cluster_reconcile(*, cluster_id: int) -> dict:
    """Sync rows from the database, then apply every lagging object in dependency order."""
    cluster = Cluster.objects.get(pk=cluster_id)
    if not cluster_may_call(cluster=cluster):
        return {"skipped": "cluster disabled or not answering"}
    lagging = managed_objects_sync(cluster=cluster)
    rows = sorted(ManagedObject.objects.filter(pk__in=lagging), key=_sort_key)
    applies = [r for r in rows if not r.delete_requested]
    deletes = [r for r in rows if r.delete_requested][::-1]
    results: dict[str, int] = {}
    transient: kube.TransientError | None = None
    missing_namespaces: set[str] = set()
    for row in applies + deletes:
        if row.namespace in missing_namespaces:
            # Its namespace did not apply: trying would only store a misleading 404.
            outcome = "waiting"
        else:
            try:
                outcome = managed_object_apply(object_id=row.pk)
            except kube.ClusterUnavailable as exc:
                # The cluster did not answer; the rest would only be refused at once too.
                transient = exc
                results["retry"] = results.get("retry", 0) + 1
                break
            except kube.TransientError as exc:
                # Keep going: other objects may well apply; the task retries the rest later.
                transient = exc
                outcome = "retry"
        if row.kind == "Namespace" and outcome in ("retry", "failed"):
            missing_namespaces.add(row.name)
        results[outcome] = results.get(outcome, 0) + 1
    if transient is not None:
        raise transient
    return results


def managed_objects_lagging(*, older_than_seconds: int = 30) -> list[int]:
    """Rows whose apply lags and were not touched recently (a lost message, a dead worker)."""
    cutoff = timezone.now() - timezone.timedelta(seconds=older_than_seconds)
    qs = ManagedObject.objects.filter(applied_generation__lt=F("desired_generation")).exclude(
        last_error_at__gt=cutoff
    )
    return list(qs.values_list("pk", flat=True))


def _subset_differs(desired, live) -> bool:
    """True when a field we set has another value in the live object."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return True
        return any(_subset_differs(v, live.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return True
        return any(_subset_differs(d, v) for d, v in zip(desired, live, strict=True))
    if desired is None:
        return False
    # Quantities come back as strings or numbers depending on the server.
    return live is None or str(desired) != str(live)


def _comparable(manifest: dict) -> dict:
    meta = manifest.get("metadata") or {}
    out = {k: v for k, v in manifest.items() if k not in ("metadata", "status")}
    out["metadata"] = {k: meta.get(k) for k in ("labels", "annotations") if k in meta}
    return out


def _trim_like(live, desired):
    """The part of the live object that corresponds to what we set (for a readable diff)."""
    if isinstance(desired, dict) and isinstance(live, dict):
        return {k: _trim_like(live.get(k), v) for k, v in desired.items() if k in live}
    if isinstance(desired, list) and isinstance(live, list):
        return [
            _trim_like(item, desired[i]) if i < len(desired) else item
            for i, item in enumerate(live)
        ]
    return live


def cluster_check_drift(*, cluster_id: int) -> dict:
    """Re-read applied objects; mark drifted ones for re-apply (and audit them).

    Also stores each ClusterQueue's live status (flavor usage) for the dashboard and forms.
    """
    cluster = Cluster.objects.get(pk=cluster_id)
    if not cluster_may_call(cluster=cluster):
        return {"checked": 0, "drifted": []}
    client = kube.client_for(cluster)
    drifted, checked = [], 0
    rows = ManagedObject.objects.filter(
        cluster=cluster, delete_requested=False, applied_generation__gte=F("desired_generation")
    )
    for row in rows:
        live = client.get(row.api_version, row.kind, row.name, row.namespace or None)
        checked += 1
        if row.kind in OBSERVED_KINDS and live is not None:
            ManagedObject.objects.filter(pk=row.pk).update(
                live_status=live.get("status") or {}, observed_at=timezone.now()
            )
        desired = _comparable(row.desired)
        if live is not None and not _subset_differs(desired, _comparable(live)):
            continue
        before = _trim_like(_comparable(live), desired) if live is not None else None
        with transaction.atomic():
            locked = _locked_rows().get(pk=row.pk)
            if locked.desired_generation != row.desired_generation:
                continue
            locked.desired_generation += 1
            locked.save(update_fields=["desired_generation"])
            audit(
                actor=None,
                verb="managed_object.drift",
                obj=locked,
                team=_team_of(locked),
                manifest_diff=manifest_diff(before, desired, name=str(locked)),
                message=(
                    f"{locked} was deleted in the cluster; re-creating it."
                    if live is None
                    else f"{locked} was changed in the cluster; restoring the portal's version."
                ),
            )
        drifted.append(row.pk)
    return {"checked": checked, "drifted": drifted}


def reconcile_cluster_enqueue(cluster_id: int) -> None:
    """Reconcile a cluster after the current transaction commits."""
    from queues.tasks import reconcile_cluster

    transaction.on_commit(lambda: reconcile_cluster.delay(cluster_id))


def on_pool_saved(sender, pool_id: int, **kwargs) -> None:
    """fleet announces pool changes (after commit): re-render that cluster's flavors."""
    cluster_id = NodePool.objects.filter(pk=pool_id).values_list("cluster_id", flat=True).first()
    if cluster_id is not None:
        reconcile_cluster_enqueue(cluster_id)


def reconcile_all_enqueue() -> None:
    """Reconcile every cluster after the current transaction commits."""
    for cluster_id in Cluster.objects.filter(enabled=True).values_list("pk", flat=True):
        reconcile_cluster_enqueue(cluster_id)
