"""Fixtures of the planning tests: what they plan over is queues' world with quotas."""

from tests.queues.conftest import quota_world

__all__ = ["quota_world"]
