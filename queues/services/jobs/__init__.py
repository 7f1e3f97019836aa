"""Writes for jobs, one module per stage: submit (with templates and sweeps), apply, sync (with
the watcher, the events kept and the logs read) and lifecycle (state changes, cancelling,
suspending and resuming). What a submission must satisfy is in queues.validators."""
