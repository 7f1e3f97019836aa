"""Celery tasks of planning: replaying what-if runs.

Their names are the ones they had in queues: messages already queued, and those kept in
UnsentTask, carry them."""

from core.worker import task
from planning.services import whatif


@task(name="queues.run_whatif", acks_late=True)
def run_whatif(run_id: int) -> str:
    """Replay a what-if run (a month of jobs takes well under a minute); idempotent: a run
    already taken by a worker is left to it."""
    return whatif.whatif_execute(run_id=run_id).state


@task(name="queues.resume_whatifs")
def resume_whatifs() -> int:
    """Beat: what-if runs a worker lost go back to the queue; queued ones not taken are sent
    again."""
    return len(whatif.whatif_resume())
