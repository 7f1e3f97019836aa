"""Team volumes and team secrets: team leads (and platform admins) create, change and delete
them; the team's jobs mount the volumes and read the secrets.

A volume is desired state like a queue: a row the reconcile renders into a PersistentVolumeClaim
and repairs when it drifts. A secret's values never touch the database: they are written to the
cluster in the request, and the row keeps the key names and a keyed fingerprint of the values.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from core.errors import ClusterRefused
from core.roles import is_platform_admin
from fleet import kube
from fleet.models import Cluster
from fleet.services.cluster_health import cluster_may_call
from fleet.validators import DNS1123_LABEL_MESSAGE, to_dns1123_label
from queues.manifests.common import LABEL_MANAGED_BY, LABEL_TEAM, MANAGED_BY
from queues.models import Job, Team, TeamSecret, TeamVolume
from queues.selectors.tenancy import user_is_team_lead
from queues.services.audit import audit
from queues.services.reconcile import reconcile_cluster_enqueue

MAX_VOLUME_GIB = 1024 * 1024
SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
MAX_SECRET_KEYS = 64
# The API server refuses a Secret over 1 MiB.
MAX_SECRET_BYTES = 1024 * 1024
STORAGE_CLASS_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
REGISTRY_RE = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$")
FINGERPRINT_ANNOTATION = "quartermaster.dev/fingerprint"
DOCKER_CONFIG_KEY = ".dockerconfigjson"


def _require_lead(user, team: Team, what: str) -> None:
    if not (is_platform_admin(user) or user_is_team_lead(user=user, team=team)):
        raise PermissionDenied(f"Only a lead of {team.name} or a platform admin {what}.")


def _live_cluster(cluster) -> Cluster:
    if cluster is None or cluster.deleted_at is not None:
        raise ValidationError({"cluster": "Choose a registered cluster."})
    return cluster


def _check_name(name) -> str:
    name = name.strip() if isinstance(name, str) else ""
    if not name or to_dns1123_label(name) != name or len(name) > 63:
        raise ValidationError({"name": DNS1123_LABEL_MESSAGE})
    return name


def _active_jobs(team: Team, cluster_id: int):
    return Job.objects.filter(team=team, cluster_id=cluster_id).exclude(state__in=Job.FINAL_STATES)


def _names(jobs) -> str:
    return ", ".join(f"#{j.pk} {j.name}" for j in jobs[:5]) + (" …" if len(jobs) > 5 else "")


# -- volumes -----------------------------------------------------------------------------------


def _check_size(size_gib) -> int:
    try:
        size = int(size_gib)
    except (TypeError, ValueError):
        raise ValidationError({"size_gib": "Give the size in GiB as a whole number."}) from None
    if isinstance(size_gib, bool) or not 1 <= size <= MAX_VOLUME_GIB:
        raise ValidationError({"size_gib": f"Give a size from 1 to {MAX_VOLUME_GIB} GiB."})
    return size


def volume_create(
    *, actor, team: Team, cluster, name, size_gib, storage_class="", access_mode=None
) -> TeamVolume:
    """A new volume of the team on a cluster; the reconcile creates its claim there."""
    _require_lead(actor, team, "creates the team's volumes")
    cluster = _live_cluster(cluster)
    errors = {}
    try:
        name = _check_name(name)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    try:
        size = _check_size(size_gib)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    storage_class = (storage_class or "").strip()
    if storage_class and not STORAGE_CLASS_RE.fullmatch(storage_class):
        errors["storage_class"] = "A StorageClass name: lower-case letters, digits, '-' and '.'."
    access_mode = access_mode or TeamVolume.AccessMode.RWX
    if access_mode not in TeamVolume.AccessMode.values:
        errors["access_mode"] = "Choose one of " + ", ".join(TeamVolume.AccessMode.values) + "."
    if not errors and storage_class:
        known = storage_classes(cluster=cluster)
        if known is not None and storage_class not in known:
            errors["storage_class"] = (
                f"Cluster {cluster.name} has no StorageClass {storage_class!r} (it has: "
                f"{', '.join(known) or 'none'}); leave it empty for the cluster's default."
            )
    if errors:
        raise ValidationError(errors)
    try:
        with transaction.atomic():
            volume = TeamVolume.objects.create(
                team=team, cluster=cluster, name=name, size_gib=size,
                storage_class=storage_class, access_mode=access_mode, created_by=actor,
            )  # fmt: skip
            audit(actor=actor, verb="volume.create", obj=volume, team=team,
                  after=_volume_fields(volume))  # fmt: skip
            reconcile_cluster_enqueue(cluster.pk)
    except IntegrityError:
        raise ValidationError(
            {"name": f"{team.name} already has a volume named {name} on {cluster.name}."}
        ) from None
    return volume


def _volume_fields(volume: TeamVolume) -> dict:
    return {
        "cluster": volume.cluster.name, "name": volume.name, "size_gib": volume.size_gib,
        "storage_class": volume.storage_class, "access_mode": volume.access_mode,
    }  # fmt: skip


def volume_resize(*, actor, volume: TeamVolume, size_gib) -> TeamVolume:
    """Grow a volume (claims only grow; the storage class must allow expansion)."""
    _require_lead(actor, volume.team, "resizes the team's volumes")
    size = _check_size(size_gib)
    if size < volume.size_gib:
        raise ValidationError(
            {"size_gib": f"A volume only grows: give at least {volume.size_gib} GiB "
             "(to shrink, create a smaller volume and copy the data)."}
        )  # fmt: skip
    with transaction.atomic():
        before = _volume_fields(volume)
        TeamVolume.objects.filter(pk=volume.pk).update(size_gib=size)
        volume.size_gib = size
        audit(actor=actor, verb="volume.resize", obj=volume, team=volume.team, before=before,
              after=_volume_fields(volume))  # fmt: skip
        reconcile_cluster_enqueue(volume.cluster_id)
    return volume


def volume_delete(*, actor, volume: TeamVolume) -> None:
    """Delete a volume and its claim (and so its data), unless an unfinished job mounts it."""
    _require_lead(actor, volume.team, "deletes the team's volumes")
    users = [
        j for j in _active_jobs(volume.team, volume.cluster_id).only("id", "name", "volumes")
        if any(m.get("volume") == volume.name for m in j.volumes or [])
    ]  # fmt: skip
    if users:
        raise ValidationError(
            {"name": f"Jobs that have not finished mount {volume.name}: {_names(users)}. "
             "Cancel them or wait for them to end, then delete the volume."}
        )  # fmt: skip
    with transaction.atomic():
        audit(actor=actor, verb="volume.delete", obj=volume, team=volume.team,
              before=_volume_fields(volume))  # fmt: skip
        cluster_id = volume.cluster_id
        volume.delete()
        reconcile_cluster_enqueue(cluster_id)


def storage_classes(*, cluster: Cluster) -> list[str] | None:
    """The cluster's StorageClass names, or None when it cannot be asked now."""
    if not cluster_may_call(cluster=cluster):
        return None
    try:
        items = kube.client_for(cluster).list("storage.k8s.io/v1", "StorageClass")
    except kube.KubeError:
        return None
    return sorted(item["metadata"]["name"] for item in items)


# -- secrets -----------------------------------------------------------------------------------


def secret_fingerprint(values: dict[str, str]) -> str:
    """HMAC-SHA256 of the values under the portal's key: equal values give equal fingerprints,
    and the fingerprint cannot be checked against guesses without the key."""
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(settings.SECRET_KEY.encode(), canonical, hashlib.sha256).hexdigest()


def _clean_values(values) -> dict[str, str]:
    if not isinstance(values, dict) or not values:
        raise ValidationError({"values": 'Give at least one KEY: value, e.g. {"api-key": "…"}.'})
    if len(values) > MAX_SECRET_KEYS:
        raise ValidationError({"values": f"Use at most {MAX_SECRET_KEYS} keys."})
    out = {}
    for key, value in values.items():
        if not isinstance(key, str) or not SECRET_KEY_RE.fullmatch(key) or len(key) > 253:
            raise ValidationError(
                {"values": f"Invalid key {str(key)[:60]!r}: use letters, digits, '-', '_' "
                 "and '.'."}
            )  # fmt: skip
        if not isinstance(value, str):
            raise ValidationError({"values": f"The value of {key} must be text."})
        out[key] = value
    if sum(len(k) + len(v.encode()) for k, v in out.items()) > MAX_SECRET_BYTES:
        raise ValidationError({"values": "Kubernetes keeps at most 1 MiB in a Secret."})
    return out


def _registry_values(registry, username, password) -> tuple[str, dict[str, str]]:
    registry = (registry or "").strip()
    errors = {}
    if not REGISTRY_RE.fullmatch(registry):
        errors["registry"] = "Give the registry's host (and port), e.g. ghcr.io."
    if not isinstance(username, str) or not username.strip():
        errors["username"] = "Give the user name to sign in with."
    if not isinstance(password, str) or not password:
        errors["password"] = "Give the password or access token."
    if errors:
        raise ValidationError(errors)
    auth = base64.b64encode(f"{username.strip()}:{password}".encode()).decode()
    config = {"auths": {registry: {"username": username.strip(), "password": password,
                                   "auth": auth}}}  # fmt: skip
    return registry, {DOCKER_CONFIG_KEY: json.dumps(config, sort_keys=True)}


def secret_manifest(*, team: Team, name: str, kind: str, values: dict[str, str]) -> dict:
    """The Secret as written to the cluster (values base64 in data, as the API stores them)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": team.namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEAM: team.slug},
            "annotations": {FINGERPRINT_ANNOTATION: secret_fingerprint(values)[:16]},
        },
        "type": "kubernetes.io/dockerconfigjson" if kind == TeamSecret.Kind.REGISTRY else "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }


def _write(cluster: Cluster, write) -> None:
    if not cluster.enabled:
        raise ClusterRefused(f"Cluster {cluster.name} is disabled; nothing was saved.")
    if not cluster_may_call(cluster=cluster):
        raise ClusterRefused(
            f"Cluster {cluster.name} is not answering; nothing was saved. Try again when it is "
            "back (its health is on the clusters page)."
        )
    try:
        write(kube.client_for(cluster))
    except kube.KubeError as exc:
        raise ClusterRefused(
            f"Cluster {cluster.name} did not take the change ({exc}); nothing was saved."
        ) from exc


def secret_set(
    *, actor, team: Team, cluster, name, kind=None, values=None, registry=None, username=None,
    password=None,
) -> TeamSecret:  # fmt: skip
    """Create or replace a team secret: its values go to the cluster only."""
    _require_lead(actor, team, "sets the team's secrets")
    cluster = _live_cluster(cluster)
    name = _check_name(name)
    kind = kind or TeamSecret.Kind.GENERIC
    if kind not in TeamSecret.Kind.values:
        raise ValidationError({"kind": "Choose generic or registry."})
    if kind == TeamSecret.Kind.REGISTRY:
        registry, values = _registry_values(registry, username, password)
    else:
        registry, values = "", _clean_values(values)
    existing = TeamSecret.objects.filter(team=team, cluster=cluster, name=name).first()
    if existing is not None and existing.kind != kind:
        raise ValidationError(
            {"kind": f"{name} is a {existing.get_kind_display().lower()}; delete it first to "
             "reuse the name for the other kind."}
        )  # fmt: skip
    if existing is not None and kind == TeamSecret.Kind.GENERIC:
        missing = _referenced_keys(team, cluster.pk, name) - set(values)
        if missing:
            raise ValidationError(
                {"values": f"Unfinished jobs read the keys {', '.join(sorted(missing))} of "
                 f"{name}; keep them."}
            )  # fmt: skip
    manifest = secret_manifest(team=team, name=name, kind=kind, values=values)
    _write(cluster, lambda client: client.apply(manifest, force=True))
    fields = {
        "kind": kind, "keys": sorted(values), "registry": registry,
        "fingerprint": secret_fingerprint(values), "updated_by": actor,
    }  # fmt: skip
    with transaction.atomic():
        secret, created = TeamSecret.objects.update_or_create(
            team=team, cluster=cluster, name=name, defaults=fields
        )
        audit(actor=actor, verb="secret.create" if created else "secret.update", obj=secret,
              team=team, after=_secret_fields(secret))  # fmt: skip
    return secret


def _secret_fields(secret: TeamSecret) -> dict:
    # Never the values: key names, kind, registry and the fingerprint's first characters.
    return {
        "cluster": secret.cluster.name, "name": secret.name, "kind": secret.kind,
        "keys": list(secret.keys), "registry": secret.registry,
        "fingerprint": secret.fingerprint[:16],
    }  # fmt: skip


def _referenced_keys(team: Team, cluster_id: int, name: str) -> set[str]:
    keys = set()
    for job in _active_jobs(team, cluster_id).only("secret_env"):
        keys |= {ref["key"] for ref in (job.secret_env or {}).values() if ref["secret"] == name}
    return keys


def secret_delete(*, actor, secret: TeamSecret) -> bool:
    """Delete a secret from the portal and the cluster, unless an unfinished job reads it.
    Returns whether the cluster deleted it at once (else a task does when it answers)."""
    team = secret.team
    _require_lead(actor, team, "deletes the team's secrets")
    jobs = _active_jobs(team, secret.cluster_id).only("id", "name", "secret_env")
    if secret.kind == TeamSecret.Kind.GENERIC:
        users = [
            j for j in jobs
            if any(ref["secret"] == secret.name for ref in (j.secret_env or {}).values())
        ]  # fmt: skip
        if users:
            raise ValidationError(
                {"name": f"Unfinished jobs read {secret.name}: {_names(users)}. Cancel them or "
                 "wait for them to end, then delete the secret."}
            )  # fmt: skip
    ns = team.namespace
    try:
        _write(secret.cluster, lambda client: client.delete("v1", "Secret", secret.name, ns))
        removed = True
    except ClusterRefused:
        # The cluster does not answer now: a task deletes it there when it does.
        removed = False
    with transaction.atomic():
        audit(actor=actor, verb="secret.delete", obj=secret, team=team,
              before=_secret_fields(secret))  # fmt: skip
        key = (secret.cluster_id, team.pk, secret.name)
        secret.delete()
        if not removed:
            transaction.on_commit(lambda: _enqueue_secret_removal(*key))
    return removed


def _enqueue_secret_removal(cluster_id: int, team_id: int, name: str) -> None:
    from queues.tasks import remove_team_secret

    remove_team_secret.delay(cluster_id, team_id, name)


def secret_remove_from_cluster(*, cluster_id: int, team_id: int, name: str) -> bool:
    """Delete a Secret the portal no longer has from the team's namespace (unless it was set
    again meanwhile); False when there was nothing to delete."""
    if TeamSecret.objects.filter(cluster_id=cluster_id, team_id=team_id, name=name).exists():
        return False
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    team = Team.objects.filter(pk=team_id).first()
    if cluster is None or team is None or not cluster.enabled:
        return False
    return kube.client_for(cluster).delete("v1", "Secret", name, team.namespace)


def secret_states(*, secrets: list[TeamSecret]) -> dict[int, str]:
    """Per secret id, what its cluster holds: "ok", "missing", "changed" (values differ from
    what the portal wrote), or "unknown" (the cluster cannot be asked now). Each Secret is read
    by its name (the portal may not list Secrets: a list would read every Secret of the
    namespace); the values read are compared and dropped."""
    states: dict[int, str] = {}
    groups: dict[tuple[int, str], list[TeamSecret]] = {}
    for secret in secrets:
        groups.setdefault((secret.cluster_id, secret.team.namespace), []).append(secret)
    for (_, namespace), group in groups.items():
        cluster = group[0].cluster
        live = None
        if cluster.enabled and cluster_may_call(cluster=cluster):
            try:  # a cluster whose configuration does not load cannot be asked either
                client = kube.client_for(cluster)
                found = [client.get("v1", "Secret", s.name, namespace) for s in group]
                live = {item["metadata"]["name"]: item for item in found if item is not None}
            except kube.KubeError:
                live = None
        for secret in group:
            if live is None:
                states[secret.pk] = "unknown"
            elif secret.name not in live:
                states[secret.pk] = "missing"
            else:
                data = live[secret.name].get("data") or {}
                try:
                    values = {k: base64.b64decode(v).decode() for k, v in data.items()}
                except (ValueError, UnicodeDecodeError):
                    values = None
                same = values is not None and secret_fingerprint(values) == secret.fingerprint
                states[secret.pk] = "ok" if same else "changed"
    return states
