"""What a job becomes in a Kueue cluster: a batch/v1 Job, a Kubeflow PyTorchJob or a JobSet.
Part of job_validate: cleans the kind and the JobSet driver's command, or sets a field error
that says what to fix."""

from __future__ import annotations

from queues.models import Job

KINDS = tuple(Job.Kind.values)
MAX_DRIVER_ARGS = 100


def clean_kind(errors: dict, *, kind, driver_command, cluster_kinds) -> tuple[str, list[str]]:
    """(kind, driver_command); the driver only for JobSets, a kind only where the job's cluster
    runs it (`cluster_kinds`, its backend's job_kinds: every kind but Job only on Kueue)."""
    kind = kind or Job.Kind.JOB
    if kind not in KINDS:
        errors["kind"] = f"Choose one of {', '.join(KINDS)}."
        return Job.Kind.JOB, []
    driver = driver_command if driver_command not in (None, "") else []
    if not isinstance(driver, list) or not all(isinstance(v, str) and "\x00" not in v
                                               for v in driver):  # fmt: skip
        errors["driver_command"] = 'Give a list of strings, e.g. ["python", "driver.py"].'
        driver = []
    elif len(driver) > MAX_DRIVER_ARGS:
        errors["driver_command"] = f"Use at most {MAX_DRIVER_ARGS} words."
    elif driver and kind != Job.Kind.JOBSET:
        errors["driver_command"] = (
            "Only a JobSet has a driver: choose the JobSet kind, or leave the driver empty."
        )
    elif driver and not driver[0].strip():
        errors["driver_command"] = 'Start with the program to run, e.g. ["python", "driver.py"].'
    if kind not in cluster_kinds:
        errors["kind"] = (
            f"A {Job.Kind(kind).label} is queued by Kueue; this job's pool is on a Volcano "
            "cluster, which runs Volcano jobs. Choose the Job kind or a pool on a Kueue cluster."
        )
    return kind, driver
