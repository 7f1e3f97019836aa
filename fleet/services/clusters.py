"""Cluster registration and changes; an inventory sync is queued after each commit."""

from __future__ import annotations

import os

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.db.models import ProtectedError
from django.dispatch import Signal
from django.utils import timezone

from fleet import kube
from fleet.audit import changes as changed_fields
from fleet.audit import fleet_audit, snapshot
from fleet.models import Cluster
from fleet.permissions import require_platform_admin as _require_admin

CLUSTER_FIELDS = (
    "name",
    "kubeconfig_path",
    "context",
    "in_cluster",
    "scheduler",
    "kueue_api_version",
    "is_default",
    "dcgm_scrape_urls",
    "prometheus_url",
)


def _validate_connection(cluster: Cluster) -> None:
    errors = {}
    if cluster.in_cluster:
        if cluster.kubeconfig_path or cluster.context:
            errors["in_cluster"] = "In-cluster clusters take no kubeconfig path or context."
    elif not cluster.kubeconfig_path:
        errors["kubeconfig_path"] = "Give the kubeconfig path, or tick in-cluster."
    elif not os.path.isabs(cluster.kubeconfig_path):
        errors["kubeconfig_path"] = "Use an absolute path, e.g. /etc/quartermaster/kubeconfig."
    elif not os.path.isfile(cluster.kubeconfig_path):
        errors["kubeconfig_path"] = f"No file at {cluster.kubeconfig_path} on the portal server."
    elif problem := kube.kubeconfig_problem(cluster.kubeconfig_path):
        errors["kubeconfig_path"] = problem
    elif cluster.context:
        contexts = kube.kubeconfig_contexts(cluster.kubeconfig_path)
        if cluster.context not in contexts:
            known = ", ".join(contexts) or "none found"
            errors["context"] = f"The kubeconfig has no context {cluster.context!r} ({known})."
    if errors:
        raise ValidationError(errors)


def _save_cluster(cluster: Cluster, *, actor=None, before: dict | None = None) -> Cluster:
    """Validate and save; audited as done by `actor` (none: the portal's own registration at
    start-up), with what changed from `before` (none: a new cluster)."""
    _validate_connection(cluster)
    # is_default is left out: the transaction below moves the default flag.
    cluster.full_clean(exclude=["last_sync_at", "last_sync_error", "is_default"])
    with transaction.atomic():
        if cluster.is_default:
            Cluster.objects.exclude(pk=cluster.pk).filter(is_default=True).update(is_default=False)
        cluster.save()
        after = snapshot(cluster, CLUSTER_FIELDS)
        if before is None:
            fleet_audit(actor=actor, verb="cluster.register", obj=cluster, after=after,
                        message=f"Cluster {cluster} registered.")  # fmt: skip
        elif after != before:
            old, new = changed_fields(before, after)
            fleet_audit(actor=actor, verb="cluster.update", obj=cluster, before=old, after=new,
                        message=f"Cluster {cluster} changed: {', '.join(new)}.")  # fmt: skip
        transaction.on_commit(lambda: cluster_sync_enqueue(cluster_id=cluster.pk))
    kube.clear_client_cache()
    return cluster


def cluster_register(
    *,
    actor,
    name: str,
    kubeconfig_path: str = "",
    context: str = "",
    in_cluster: bool = False,
    scheduler: str = Cluster.Scheduler.KUEUE,
    kueue_api_version: str = Cluster.KueueApiVersion.V1BETA2,
    is_default: bool = False,
    dcgm_scrape_urls=None,
    prometheus_url: str = "",
) -> Cluster:
    """Register a cluster (platform admins); an inventory sync follows after commit."""
    _require_admin(actor)
    cluster = Cluster(
        dcgm_scrape_urls=_scrape_urls(dcgm_scrape_urls),
        prometheus_url=(prometheus_url or "").strip(),
        name=(name or "").strip(),
        kubeconfig_path=(kubeconfig_path or "").strip(),
        context=(context or "").strip(),
        in_cluster=bool(in_cluster),
        scheduler=scheduler,
        kueue_api_version=kueue_api_version,
        is_default=bool(is_default) or not Cluster.objects.exists(),
    )
    return _save_cluster(cluster, actor=actor)


def cluster_update(*, actor, cluster: Cluster, **changes) -> Cluster:
    """Change how a cluster is reached or scheduled (platform admins)."""
    _require_admin(actor)
    unknown = set(changes) - set(CLUSTER_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown cluster fields: {', '.join(sorted(unknown))}.")
    before = snapshot(cluster, CLUSTER_FIELDS)
    for name, value in changes.items():
        setattr(cluster, name, value.strip() if isinstance(value, str) else value)
    if "dcgm_scrape_urls" in changes:
        cluster.dcgm_scrape_urls = _scrape_urls(changes["dcgm_scrape_urls"])
    return _save_cluster(cluster, actor=actor, before=before)


def _scrape_urls(urls) -> list[str]:
    """DCGM exporter URLs: a list, or text with one per line or comma-separated."""
    if urls in (None, ""):
        return []
    if isinstance(urls, str):
        urls = urls.replace(",", "\n").splitlines()
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise ValidationError({"dcgm_scrape_urls": "Give a list of exporter URLs."})
    urls = [u.strip() for u in urls if u.strip()]
    validate = URLValidator(schemes=["http", "https"])
    for url in urls:
        try:
            validate(url)
        except ValidationError:
            raise ValidationError(
                {"dcgm_scrape_urls": f"Not an http(s) URL: {url[:200]!r}."}
            ) from None
    return urls


def cluster_metrics_sources(cluster: Cluster, *, default: bool) -> tuple[list, str]:
    """(DCGM exporter URLs to scrape, Prometheus URL) that billing reads for this cluster:
    its own, else, on the cluster billing takes as default, the settings'."""
    from django.conf import settings

    scrape = list(cluster.dcgm_scrape_urls or [])
    prometheus = cluster.prometheus_url or ""
    if default:
        scrape = scrape or list(settings.DCGM_SCRAPE_URLS)
        prometheus = prometheus or settings.PROMETHEUS_URL
    return scrape, prometheus


# Sent after commit when a cluster is enabled, disabled or deleted; queues acts on it (sends
# waiting jobs, removes the objects it keeps in a deleted cluster, cancels jobs on force).
cluster_changed = Signal()

# Job states in which a job has (or is about to have) objects in its cluster.
ACTIVE_JOB_STATES = ("submitted", "queued", "admitted", "running", "preempted")


def _announce(cluster: Cluster, change: str, **extra) -> None:
    pk = cluster.pk
    transaction.on_commit(
        lambda: cluster_changed.send(sender=Cluster, cluster_id=pk, change=change, **extra)
    )


def _reason(reason) -> str:
    """Why a person enables or disables a cluster: asked for, and kept in the audit log."""
    reason = " ".join((reason or "").split())
    if not reason:
        raise ValidationError({"reason": "Say why, for the audit log (and, when disabling, for "
                                         "the people whose jobs wait)."})  # fmt: skip
    if len(reason) > 500:
        raise ValidationError({"reason": "At most 500 characters."})
    return reason


def cluster_disable(*, actor, cluster: Cluster, reason: str = "") -> Cluster:
    """Stop applying to the cluster and reading from it (platform admins), saying why. What runs
    there keeps running and its objects stay; jobs for it wait and say why."""
    _require_admin(actor)
    reason = _reason(reason)
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(enabled=False, disabled_reason=reason)
        fleet_audit(actor=actor, verb="cluster.disabled", obj=cluster,
                    before={"enabled": cluster.enabled}, after={"enabled": False},
                    message=f"Cluster {cluster} disabled: {reason}")  # fmt: skip
        _announce(cluster, "disabled")
    cluster.enabled, cluster.disabled_reason = False, reason
    return cluster


def cluster_enable(*, actor, cluster: Cluster, reason: str = "") -> Cluster:
    """Apply to the cluster again (platform admins), saying why: its waiting jobs and objects
    are sent."""
    _require_admin(actor)
    if cluster.deleted_at:
        raise ValidationError("This cluster was deleted; register it again instead.")
    reason = _reason(reason)
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(enabled=True, disabled_reason="")
        fleet_audit(actor=actor, verb="cluster.enabled", obj=cluster,
                    before={"enabled": cluster.enabled}, after={"enabled": True},
                    message=f"Cluster {cluster} enabled: {reason}")  # fmt: skip
        _announce(cluster, "enabled")
    cluster.enabled, cluster.disabled_reason = True, ""
    kube.clear_client_cache()  # a fresh start: the breaker tries at once
    return cluster


def cluster_delete(*, actor, cluster: Cluster, force: bool = False) -> None:
    """Delete a cluster from the portal (platform admins).

    Refused while jobs are active on it, unless `force`, which cancels them. The objects the
    portal keeps in the cluster (queues, flavors, namespaces, jobs) are removed by a worker when
    the cluster answers. The row itself goes when nothing of the past refers to it; otherwise it
    stays, deleted (hidden, never contacted), so that old jobs and bills keep their cluster.
    """
    _require_admin(actor)
    active = cluster.jobs.filter(state__in=ACTIVE_JOB_STATES).count()
    if active and not force:
        raise ValidationError(
            f"{active} job(s) are active on {cluster.name}: cancel them first, or delete with "
            "force, which cancels them."
        )
    now = timezone.now()
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(
            enabled=False, disabled_reason="deleted", deleted_at=now, is_default=False
        )
        if cluster.is_default:
            successor = Cluster.objects.filter(deleted_at__isnull=True).order_by("name").first()
            if successor:
                Cluster.objects.filter(pk=successor.pk).update(is_default=True)
        fleet_audit(actor=actor, verb="cluster.deleted", obj=cluster,
                    message=f"Cluster {cluster} deleted"
                    + (", its active jobs cancelled." if force else "."))  # fmt: skip
        _announce(cluster, "deleted", force=force, actor_id=getattr(actor, "pk", None))
    cluster.enabled, cluster.deleted_at = False, now
    kube.clear_client_cache()


def cluster_forget(*, cluster_id: int) -> bool:
    """The last step of a delete, once the cluster's objects are handled: remove the row, its
    nodes and pools when no history refers to them; True when the row is gone."""
    cluster = Cluster.objects.filter(pk=cluster_id, deleted_at__isnull=False).first()
    if cluster is None:
        return False
    try:
        with transaction.atomic():
            cluster.nodes.all().delete()
            cluster.pools.all().delete()
            cluster.delete()
    except ProtectedError:
        return False  # jobs, quotas or usage of the past keep it (hidden, never contacted)
    return True


def cluster_sync_request(*, actor, cluster: Cluster) -> None:
    """Ask for an inventory sync now (platform admins); the worker talks to the cluster."""
    _require_admin(actor)
    fleet_audit(actor=actor, verb="cluster.sync", obj=cluster,
                message=f"Inventory sync of cluster {cluster} asked for.")  # fmt: skip
    transaction.on_commit(lambda: cluster_sync_enqueue(cluster_id=cluster.pk))


def cluster_sync_enqueue(*, cluster_id: int) -> None:
    """Queue the inventory sync task (call after commit)."""
    from fleet.tasks import sync_inventory

    sync_inventory.delay(cluster_id)


def _register_in_cluster(name: str) -> tuple[Cluster, str]:
    """The cluster the portal runs in, reached through its pod's ServiceAccount."""
    found = Cluster.objects.filter(in_cluster=True, deleted_at__isnull=True).first()
    if found:
        return found, f"cluster {found.name} is the one the portal runs in already"
    label, n = name, 1
    while Cluster.objects.filter(name=name).exists():
        n += 1
        name = f"{label[:60]}-{n}"
    cluster = Cluster(
        name=name, in_cluster=True,
        is_default=not Cluster.objects.filter(is_default=True).exists(),
    )  # fmt: skip
    _save_cluster(cluster)
    return cluster, f"registered cluster {cluster.name}, the one the portal runs in"


def cluster_register_from_settings() -> tuple[Cluster | None, str]:
    """Register the cluster that KUBECONFIG (and KUBE_CONTEXT) name, as the portal's start-up
    does (`manage.py register_cluster`, run after migrate): nothing when no such file exists or
    a cluster is already reached through it. With KUBECONFIG empty inside a pod, the cluster
    the portal runs in (its ServiceAccount's token and CA), once. Named KUBE_CLUSTER_NAME,
    else after the context; the default cluster when there is none. Returns the cluster and
    what was done."""
    from django.conf import settings

    from fleet.validators import to_dns1123_label

    path = str(settings.KUBECONFIG or "")
    if not path and kube.in_cluster_available():
        return _register_in_cluster(settings.KUBE_CLUSTER_NAME or "in-cluster")
    if not path or not os.path.isfile(path):
        return None, f"no kubeconfig at {path or '(KUBECONFIG is empty)'}; nothing registered"
    context = settings.KUBE_CONTEXT or ""
    found = Cluster.objects.filter(
        kubeconfig_path=path, context=context, deleted_at__isnull=True
    ).first()
    if found:
        return found, f"cluster {found.name} is reached through {path} already"
    contexts = kube.kubeconfig_contexts(path)
    if context and context not in contexts:
        return None, f"{path} has no context {context!r}; nothing registered"
    label = settings.KUBE_CLUSTER_NAME or to_dns1123_label(context or "default")
    name, n = label, 1
    while Cluster.objects.filter(name=name).exists():
        n += 1
        name = f"{label[:60]}-{n}"
    cluster = Cluster(
        name=name, kubeconfig_path=path, context=context,
        is_default=not Cluster.objects.filter(is_default=True).exists(),
    )  # fmt: skip
    _save_cluster(cluster)
    return cluster, f"registered cluster {cluster.name} from {path}"
