"""The embedded default's broker (config/broker.py, `sqlite://`), through kombu as Celery uses
it: messages whole under concurrent writers and readers in several processes, messages held by
a killed process handed out again, a killed process's own queues removed, fanout across
processes, and requeued messages marked redelivered."""

import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from kombu import Connection, Exchange, Queue

import config.broker  # noqa: F401 (registers sqlite://)
from tests.conftest import REPO_ROOT

BIG = 200_000  # characters per message: far more than one write() of a pipe or a page


def _url(tmp_path):
    return f"sqlite:///{tmp_path / 'broker.sqlite3'}"


def _produce(url, producer, count):
    with Connection(url) as conn:
        queue = conn.SimpleQueue("work")
        for i in range(count):
            queue.put({"producer": producer, "i": i, "pad": "x" * BIG})
        queue.close()


def _consume(url, count, out):
    got = []
    with Connection(url) as conn:
        queue = conn.SimpleQueue("work")
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            try:
                message = queue.get(timeout=1)
            except queue.Empty:
                continue
            body = message.payload
            assert len(body["pad"]) == BIG
            got.append((body["producer"], body["i"]))
            message.ack()
        queue.close()
    out.put(got)


def test_many_processes_write_and_read_big_messages_whole_and_once(tmp_path):
    url, producers, each = _url(tmp_path), 3, 40
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    consumers = [ctx.Process(target=_consume, args=(url, producers * each // 2, out))
                 for _ in range(2)]  # fmt: skip
    senders = [ctx.Process(target=_produce, args=(url, p, each)) for p in range(producers)]
    for proc in consumers + senders:
        proc.start()
    received = out.get(timeout=90) + out.get(timeout=90)
    for proc in consumers + senders:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    assert sorted(received) == [(p, i) for p in range(producers) for i in range(each)]


def _hold_then_wait(url, ready):
    with Connection(url) as conn:
        queue = conn.SimpleQueue("work")
        held = [queue.get(timeout=10) for _ in range(3)]  # never acknowledged
        ready.set()
        assert len(held) == 3
        time.sleep(60)


def test_messages_held_by_a_killed_process_are_handed_out_again_marked_redelivered(tmp_path):
    url = _url(tmp_path)
    with Connection(url) as conn:
        queue = conn.SimpleQueue("work")
        for i in range(5):
            queue.put({"i": i})
        ctx = multiprocessing.get_context("fork")
        ready = ctx.Event()
        holder = ctx.Process(target=_hold_then_wait, args=(url, ready))
        holder.start()
        assert ready.wait(20)
        # While the holder lives, only the two messages it did not take are there.
        assert [queue.get(timeout=2).payload["i"] for _ in range(2)] == [3, 4]
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.5)
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(timeout=10)
    # A consumer started after the holder died (as a restarted worker) finds its messages
    # first in line, marked redelivered.
    out = ctx.Queue()
    again = ctx.Process(target=_take, args=(url, 5, out))
    again.start()
    taken = out.get(timeout=30)
    again.join(timeout=10)
    # (3 and 4 were handed to this process, which gave them back when it closed.)
    assert taken == [(i, True) for i in range(5)]


def _take(url, count, out):
    with Connection(url) as conn:
        queue = conn.SimpleQueue("work")
        taken = []
        for _ in range(count):
            message = queue.get(timeout=5)
            taken.append((message.payload["i"], bool(message.delivery_info.get("redelivered"))))
            message.ack()
        out.put(taken)


def _declare_owned_queue_and_wait(url, ready):
    with Connection(url) as conn:
        channel = conn.channel()
        fan = Exchange("broadcast", type="fanout")
        Queue("mine", exchange=fan, auto_delete=True, channel=channel).declare()
        ready.set()
        time.sleep(60)


def test_a_dead_process_takes_its_own_queues_with_it_and_fanout_reaches_live_ones(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(config.broker, "SWEEP_SECONDS", 0)  # look at once, not every 5 s
    url = _url(tmp_path)
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    owner = ctx.Process(target=_declare_owned_queue_and_wait, args=(url, ready))
    owner.start()
    assert ready.wait(20)
    fan = Exchange("broadcast", type="fanout")
    with Connection(url) as conn:
        channel = conn.channel()
        durable = Queue("kept", exchange=fan, channel=channel)
        durable.declare()
        producer = conn.Producer(channel, exchange=fan)
        producer.publish({"n": 1})
        # Broadcast reaches the other process's queue as well as ours.
        assert Queue("mine", channel=channel).get(no_ack=True).payload == {"n": 1}
        producer.publish({"n": 2})
        os.kill(owner.pid, signal.SIGKILL)
        owner.join(timeout=10)
    with Connection(url) as conn:  # a new consumer sweeps the dead process's things away
        channel = conn.channel()
        producer = conn.Producer(channel, exchange=fan)
        producer.publish({"n": 3})
        assert not channel._has_queue("mine")
        assert channel.store.db.execute(
            "SELECT COUNT(*) FROM message WHERE queue = 'mine'"
        ).fetchone() == (0,)
        kept = Queue("kept", channel=channel)
        assert [kept.get(no_ack=True).payload["n"] for _ in range(3)] == [1, 2, 3]


def test_a_rejected_message_goes_back_first_in_line_marked_redelivered(tmp_path):
    with Connection(_url(tmp_path)) as conn:
        queue = conn.SimpleQueue("work")
        queue.put({"i": 1})
        queue.put({"i": 2})
        first = queue.get(timeout=2)
        assert not first.delivery_info.get("redelivered")
        first.requeue()
        again = queue.get(timeout=2)
        assert again.payload == {"i": 1} and again.delivery_info["redelivered"]
        again.ack()
        assert queue.get(timeout=2).payload == {"i": 2}


def test_the_worker_is_driven_by_its_event_loop(tmp_path):
    """What makes Celery run the prefork pool with a pipe per process (AsynPool), which survives
    killed pool processes, instead of the shared locked pipe that hangs when a process dies
    holding its lock (the soak test kills pool processes for real). Asked of a worker built in
    a process of its own: building one changes Celery's global state."""
    probe = (
        "import sys, config.broker; from celery import Celery; "
        "app = Celery('probe', broker=sys.argv[1]); "
        "worker = app.WorkController(concurrency=1, pool_cls='prefork'); "
        "print(worker.use_eventloop, worker.pool.__class__.__module__)"
    )
    answer = subprocess.run(
        [sys.executable, "-c", probe, _url(tmp_path)], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                    if k != "CELERY_BROKER_URL"},
    )  # fmt: skip
    assert answer.stdout.split() == ["True", "celery.concurrency.prefork"], answer.stderr


def test_a_process_forked_while_another_thread_opens_the_broker_can_send(tmp_path):
    """A worker forks its pool while its readiness thread may be opening the broker: the fork
    waits for that thread, so the child does not inherit its locks held and hang at its first
    message (the least-privilege journey's worker once ran nothing more for good)."""
    busy = tmp_path / "busy.sqlite3"
    blocker = sqlite3.connect(busy, isolation_level=None, check_same_thread=False)
    blocker.execute("CREATE TABLE t (x)")
    blocker.execute("BEGIN EXCLUSIVE")  # opening `busy` waits in SQLite until this commits
    opener = threading.Thread(target=Connection(f"sqlite:///{busy}").connect)
    opener.start()
    released = threading.Timer(1.0, blocker.execute, args=("COMMIT",))
    released.start()
    time.sleep(0.3)
    assert opener.is_alive(), "the thread is not inside the broker when the fork happens"
    pid = os.fork()
    if pid == 0:  # the child: send one message, or be killed after 15 s stuck
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(15)
        code = 1
        try:
            with Connection(_url(tmp_path)) as conn:
                conn.SimpleQueue("work").put({"from": "child"})
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    opener.join(10)
    released.join()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child ended with {status}"
    with Connection(_url(tmp_path)) as conn:
        queue = conn.SimpleQueue("work")
        assert queue.get(timeout=5).payload == {"from": "child"}
        queue.close()
