"""Stage 1 of the GPU fault loop: each GPU's health from DCGM, its history, and the faults it
opens (see the package's docstring)."""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction

from billing import dcgm
from billing.models import GpuFault, GpuHealth, GpuHealthEvent
from fleet.models import Cluster
from queues.services.audit import audit

log = logging.getLogger(__name__)
H = GpuHealth.State
F = GpuFault.State


def _judge(row: GpuHealth, sample: dcgm.GpuHealthSample, share: dict) -> tuple[str, str]:
    """(state, reason) of a GPU from its latest figures."""
    xid = sample.xid or 0
    if xid in settings.GPU_FAULT_XIDS and xid != row.xid_accepted:
        return H.FAILED, f"XID {xid} reported by the driver"
    again = sorted(code for code, n in sample.xid_counts.items() if code in settings.GPU_FAULT_XIDS
                   and n > row.xid_counts.get(str(code), 0))  # fmt: skip
    if again:
        return H.FAILED, f"XID {again[0]} reported by the driver again"
    dbe = int(sample.ecc_dbe or 0)
    if dbe > row.dbe_accepted:
        return H.FAILED, f"{dbe - row.dbe_accepted} double-bit ECC error(s)"
    limit = float(settings.GPU_THROTTLE_DEGRADED_SHARE)
    hot = [f"{what} {value:.0%} of the time" for what, value in share.items()
           if value is not None and value > limit]  # fmt: skip
    if hot:
        return H.DEGRADED, "throttled: " + ", ".join(hot)
    return H.HEALTHY, ""


def _share(previous_ns: int, now_ns: float | None, seconds: float) -> float | None:
    if now_ns is None or seconds <= 0 or now_ns < previous_ns:
        return None  # a first look, or a counter reset (driver reload): no rate yet
    return min(1.0, (now_ns - previous_ns) / 1e9 / seconds)


def gpu_health_observe(
    *, cluster: Cluster, samples: list[dcgm.GpuHealthSample], at: datetime,
    holders: dict[str, list[list[str]]] | None = None,
) -> list[GpuFault]:  # fmt: skip
    """Record the cluster's GPUs' health at `at`; returns the faults this opened.

    One transaction with the cluster's rows locked, so two runs at once write one history."""
    new_rows, updated, events, failed = [], [], [], []
    with transaction.atomic():
        existing = {
            row.gpu_uuid: row
            for row in GpuHealth.objects.select_for_update().filter(
                cluster=cluster, gpu_uuid__in=[s.gpu_uuid for s in samples]
            )
        }
        for sample in samples:
            row = existing.get(sample.gpu_uuid)
            if row is None:
                row = GpuHealth(cluster=cluster, gpu_uuid=sample.gpu_uuid, observed_at=at,
                                state_since=at)  # fmt: skip
            elif at <= row.observed_at:
                continue  # an older reading than the one recorded
            seconds = (at - row.observed_at).total_seconds() if row.pk else 0
            share = {
                "thermal": _share(row.thermal_violation_ns, sample.thermal_ns, seconds),
                "power": _share(row.power_violation_ns, sample.power_ns, seconds),
            }
            state, reason = _judge(row, sample, share)
            changed = row.pk is None and state != H.HEALTHY or row.pk and state != row.state
            row.node_name, row.gpu_index = sample.node, sample.gpu_index
            row.model_name = sample.model_name[:200]
            row.last_xid = sample.xid or 0
            row.xid_counts = {str(code): n for code, n in sorted(sample.xid_counts.items())}
            row.ecc_dbe_total = int(sample.ecc_dbe or 0)
            row.thermal_violation_ns = int(sample.thermal_ns or 0)
            row.power_violation_ns = int(sample.power_ns or 0)
            row.thermal_share, row.power_share = share["thermal"], share["power"]
            row.observed_at = at
            if changed or row.pk is None:
                row.state, row.reason, row.state_since = state, reason, at
            (updated if row.pk else new_rows).append(row)
            if changed:
                events.append(GpuHealthEvent(
                    cluster=cluster, node_name=row.node_name, gpu_uuid=row.gpu_uuid,
                    gpu_index=row.gpu_index, at=at, state=state, reason=reason or "healthy",
                ))  # fmt: skip
            if state == H.FAILED:
                failed.append(row)
        GpuHealth.objects.bulk_create(new_rows)
        # An UPDATE per row (bulk_update's CASE expressions measured 4 s per 1000 rows).
        for row in updated:
            GpuHealth.objects.filter(pk=row.pk).update(**{f: getattr(row, f) for f in _OBSERVED})
        GpuHealthEvent.objects.bulk_create(events)
    opened = []
    for row in failed:
        fault = _open_fault(row, at=at, pods=(holders or {}).get(row.gpu_uuid, []))
        if fault is not None:
            opened.append(fault)
    return opened


_OBSERVED = [
    "node_name", "gpu_index", "model_name", "last_xid", "xid_counts", "ecc_dbe_total",
    "thermal_violation_ns", "power_violation_ns", "thermal_share", "power_share", "observed_at",
    "state", "reason", "state_since",
]  # fmt: skip


def _open_fault(row: GpuHealth, *, at: datetime, pods: list) -> GpuFault | None:
    """Open the GPU's fault unless one is open (the constraint decides a race)."""
    if (
        GpuFault.objects.filter(cluster=row.cluster, gpu_uuid=row.gpu_uuid)
        .exclude(state=F.RETURNED)
        .exists()
    ):
        return None
    try:
        with transaction.atomic():
            fault = GpuFault.objects.create(
                cluster=row.cluster, node_name=row.node_name, gpu_uuid=row.gpu_uuid,
                gpu_index=row.gpu_index, model_name=row.model_name, xid=row.last_xid,
                reason=row.reason, detected_at=at, pods=pods,
            )  # fmt: skip
    except IntegrityError:
        return None
    audit(actor=None, verb="gpu.fault", obj=fault,
          message=f"GPU {row.gpu_index} ({row.gpu_uuid}) of node {row.node_name} failed: "
          f"{row.reason}.", after={"node": row.node_name, "gpu": row.gpu_index,
                                   "xid": row.last_xid})  # fmt: skip
    return fault


def gpu_health_read(*, cluster: Cluster, urls: list[str], prometheus: str, at: datetime) -> int:
    """Read a cluster's GPUs' health from its exporters or its Prometheus and observe it;
    returns how many GPUs were seen. An exporter that does not answer costs only its GPUs."""
    samples: list[dcgm.GpuHealthSample] = []
    holders: dict[str, list[list[str]]] = {}
    if prometheus:
        samples = dcgm.prometheus_gpu_health(client=dcgm.Prometheus(base_url=prometheus), at=at)
        for gpu in dcgm.prometheus_recent_utilisation(
            client=dcgm.Prometheus(base_url=prometheus), at=at
        ):
            _hold(holders, gpu.sid)
    for url in urls:
        try:
            samples += dcgm.scrape_health(url)
            for gpu in dcgm.scrape(url):
                _hold(holders, gpu.sid)
        except dcgm.MetricsError as exc:
            log.warning("gpu health: %s: %s", cluster.name, exc)
    gpu_health_observe(cluster=cluster, samples=samples, at=at, holders=holders)
    return len(samples)


def _hold(holders: dict, sid: dcgm.SeriesId) -> None:
    if sid.pod:
        uuid = sid.gpu_uuid.split("/", 1)[0]
        holders.setdefault(uuid, []).append([sid.namespace, sid.pod])
