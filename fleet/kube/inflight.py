"""At most one worker waits on a cluster that does not answer, from its first unanswered request.

The breaker (fleet.kube.health) opens when a request times out, which takes the read timeout;
until then every worker process that sends the cluster a request would wait on it too, and the
healthy clusters' work would wait for them. So every request to a cluster (not watches and log
streams, which wait by design) is registered while it is in flight, in a registry all of the
portal's processes share: the broker's Redis (or KUBE_INFLIGHT_URL), or, where there is no
Redis (the embedded default, one host), a file under VAR_DIR. Before a request is sent:

- if another request to the cluster has waited longer than its *patience* with no answer from
  the cluster to anyone meanwhile, the cluster is not answering: this request is not sent
  (ClusterBusy, which the tasks treat as an open breaker: skip the cluster, or try later);
- if other requests are in flight but none is overdue, this one is sent *impatiently*: it
  waits at most its patience for its answer and then gives up (ClusterBusy too), so it can
  never become a second worker waiting out the same timeout;
- otherwise it is the cluster's patient request and waits its normal timeouts; when those run
  out the breaker opens and everyone leaves the cluster alone until its next try.

Patience is twenty times the cluster's usual latency as this process measured it, between
PATIENCE_MIN and PATIENCE_MAX. A registry that cannot be reached only loses this guard (logged):
requests go on as before."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from django.conf import settings

log = logging.getLogger(__name__)

PATIENCE_MIN = 0.5
PATIENCE_MAX = 3.0
PATIENCE_FACTOR = 20
# No request is in flight longer than its timeouts (fleet.kube.client.REQUEST_TIMEOUT, 3 s to
# connect and 10 s to read): an older entry belongs to a process that died mid-request (one of
# this host's is recognised at once) and is forgotten.
STALE_AFTER = 18.0
KEY_PREFIX = "qm:kube"

_sequence = count()
_redis_clients: dict[str, tuple] = {}
_lock = threading.Lock()
_warned_at = 0.0


@dataclass(frozen=True)
class Entry:
    """A request registered as in flight; `patient` when no other was in flight to its cluster."""

    cluster_id: int
    member: str
    patient: bool
    patience: float


@dataclass(frozen=True)
class Overdue:
    """Another request to the cluster waits unanswered past its patience: do not send."""

    waited: float
    member: str = ""


def patience_for(latency_ms: float | None) -> float:
    """How long a request waits for its answer before the cluster counts as not answering."""
    if latency_ms is None:  # this process has not heard from the cluster yet
        return PATIENCE_MIN
    return min(PATIENCE_MAX, max(PATIENCE_MIN, PATIENCE_FACTOR * latency_ms / 1000.0))


def enter(cluster_id: int | None, *, patience: float) -> Entry | Overdue | None:
    """Register a request about to be sent; None when there is no registry to ask."""
    if cluster_id is None:
        return None
    member = f"{os.uname().nodename}:{os.getpid()}:{threading.get_ident()}:{next(_sequence)}"
    member += f"|{patience:.3f}"
    try:
        backend = _backend()
        for _ in range(3):
            found = backend.enter(cluster_id, member, patience, time.time())
            # A request of a process of this host that has died waits for nothing: forget it.
            if not (isinstance(found, Overdue) and _holder_dead(found.member)):
                return found
            backend.drop(cluster_id, found.member)
        return found
    except Exception as exc:  # noqa: BLE001 - the guard is lost, the request is not
        _warn(exc)
        return None


def _holder_dead(member: str) -> bool:
    node, _, rest = member.partition(":")
    pid = rest.partition(":")[0]
    if node != os.uname().nodename or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def leave(entry: Entry | Overdue | None, *, answered: bool) -> None:
    """The request ended; `answered` when the cluster sent an answer (any status)."""
    if not isinstance(entry, Entry):
        return
    try:
        _backend().leave(entry.cluster_id, entry.member, answered, time.time())
    except Exception as exc:  # noqa: BLE001
        _warn(exc)


def forget(cluster_id: int) -> None:
    """Drop a cluster's registry (tests, and a cluster deleted)."""
    with contextlib.suppress(Exception):
        _backend().forget(cluster_id)


def _warn(exc: Exception) -> None:
    global _warned_at
    if time.monotonic() - _warned_at > 60:
        _warned_at = time.monotonic()
        log.warning("the registry of requests in flight is not answering: %s", exc)


def _backend():
    url = settings.KUBE_INFLIGHT_URL
    if url.startswith(("redis://", "rediss://", "unix://")):
        return _RedisRegistry(url)
    return _FileRegistry(Path(settings.VAR_DIR) / "kube-inflight")


class _RedisRegistry:
    # In one round trip: forget entries of dead processes, refuse while another request is
    # overdue, else register this one and say how many others are in flight.
    ENTER = """
    local now = tonumber(ARGV[1])
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
    local others = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
    local answered = tonumber(redis.call('GET', KEYS[2]) or '0')
    for i = 1, #others, 2 do
      local started = tonumber(others[i + 1])
      local patience = tonumber(string.match(others[i], '|([^|]+)$'))
      if now - math.max(started, answered) > patience then
        return {'overdue', tostring(now - started), others[i]}
      end
    end
    redis.call('ZADD', KEYS[1], now, ARGV[2])
    redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])))
    return {'entered', tostring(#others / 2)}
    """
    LEAVE = """
    redis.call('ZREM', KEYS[1], ARGV[1])
    if ARGV[3] == '1' then
      local before = tonumber(redis.call('GET', KEYS[2]) or '0')
      if tonumber(ARGV[2]) > before then
        redis.call('SET', KEYS[2], ARGV[2], 'EX', math.ceil(tonumber(ARGV[4])))
      end
    end
    return 1
    """

    def __init__(self, url: str):
        with _lock:
            found = _redis_clients.get(url)
            if found is None:
                import redis

                client = redis.Redis.from_url(
                    url, socket_timeout=0.5, socket_connect_timeout=0.5, health_check_interval=30
                )
                found = (client, client.register_script(self.ENTER),
                         client.register_script(self.LEAVE))  # fmt: skip
                _redis_clients[url] = found
        self.client, self._enter, self._leave = found

    @staticmethod
    def _keys(cluster_id: int) -> list[str]:
        return [f"{KEY_PREFIX}:inflight:{cluster_id}", f"{KEY_PREFIX}:answered:{cluster_id}"]

    def enter(self, cluster_id: int, member: str, patience: float, now: float):
        verdict, figure, *holder = self._enter(
            keys=self._keys(cluster_id), args=[repr(now), member, STALE_AFTER]
        )
        if verdict == b"overdue":
            return Overdue(waited=float(figure), member=holder[0].decode())
        return Entry(cluster_id, member, patient=float(figure) == 0, patience=patience)

    def drop(self, cluster_id: int, member: str) -> None:
        self.client.zrem(self._keys(cluster_id)[0], member)

    def leave(self, cluster_id: int, member: str, answered: bool, now: float) -> None:
        self._leave(
            keys=self._keys(cluster_id),
            args=[member, repr(now), "1" if answered else "0", STALE_AFTER],
        )

    def forget(self, cluster_id: int) -> None:
        self.client.delete(*self._keys(cluster_id))


class _FileRegistry:
    """The same registry in a JSON file per cluster, under an exclusive lock (one host)."""

    def __init__(self, root: Path):
        self.root = root

    @contextlib.contextmanager
    def _state(self, cluster_id: int):
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{cluster_id}.json"
        with open(path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            try:
                state = json.loads(handle.read() or "{}")
            except ValueError:
                state = {}
            state.setdefault("inflight", {})
            state.setdefault("answered", 0.0)
            yield state
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(state))

    def enter(self, cluster_id: int, member: str, patience: float, now: float):
        with self._state(cluster_id) as state:
            inflight = {
                m: (started, p)
                for m, (started, p) in state["inflight"].items()
                if started > now - STALE_AFTER
            }
            state["inflight"] = inflight
            for holder, (started, holder_patience) in inflight.items():
                if now - max(started, state["answered"]) > holder_patience:
                    return Overdue(waited=now - started, member=holder)
            patient = not inflight
            inflight[member] = (now, patience)
        return Entry(cluster_id, member, patient=patient, patience=patience)

    def drop(self, cluster_id: int, member: str) -> None:
        with self._state(cluster_id) as state:
            state["inflight"].pop(member, None)

    def leave(self, cluster_id: int, member: str, answered: bool, now: float) -> None:
        with self._state(cluster_id) as state:
            state["inflight"].pop(member, None)
            if answered:
                state["answered"] = max(state["answered"], now)

    def forget(self, cluster_id: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.root / f"{cluster_id}.json").unlink()
