"""A task that takes a while, for the worker shutdown test (loaded by its worker with
`--include`): it writes `<path>.started`, sleeps, then writes `<path>.done`."""

import time
from pathlib import Path

from celery import shared_task


@shared_task(name="tests.sleep_then_touch", ignore_result=True)
def sleep_then_touch(path: str, seconds: float) -> None:
    Path(f"{path}.started").touch()
    time.sleep(seconds)
    Path(f"{path}.done").touch()
