"""A task that holds its message unacknowledged for a while (loaded only by the broker-restart
test's worker with `-I`): the state in which a broker outage used to kill the worker."""

import time

from config.celery import app


@app.task(name="tests.hold_message", acks_late=True, ignore_result=True)
def hold_message(seconds: float) -> None:
    time.sleep(seconds)
