"""The embedded default's Celery broker: a kombu transport on one SQLite file (`sqlite://`).

Why not kombu's filesystem transport, which the embedded default used before: it writes a
message into its final name while a consumer may already read it (a half-written file raised
JSONDecodeError in the worker), it deletes a message when it hands it out (a worker killed with
messages prefetched lost them), and it cannot be driven by the worker's event loop, so Celery
falls back to a pool whose processes share one locked pipe: a pool process killed while it
holds that lock leaves every other one waiting for it, and the worker runs nothing for good.

Here every change is one SQLite statement or transaction (WAL journal), so a reader sees a
message whole or not at all. A message handed out stays in the file, marked with the process
that holds it, until that process acknowledges it; if the process dies first (its lock file is
free again), any consumer puts the message back, marked redelivered. Bindings live in the file
too, so producers in other processes route as the consumers declared. The transport tells Celery
it can be polled from the worker's event loop, so the worker runs its prefork pool with one pipe
per process, which survives killed processes.

Owned queues (auto-delete or exclusive: a worker's remote-control and event queues, a client's
reply queue) are removed with the process that declared them, so a killed worker leaves no
queue behind that fills up with broadcasts nobody reads.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections import namedtuple
from pathlib import Path

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.utils.objects import cached_property

logger = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS message (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    tag TEXT NOT NULL,
    payload TEXT NOT NULL,
    holder TEXT,
    redelivered INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS message_ready ON message (queue, holder, priority DESC, id);
CREATE INDEX IF NOT EXISTS message_tag ON message (tag);
CREATE INDEX IF NOT EXISTS message_holder ON message (holder);
CREATE TABLE IF NOT EXISTS queue (name TEXT PRIMARY KEY, owner TEXT);
CREATE TABLE IF NOT EXISTS binding (
    exchange TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    pattern TEXT NOT NULL,
    queue TEXT NOT NULL,
    PRIMARY KEY (exchange, routing_key, pattern, queue)
);
CREATE TABLE IF NOT EXISTS owner (token TEXT PRIMARY KEY, pid INTEGER NOT NULL, since REAL);
"""

Binding = namedtuple("Binding", "routing_key pattern queue")

# How often a consumer looks for processes that died holding messages.
SWEEP_SECONDS = 5.0
# The most messages one tick of the worker's event loop hands out.
MAX_PER_TICK = 100


class _Store:
    """One SQLite connection per process and file, shared by that process's threads, and the
    process's owner token: a lock file held while the process lives.

    One lock per process (`guard`) covers every use of SQLite here, and a fork waits for it
    (`_hold_across_fork`): a worker forks its pool processes while a thread of its main process
    may be using the broker (the readiness probe), and a child that inherited that thread's
    lock, or SQLite's own mutexes, held would wait for them forever at its first message."""

    _stores: dict[tuple[int, str], _Store] = {}
    guard = threading.RLock()

    @classmethod
    def open(cls, path: str) -> _Store:
        key = (os.getpid(), path)
        with cls.guard:
            store = cls._stores.get(key)
            if store is None:
                # A connection inherited from the parent through fork is never used (nor
                # closed: closing it could touch the parent's WAL); it stays in the dict.
                store = cls._stores[key] = cls(path)
            return store

    def __init__(self, path: str):
        self.path = path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA busy_timeout = 30000")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        with self.lock:
            self.db.executescript(SCHEMA)
        self.owners_dir = Path(f"{path}.owners")
        self._token: str | None = None
        self._token_file = None
        self.last_sweep = 0.0

    @property
    def lock(self) -> threading.RLock:
        return _Store.guard

    @property
    def token(self) -> str:
        """This process's owner token, registered on first use: what marks the messages it
        holds and the queues it owns."""
        if self._token is None:
            with self.lock:
                if self._token is None:
                    self.owners_dir.mkdir(parents=True, exist_ok=True)
                    token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
                    # Locked under a name no sweep reads, then given its own: a sweep never
                    # finds the file unlocked while this process lives.
                    hidden = self.owners_dir / f".{token}"
                    handle = open(hidden, "a+")  # noqa: SIM115 (held for life)
                    # A POSIX record lock: held by this process only (a forked child does not
                    # inherit it) and released by the kernel when the process dies.
                    fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.rename(hidden, self.owners_dir / token)
                    self.db.execute(
                        "INSERT OR REPLACE INTO owner (token, pid, since) VALUES (?, ?, ?)",
                        (token, os.getpid(), time.time()),
                    )
                    self._token_file, self._token = handle, token
        return self._token

    def alive(self, token: str) -> bool:
        """Whether the process that registered `token` still lives (it holds its lock)."""
        if token == self._token:
            return True
        try:
            handle = open(self.owners_dir / token, "r+")  # noqa: SIM115
        except FileNotFoundError:
            return False
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return True
            raise
        finally:
            handle.close()  # releases the lock taken just now, if it was taken
        return False

    def sweep(self) -> int:
        """Give back what dead processes held: their messages go back to their queues, marked
        redelivered; their own queues go with them. Returns how many messages came back."""
        self.last_sweep = time.monotonic()
        with self.lock:
            tokens = {
                row[0]
                for row in self.db.execute(
                    "SELECT token FROM owner UNION SELECT holder FROM message WHERE holder IS NOT "
                    "NULL UNION SELECT owner FROM queue WHERE owner IS NOT NULL"
                )
            }
        if self.owners_dir.is_dir():  # a process that died before it wrote its row
            tokens |= {name for name in os.listdir(self.owners_dir) if not name.startswith(".")}
        dead = [token for token in tokens if not self.alive(token)]
        restored = 0
        for token in dead:
            with self.lock, self.transaction():
                back = self.db.execute(
                    "UPDATE message SET holder = NULL, redelivered = 1 WHERE holder = ?", (token,)
                ).rowcount
                restored += back
                queues = [
                    row[0]
                    for row in self.db.execute("SELECT name FROM queue WHERE owner = ?", (token,))
                ]
                for name in queues:
                    self.db.execute("DELETE FROM message WHERE queue = ?", (name,))
                    self.db.execute("DELETE FROM binding WHERE queue = ?", (name,))
                self.db.execute("DELETE FROM queue WHERE owner = ?", (token,))
                self.db.execute("DELETE FROM owner WHERE token = ?", (token,))
            with contextlib.suppress(FileNotFoundError):
                (self.owners_dir / token).unlink()
            logger.info(
                "broker: process %s is gone; %d of its messages are queued again and %d of its "
                "queues removed", token, back, len(queues),
            )  # fmt: skip
        return restored

    def transaction(self):
        return _Transaction(self.db)


def _hold_across_fork() -> None:
    _Store.guard.acquire()


def _release_after_fork() -> None:
    _Store.guard.release()


def _fresh_guard_in_child() -> None:
    # The child's only thread is the one that forked; the stores it inherited belong to the
    # parent's pid and are never used here.
    _Store.guard = threading.RLock()


os.register_at_fork(
    before=_hold_across_fork,
    after_in_parent=_release_after_fork,
    after_in_child=_fresh_guard_in_child,
)


class _Transaction:
    def __init__(self, db):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


class QoS(virtual.QoS):
    """Acknowledging deletes the message; rejecting with requeue, or restoring what a closing
    channel still holds, hands it back to its queue where it was."""

    def ack(self, delivery_tag):
        self.channel._settle(delivery_tag, requeue=False)
        super().ack(delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        self.channel._settle(delivery_tag, requeue=requeue)
        self._quick_ack(delivery_tag)

    def restore_unacked(self):
        self._flush()
        for delivery_tag in list(self._delivered):
            self.channel._settle(delivery_tag, requeue=True)
        self._delivered.clear()
        return []


class Channel(virtual.Channel):
    QoS = QoS
    supports_fanout = True

    def __init__(self, connection, **kwargs):
        super().__init__(connection, **kwargs)
        self._noack_queues: set[str] = set()
        store = self.store
        if time.monotonic() - store.last_sweep > SWEEP_SECONDS:
            store.sweep()

    @property
    def store(self) -> _Store:
        # Looked up per call, by pid: a channel a forked child inherited uses the child's own.
        return _Store.open(self.connection.db_path)

    # --- messages ----------------------------------------------------------------------------

    def _put(self, queue, message, **kwargs):
        store = self.store
        properties = message.get("properties") or {}
        with store.lock:
            store.db.execute(
                "INSERT INTO message (queue, priority, tag, payload) VALUES (?, ?, ?, ?)",
                (
                    queue,
                    self._get_message_priority(message),
                    properties.get("delivery_tag") or uuid.uuid4().hex,
                    json.dumps(message),
                ),
            )

    def _get(self, queue, timeout=None):
        store = self.store
        with store.lock:
            for _ in range(10):  # another consumer may take the one we saw first
                row = store.db.execute(
                    "SELECT id, payload, redelivered FROM message WHERE queue = ? AND holder IS "
                    "NULL ORDER BY priority DESC, id LIMIT 1",
                    (queue,),
                ).fetchone()
                if row is None:
                    break
                if queue in self._noack_queues:
                    taken = store.db.execute(
                        "DELETE FROM message WHERE id = ? AND holder IS NULL", (row[0],)
                    )
                else:
                    taken = store.db.execute(
                        "UPDATE message SET holder = ? WHERE id = ? AND holder IS NULL",
                        (store.token, row[0]),
                    )
                if taken.rowcount:
                    payload = json.loads(row[1])
                    if row[2]:
                        payload["redelivered"] = True
                        payload["properties"].setdefault("delivery_info", {})["redelivered"] = True
                    return payload
        raise virtual.Empty()

    def _settle(self, delivery_tag, *, requeue: bool):
        store = self.store
        with store.lock:
            if requeue:
                store.db.execute(
                    "UPDATE message SET holder = NULL, redelivered = 1 "
                    "WHERE tag = ? AND holder = ?",
                    (delivery_tag, store.token),
                )
            else:
                store.db.execute(
                    "DELETE FROM message WHERE tag = ? AND holder = ?", (delivery_tag, store.token)
                )

    def _purge(self, queue):
        with self.store.lock:
            return self.store.db.execute(
                "DELETE FROM message WHERE queue = ? AND holder IS NULL", (queue,)
            ).rowcount

    def _size(self, queue):
        with self.store.lock:
            return self.store.db.execute(
                "SELECT COUNT(*) FROM message WHERE queue = ? AND holder IS NULL", (queue,)
            ).fetchone()[0]

    def basic_consume(self, queue, no_ack, *args, **kwargs):
        if no_ack:
            self._noack_queues.add(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_cancel(self, consumer_tag):
        queue = self._tag_to_queue.get(consumer_tag)
        self._noack_queues.discard(queue)
        return super().basic_cancel(consumer_tag)

    def basic_get(self, queue, no_ack=False, **kwargs):
        if not no_ack:
            return super().basic_get(queue, no_ack=False, **kwargs)
        self._noack_queues.add(queue)
        try:
            return super().basic_get(queue, no_ack=True, **kwargs)
        finally:
            self._noack_queues.discard(queue)

    # --- queues, exchanges and bindings (shared by every process through the file) ---------

    def _new_queue(self, queue, **kwargs):
        owned = kwargs.get("auto_delete") or kwargs.get("exclusive")
        store = self.store
        with store.lock:
            if owned:
                store.db.execute(
                    "INSERT INTO queue (name, owner) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner",
                    (queue, store.token),
                )
            else:
                store.db.execute("INSERT OR IGNORE INTO queue (name) VALUES (?)", (queue,))

    def _has_queue(self, queue, **kwargs):
        with self.store.lock:
            return (
                self.store.db.execute("SELECT 1 FROM queue WHERE name = ?", (queue,)).fetchone()
                is not None
            )

    def _delete(self, queue, *args, **kwargs):
        store = self.store
        with store.lock, store.transaction():
            store.db.execute("DELETE FROM message WHERE queue = ?", (queue,))
            store.db.execute("DELETE FROM binding WHERE queue = ?", (queue,))
            store.db.execute("DELETE FROM queue WHERE name = ?", (queue,))

    def queue_delete(self, queue, if_unused=False, if_empty=False, **kwargs):
        if if_empty and self._size(queue):
            return
        self._delete(queue)
        self.state.queue_bindings_delete(queue)

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        with self.store.lock:
            self.store.db.execute(
                "INSERT OR IGNORE INTO binding (exchange, routing_key, pattern, queue) "
                "VALUES (?, ?, ?, ?)",
                (exchange, routing_key or "", pattern or "", queue),
            )

    def queue_unbind(self, queue, exchange=None, routing_key="", arguments=None, **kwargs):
        self.state.binding_delete(queue, exchange, routing_key)
        with self.store.lock:
            self.store.db.execute(
                "DELETE FROM binding WHERE exchange = ? AND routing_key = ? AND queue = ?",
                (exchange, routing_key or "", queue),
            )

    def get_table(self, exchange):
        with self.store.lock:
            rows = self.store.db.execute(
                "SELECT routing_key, pattern, queue FROM binding WHERE exchange = ?", (exchange,)
            ).fetchall()
        return [Binding(*row) for row in rows]

    def _put_fanout(self, exchange, message, routing_key, **kwargs):
        for binding in self.get_table(exchange):
            self._put(binding.queue, message, **kwargs)

    def drain_events(self, timeout=None, callback=None):
        if time.monotonic() - self.store.last_sweep > SWEEP_SECONDS:
            self.store.sweep()
        return super().drain_events(timeout=timeout, callback=callback)


class Transport(virtual.Transport):
    """`sqlite:///path/to/broker.sqlite3` (or the `path` transport option)."""

    Channel = Channel
    # How long a consumer waits between looks at an empty queue.
    polling_interval = 0.1
    default_port = 0
    driver_type = driver_name = "sqlite"
    connection_errors = (*virtual.Transport.connection_errors, sqlite3.OperationalError)
    channel_errors = (*virtual.Transport.channel_errors, sqlite3.DatabaseError)
    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=frozenset(["direct", "topic", "fanout"])
    )

    @cached_property
    def db_path(self) -> str:
        path = self.client.transport_options.get("path") or (self.client.virtual_host or "")
        if not path or path == "/":
            raise ChannelError("The sqlite broker needs a file: sqlite:///path/to/broker.sqlite3")
        return path

    def driver_version(self):
        return sqlite3.sqlite_version

    def establish_connection(self):
        try:
            _Store.open(self.db_path)
        except sqlite3.Error as exc:
            raise sqlite3.OperationalError(
                f"cannot open the broker file {self.db_path}: {exc}"
            ) from exc
        return super().establish_connection()

    def register_with_event_loop(self, connection, loop):
        """The worker's event loop looks for messages every polling interval (this is what
        lets Celery run its prefork pool with a pipe per process)."""
        loop.call_repeatedly(self.polling_interval, self._deliver_ready)

    def _deliver_ready(self):
        for _ in range(MAX_PER_TICK):
            try:
                self.cycle.get(self._deliver)
            except virtual.Empty:
                return


TRANSPORT_ALIASES.setdefault("sqlite", f"{__name__}:Transport")
