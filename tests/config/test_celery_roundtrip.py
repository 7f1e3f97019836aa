import uuid

import pytest

from core.models import WorkerHeartbeat
from core.tasks import heartbeat
from tests.conftest import wait_until


@pytest.mark.slow
def test_task_runs_in_a_real_worker_process_over_redis(celery_worker_process):
    nonce = uuid.uuid4().hex
    heartbeat.delay(nonce=nonce)
    arrived = wait_until(lambda: WorkerHeartbeat.objects.filter(nonce=nonce).exists(), timeout=60)
    if not arrived:
        celery_worker_process.terminate()
        output = celery_worker_process.communicate(timeout=15)[0]
        pytest.fail(f"the worker did not run the task; its output:\n{output[-3000:]}")
