"""The demo world that `make run` seeds (`manage.py seed_demo`): one module per app whose rows it
makes (fleet, queues, billing). It is on top of every app and may import each."""
