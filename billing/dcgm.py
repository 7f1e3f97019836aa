"""The only metrics I/O of the portal: DCGM exporter scrapes and the Prometheus HTTP API.

Over 400 lines: both sources share series identity, time slicing and the sample budget below.

Both sources end in the same shape, `HourUsage` (one GPU × pod × hour), which
`billing.services.usage` turns into UsageHour rows.

Series identity. A DCGM series names its GPU by `UUID` (`uuid` with the exporter's old
namespace; MIG instances add `GPU_I_ID`/`GPU_I_PROFILE`), its node by `Hostname` (renamed
`hostname` on the exporter's main branch) and the pod holding it by `pod`/`namespace`. When
Prometheus scrapes the exporter with `honorLabels: false`, the exporter's pod labels become
`exported_pod`/`exported_namespace` and `pod`/`namespace` name the exporter's own pod. A target
(job, instance) that shows any `exported_*` label is treated as relabelled: its workload is read
from `exported_*` only, so an idle GPU is not billed to the exporter pod.
(settings.DCGM_HONOR_LABELS = False forces that reading for every target.)

Time. A sample stands for the scrape interval that ends at it: a pod seen at 10:00:30 held the
GPU during (10:00:00, 10:00:30]. The direct scrape credits exactly that span; for Prometheus an
hour H holds the samples in (H, H+1h], so both sources give the same rows. Each query below is
evaluated at H+1h over a range of 1h−1ms (Prometheus 2 ranges include both ends; timestamps
are in milliseconds), so a sample on the boundary belongs to exactly one hour.

PromQL, per closed hour and per chunk of nodes (`SEL` is the chunk's node matcher):

- samples held:     count_over_time(DCGM_FI_DEV_GPU_UTIL{SEL}[R])
  seconds = samples × scrape interval (settings.DCGM_SCRAPE_INTERVAL, the Prometheus job's)
- utilisation:      sum_over_time(DCGM_FI_DEV_GPU_UTIL{SEL}[R])  → mean = sum / samples
- busy:             sum_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{SEL}[R]) (0–1) when the series
                    has as many samples as GPU_UTIL, else sum(GPU_UTIL)/100; × interval
- memory:           sum_over_time / max_over_time(DCGM_FI_DEV_FB_USED{SEL}[R])
- energy (mJ):      max_over_time − min_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{SEL}[R])

Every query reads (series in the chunk) × (range / interval) samples. The series of an hour
come first from /api/v1/series (index only, no samples); nodes are packed into chunks whose
estimate stays below settings.BILLING_MAX_QUERY_SAMPLES (default 25 million), and a node too
large on its own is read in sub-ranges of the hour whose sums, counts, minima and maxima add up.
"""

from __future__ import annotations

import logging
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import requests
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
HOUR = timedelta(hours=1)


class MetricsError(Exception):
    """The metrics source was unreachable or answered something unusable (retry later)."""


def scrape_interval() -> int:
    """Seconds between two samples of a series (the exporter's or Prometheus' interval)."""
    return int(settings.DCGM_SCRAPE_INTERVAL)


def max_query_samples() -> int:
    return int(settings.BILLING_MAX_QUERY_SAMPLES)


def hour_start(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


# ---------------------------------------------------------------------------------------------
# Labels


# The profile of a time-sliced GPU's replica; attribution adds the share: "time-slice 1/4".
TIME_SLICE = "time-slice"


@dataclass(frozen=True)
class SeriesId:
    """What a DCGM series is about: one GPU (or MIG instance), its node, and the pod holding it."""

    gpu_uuid: str
    node: str
    model_name: str
    mig_profile: str
    namespace: str
    pod: str


def target_of(labels: dict) -> tuple[str, str]:
    return labels.get("job", ""), labels.get("instance", "")


def relabelled_targets(label_sets) -> set[tuple[str, str]]:
    """Targets whose series carry exported_pod/exported_namespace (honorLabels: false)."""
    return {
        target_of(labels)
        for labels in label_sets
        if "exported_pod" in labels or "exported_namespace" in labels
    }


def series_id(labels: dict, relabelled: set[tuple[str, str]] | None = None) -> SeriesId | None:
    """The GPU and pod a series describes; None for non-GPU entities (NVSwitch, CPU)."""
    uuid = labels.get("UUID") or labels.get("uuid") or ""
    if not uuid:
        return None
    instance = labels.get("GPU_I_ID", "")
    profile = labels.get("GPU_I_PROFILE", "")
    if instance:
        uuid = f"{uuid}/{instance}"
    elif labels.get("vgpu", "") != "":
        # A time-sliced GPU's replica (dcgm-exporter's virtual GPUs): billed as a slice.
        uuid, profile = f"{uuid}/{labels['vgpu']}", TIME_SLICE
    honor = settings.DCGM_HONOR_LABELS
    if not honor or (relabelled and target_of(labels) in relabelled):
        pod = labels.get("exported_pod", "")
        namespace = labels.get("exported_namespace", "")
    else:
        pod = labels.get("exported_pod") or labels.get("pod") or labels.get("pod_name") or ""
        namespace = (
            labels.get("exported_namespace")
            or labels.get("namespace")
            or labels.get("pod_namespace")
            or ""
        )
    return SeriesId(
        gpu_uuid=uuid,
        node=labels.get("Hostname") or labels.get("hostname") or "",
        model_name=labels.get("modelName", ""),
        mig_profile=profile,
        namespace=namespace if pod else "",
        pod=pod,
    )


# ---------------------------------------------------------------------------------------------
# The common result


@dataclass
class HourUsage:
    """Measurements of one GPU held by one pod (or idle: pod "") within one hour."""

    hour: datetime
    sid: SeriesId
    seconds: int = 0
    sample_count: int = 0
    expected_samples: int = 0
    util_sum: float = 0.0
    busy_seconds: float = 0.0
    memory_sum: float = 0.0
    memory_max: float = 0.0
    energy_min_mj: float | None = None
    energy_max_mj: float | None = None
    gap: bool = False

    @property
    def energy_joules(self) -> float:
        if self.energy_min_mj is None or self.energy_max_mj is None:
            return 0.0
        return max(0.0, (self.energy_max_mj - self.energy_min_mj) / 1000.0)


# ---------------------------------------------------------------------------------------------
# Direct scrape of exporter endpoints


@dataclass
class GpuSample:
    """One GPU's values in one scrape."""

    sid: SeriesId
    util: float | None = None
    gr_active: float | None = None
    fb_used: float | None = None
    energy_mj: float | None = None

    @property
    def busy_ratio(self) -> float:
        if self.gr_active is not None:
            return min(1.0, max(0.0, self.gr_active))
        return min(1.0, max(0.0, (self.util or 0.0) / 100.0))


_FIELDS = {UTIL: "util", GR_ACTIVE: "gr_active", FB_USED: "fb_used", ENERGY: "energy_mj"}


def parse_exposition(text: str) -> list[GpuSample]:
    """GPU samples from exporter text; raises MetricsError on malformed text."""
    by_key: dict[tuple, GpuSample] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                # The parser names a counter's samples <family>_total (OpenMetrics), whether or
                # not the exporter wrote the suffix; the DCGM field is the family's name.
                attr = _FIELDS.get(sample.name) or _FIELDS.get(family.name)
                if attr is None:
                    continue
                sid = series_id(sample.labels)
                if sid is None:
                    continue
                entry = by_key.setdefault((sid.gpu_uuid, sid.pod), GpuSample(sid=sid))
                setattr(entry, attr, float(sample.value))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise MetricsError(f"malformed exporter text: {exc}") from exc
    return list(by_key.values())


def _fetch(url: str) -> str:
    """One exporter endpoint's text; MetricsError when it does not answer."""
    try:
        response = requests.get(url, timeout=float(settings.DCGM_SCRAPE_TIMEOUT))
        response.raise_for_status()
    except requests.RequestException as exc:
        raise MetricsError(f"scrape of {url} failed: {exc}") from exc
    return response.text


def scrape(url: str) -> list[GpuSample]:
    """Fetch and parse one exporter endpoint."""
    return parse_exposition(_fetch(url))


def split_by_hour(start: int, end: int) -> list[tuple[datetime, int]]:
    """(hour, seconds) pieces of the half-open span [start, end) of epoch seconds."""
    pieces = []
    t = start
    while t < end:
        hour_epoch = t - t % 3600
        stop = min(end, hour_epoch + 3600)
        pieces.append((datetime.fromtimestamp(hour_epoch, UTC), stop - t))
        t = stop
    return pieces


def scrape_usage(
    samples: list[GpuSample], *, scraped_at: datetime, previous_at: datetime | None
) -> tuple[list[HourUsage], bool]:
    """HourUsage increments credited by one scrape, and whether a gap preceded it.

    The span since the previous scrape, (previous, now], is credited to what this scrape saw
    (whole seconds, so consecutive spans add up exactly). A first scrape, or one after a gap
    longer than three intervals, is credited one interval and the gap is flagged.
    """
    interval = scrape_interval()
    now = int(scraped_at.timestamp())
    gap = False
    missed = 0
    if previous_at is None:
        span = interval
    else:
        span = now - int(previous_at.timestamp())
        if span > 3 * interval:
            gap = True
            missed = max(0, round(span / interval) - 1)
            span = interval
    if span <= 0:
        return [], False
    out = []
    for sample in samples:
        pieces = split_by_hour(now - span, now)
        for index, (hour, seconds) in enumerate(pieces):
            last = index == len(pieces) - 1
            usage = HourUsage(hour=hour, sid=sample.sid, seconds=seconds, gap=gap)
            if last:
                # The sample's own values go with the end of its span (the hour it closes).
                usage.sample_count = 1
                usage.expected_samples = 1 + missed
                usage.util_sum = sample.util or 0.0
                usage.memory_sum = sample.fb_used or 0.0
                usage.memory_max = sample.fb_used or 0.0
                usage.energy_min_mj = usage.energy_max_mj = sample.energy_mj
            usage.busy_seconds = seconds * sample.busy_ratio
            out.append(usage)
    return out, gap


def seconds_in_hour(started: datetime, finished: datetime, hour: datetime) -> int:
    """Whole seconds of [started, finished) inside the hour [hour, hour + 1 h)."""
    h0 = int(hour.timestamp())
    s, f = int(started.timestamp()), int(finished.timestamp())
    return max(0, min(f, h0 + 3600) - max(s, h0))


# ---------------------------------------------------------------------------------------------
# Prometheus HTTP API


class Prometheus:
    """A minimal Prometheus HTTP API client (instant queries and series lookups)."""

    def __init__(self, base_url: str | None = None, timeout: float | None = None):
        self.base_url = (base_url or settings.PROMETHEUS_URL).rstrip("/")
        if not self.base_url:
            raise MetricsError("PROMETHEUS_URL is not set")
        self.timeout = timeout or float(settings.PROMETHEUS_TIMEOUT)
        self.session = requests.Session()
        self.largest_query_samples = 0
        self.queries = 0

    def _get(self, path: str, params: dict) -> list:
        try:
            response = self.session.post(
                f"{self.base_url}{path}", data=params, timeout=self.timeout
            )
        except requests.RequestException as exc:
            raise MetricsError(f"Prometheus unreachable: {exc}") from exc
        try:
            body = response.json()
        except ValueError as exc:
            raise MetricsError(f"Prometheus answered {response.status_code} without JSON") from exc
        if response.status_code != 200 or body.get("status") != "success":
            raise MetricsError(
                f"Prometheus {path} failed ({response.status_code}): "
                f"{body.get('errorType', '')} {body.get('error', '')}".strip()
            )
        self.queries += 1
        return body.get("data") or []

    def series(self, match: str, start: datetime, end: datetime) -> list[dict]:
        """Label sets of the series matching `match` with samples in [start, end]."""
        return self._get(
            "/api/v1/series",
            {"match[]": match, "start": start.timestamp(), "end": end.timestamp()},
        )

    def query(self, promql: str, at: datetime, *, estimated_samples: int = 0) -> list[dict]:
        """An instant query's vector result: [{"metric": labels, "value": [ts, "v"]}]."""
        self.largest_query_samples = max(self.largest_query_samples, estimated_samples)
        data = self._get("/api/v1/query", {"query": promql, "time": f"{at.timestamp():.3f}"})
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise MetricsError(f"unexpected result for {promql!r}")
        return data.get("result") or []


def prometheus_recent_utilisation(
    *, client: Prometheus | None = None, at: datetime | None = None, window: int = 120
) -> list[GpuSample]:
    """Each GPU's mean utilisation over the last `window` seconds, with the pod holding it, as
    samples of a scrape (for watching idle GPUs live where the metrics go through Prometheus).
    A series without samples in the window (an exporter gone quiet) is absent."""
    client = client or Prometheus()
    at = at or datetime.now(UTC)
    items = client.query(f"avg_over_time({UTIL}[{int(window)}s])", at)
    relabelled = relabelled_targets(item["metric"] for item in items)
    samples = []
    for item in items:
        sid = series_id(item["metric"], relabelled)
        if sid is None:
            continue
        try:
            samples.append(GpuSample(sid=sid, util=float(item["value"][1])))
        except (TypeError, ValueError, IndexError):
            continue
    return samples


def _regex_alternatives(values) -> str:
    escaped = [re.escape(v).replace("\\", "\\\\").replace('"', '\\"') for v in sorted(values)]
    return "|".join(escaped)


def node_selector(metric: str, nodes: list[str] | None) -> str:
    """A selector for `metric` on the given nodes, matching Hostname or hostname."""
    if nodes is None:
        return metric
    named = [n for n in nodes if n]
    parts = []
    if named:
        alt = _regex_alternatives(named)
        parts += [f'{metric}{{Hostname=~"{alt}"}}', f'{metric}{{hostname=~"{alt}"}}']
    if len(named) < len(nodes):
        parts.append(f'{metric}{{Hostname="",hostname=""}}')
    return " or ".join(parts)


@dataclass
class Chunk:
    """Nodes read together and the number of sub-ranges the hour is split into for them."""

    nodes: list[str] | None
    series: int
    windows: int = 1
    samples_per_query: int = 0


def plan_chunks(series_by_node: dict[str, int], *, points: int, limit: int) -> list[Chunk]:
    """Pack nodes into chunks whose queries read at most `limit` samples each."""
    chunks: list[Chunk] = []
    current = Chunk(nodes=[], series=0)
    for node, count in sorted(series_by_node.items()):
        if count * points > limit:
            windows = math.ceil(count * points / limit)
            chunks.append(
                Chunk(
                    nodes=[node],
                    series=count,
                    windows=windows,
                    samples_per_query=count * math.ceil(points / windows),
                )
            )
            continue
        if (current.series + count) * points > limit and current.nodes:
            chunks.append(current)
            current = Chunk(nodes=[], series=0)
        current.nodes.append(node)
        current.series += count
        current.samples_per_query = current.series * points
    if current.nodes:
        chunks.append(current)
    return chunks


def _ms(delta: timedelta) -> str:
    return f"{int(delta.total_seconds() * 1000)}ms"


def prometheus_hour_usage(
    *, hour: datetime, client: Prometheus | None = None
) -> tuple[list[HourUsage], dict]:
    """Per-GPU, per-pod usage of the closed hour (hour, hour+1h] of samples from Prometheus."""
    client = client or Prometheus()
    interval = scrape_interval()
    end = hour + HOUR
    label_sets = client.series(UTIL, hour + timedelta(milliseconds=1), end)
    relabelled = relabelled_targets(label_sets)
    series_by_node: dict[str, int] = defaultdict(int)
    for labels in label_sets:
        series_by_node[labels.get("Hostname") or labels.get("hostname") or ""] += 1
    points = math.ceil(3600 / interval)
    chunks = plan_chunks(series_by_node, points=points, limit=max_query_samples())
    rows: dict[SeriesId, HourUsage] = {}
    gr_counts: dict[SeriesId, float] = defaultdict(float)
    gr_sums: dict[SeriesId, float] = defaultdict(float)
    # Which GPUs had samples near the start and near the end of the hour: only a GPU present
    # at both ends is expected to have the whole hour's samples (one that appears or goes away
    # inside the hour, e.g. a node added or drained, has no gap).
    edge = timedelta(seconds=2 * interval)
    at_start: set[str] = set()
    at_end: set[str] = set()
    for chunk in chunks:
        for target, at in ((at_start, hour + edge), (at_end, end)):
            sel = node_selector(UTIL, chunk.nodes)
            for item in client.query(
                _wrap("count_over_time", sel, _ms(edge - timedelta(milliseconds=1))),
                at,
                estimated_samples=chunk.series * 2,
            ):
                sid = series_id(item["metric"], relabelled)
                if sid is not None:
                    target.add(sid.gpu_uuid)
    for chunk in chunks:
        width = HOUR / chunk.windows
        for w in range(chunk.windows):
            w_end = hour + width * (w + 1)
            rng = _ms(width - timedelta(milliseconds=1))
            at = w_end

            def run(fn, metric, _chunk=chunk, _rng=rng, _at=at):
                sel = node_selector(metric, _chunk.nodes)
                return client.query(
                    _wrap(fn, sel, _rng), _at, estimated_samples=_chunk.samples_per_query
                )

            for item in run("count_over_time", UTIL):
                sid = series_id(item["metric"], relabelled)
                if sid is None:
                    continue
                usage = rows.setdefault(sid, HourUsage(hour=hour, sid=sid))
                usage.sample_count += int(float(item["value"][1]))
            for fn, metric, attr in (
                ("sum_over_time", UTIL, "util_sum"),
                ("sum_over_time", FB_USED, "memory_sum"),
                ("max_over_time", FB_USED, "memory_max"),
                ("min_over_time", ENERGY, "energy_min_mj"),
                ("max_over_time", ENERGY, "energy_max_mj"),
                ("sum_over_time", GR_ACTIVE, "gr_sum"),
                ("count_over_time", GR_ACTIVE, "gr_count"),
            ):
                for item in run(fn, metric):
                    sid = series_id(item["metric"], relabelled)
                    if sid is None or sid not in rows:
                        continue
                    value = float(item["value"][1])
                    usage = rows[sid]
                    if attr == "gr_sum":
                        gr_sums[sid] += value
                    elif attr == "gr_count":
                        gr_counts[sid] += value
                    elif attr in ("util_sum", "memory_sum"):
                        setattr(usage, attr, getattr(usage, attr) + value)
                    elif attr == "memory_max":
                        usage.memory_max = max(usage.memory_max, value)
                    elif attr == "energy_min_mj":
                        cur = usage.energy_min_mj
                        usage.energy_min_mj = value if cur is None else min(cur, value)
                    else:
                        cur = usage.energy_max_mj
                        usage.energy_max_mj = value if cur is None else max(cur, value)
    per_gpu: dict[str, int] = defaultdict(int)
    for sid, usage in rows.items():
        usage.seconds = min(3600, usage.sample_count * interval)
        if gr_counts.get(sid) and int(gr_counts[sid]) == usage.sample_count:
            usage.busy_seconds = gr_sums[sid] * interval
        else:
            usage.busy_seconds = usage.util_sum / 100.0 * interval
        usage.busy_seconds = min(usage.busy_seconds, usage.seconds)
        per_gpu[sid.gpu_uuid] += usage.sample_count
    # A GPU present at both ends of the hour with fewer samples than the hour holds (one of
    # slack for scrape alignment) had a gap in its series.
    for sid, usage in rows.items():
        whole = sid.gpu_uuid in at_start and sid.gpu_uuid in at_end
        usage.expected_samples = points if whole else per_gpu[sid.gpu_uuid]
        usage.gap = whole and per_gpu[sid.gpu_uuid] < points - 1
    stats = {
        "series": len(label_sets),
        "chunks": len(chunks),
        "queries": client.queries,
        "largest_query_samples": client.largest_query_samples,
    }
    return list(rows.values()), stats


def _wrap(fn: str, selector: str, rng: str) -> str:
    # Each alternative of an `or` gets its own range selector.
    return " or ".join(f"{fn}({part}[{rng}])" for part in selector.split(" or "))


# ---------------------------------------------------------------------------------------------
# GPU health (billing.services.gpufaults): the last XID, double-bit ECC errors, and the time
# the GPU was throttled for heat or power. The exporter's default CSV enables only the XID; the
# others need the collectors CSV the README gives (a GPU without them is judged by its XID).

XID = "DCGM_FI_DEV_XID_ERRORS"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
THERMAL_VIOLATION = "DCGM_FI_DEV_THERMAL_VIOLATION"
POWER_VIOLATION = "DCGM_FI_DEV_POWER_VIOLATION"
# XIDs per code (label err_code) the driver reported in the exporter's window (5 min by
# default): the only sign of the same XID again, which leaves the last-XID gauge as it was.
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
_HEALTH_FIELDS = {
    XID: "xid",
    ECC_DBE: "ecc_dbe",
    THERMAL_VIOLATION: "thermal_ns",
    POWER_VIOLATION: "power_ns",
}


@dataclass
class GpuHealthSample:
    """One physical GPU's health figures at one moment (None: the exporter does not send it)."""

    gpu_uuid: str
    node: str
    gpu_index: int
    model_name: str
    xid: int | None = None
    ecc_dbe: float | None = None
    thermal_ns: float | None = None
    power_ns: float | None = None
    # XID code -> how many in the exporter's window; empty when none (or not exported).
    xid_counts: dict[int, int] = field(default_factory=dict)


def _add_xid_count(entry: GpuHealthSample, labels: dict, value: float) -> None:
    code = str(labels.get("err_code", ""))
    if code.isdigit() and not math.isnan(value) and value > 0:
        entry.xid_counts[int(code)] = entry.xid_counts.get(int(code), 0) + int(value)


def _health_entry(by_uuid: dict, labels: dict) -> GpuHealthSample | None:
    # Health is the physical GPU's: MIG instances and time-sliced replicas share their GPU's.
    uuid = labels.get("UUID") or labels.get("uuid") or ""
    if not uuid:
        return None
    entry = by_uuid.get(uuid)
    if entry is None:
        index = labels.get("gpu", "0")
        entry = by_uuid[uuid] = GpuHealthSample(
            gpu_uuid=uuid,
            node=labels.get("Hostname") or labels.get("hostname") or "",
            gpu_index=int(index) if str(index).isdigit() else 0,
            model_name=labels.get("modelName", ""),
        )
    return entry


def _health_set(entry: GpuHealthSample, attr: str, value: float) -> None:
    if math.isnan(value):
        return
    setattr(entry, attr, int(value) if attr == "xid" else value)


def parse_health(text: str) -> list[GpuHealthSample]:
    """Per-GPU health figures from exporter text; raises MetricsError on malformed text."""
    by_uuid: dict[str, GpuHealthSample] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                if XID_COUNT in (sample.name, family.name):
                    entry = _health_entry(by_uuid, sample.labels)
                    if entry is not None:
                        _add_xid_count(entry, sample.labels, float(sample.value))
                    continue
                attr = _HEALTH_FIELDS.get(sample.name) or _HEALTH_FIELDS.get(family.name)
                if attr is None:
                    continue
                entry = _health_entry(by_uuid, sample.labels)
                if entry is not None:
                    _health_set(entry, attr, float(sample.value))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise MetricsError(f"malformed exporter text: {exc}") from exc
    return list(by_uuid.values())


def scrape_health(url: str) -> list[GpuHealthSample]:
    """Fetch one exporter endpoint and read its GPUs' health."""
    return parse_health(_fetch(url))


def prometheus_gpu_health(
    *, client: Prometheus | None = None, at: datetime | None = None, window: int = 300
) -> list[GpuHealthSample]:
    """Each GPU's latest health figures within the last `window` seconds, from Prometheus
    (last_over_time of each field: the same raw values a scrape reads)."""
    client = client or Prometheus()
    at = at or datetime.now(UTC)
    by_uuid: dict[str, GpuHealthSample] = {}

    def read(query: str, record) -> None:
        for item in client.query(query, at):
            labels = item.get("metric") or {}
            entry = _health_entry(by_uuid, labels)
            if entry is None:
                continue
            try:
                record(entry, labels, float(item["value"][1]))
            except (TypeError, ValueError, IndexError, KeyError):
                continue

    for metric, attr in _HEALTH_FIELDS.items():
        read(f"last_over_time({metric}[{int(window)}s])",
             lambda entry, _labels, value, attr=attr: _health_set(entry, attr, value))  # fmt: skip
    # The count as it is now (no last_over_time: a code whose XIDs left the window is gone).
    read(XID_COUNT, _add_xid_count)
    return list(by_uuid.values())
