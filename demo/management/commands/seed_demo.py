"""`manage.py seed_demo`: the demo world, idempotent (each app's part in demo/)."""

from django.core.management.base import BaseCommand

from demo.billing import seed_billing
from demo.fleet import seed_fleet
from demo.history import seed_history
from demo.protection import seed_protection
from demo.queues import (
    DEMO_PASSWORD,
    USERS,
    seed_people,
    seed_quotas,
    seed_reservations,
    seed_storage,
)
from fleet.models import Cluster
from fleet.services.clusters import cluster_sync_enqueue


class Command(BaseCommand):
    help = (
        "Load the demo data (idempotent): departments, teams, users of every role, the two "
        "kubesim clusters and their pools, tiers, quotas and checkpoint volumes, prices, a job "
        "history since the start of last month (run by Kueue's rules) with its usage, "
        "budgets sized from it, and advance reservations (one open now, one to decide, one "
        "billed last month)."
    )

    def handle(self, *args, **options):
        people = seed_people()
        cluster = seed_fleet()
        seed_quotas()
        seed_storage()
        history = seed_history()
        billing = seed_billing()
        seed_protection()
        seed_reservations()
        # The worker takes these when it starts, so the fleet pages fill without waiting for beat;
        # the task retries while kubesim is still starting.
        for each in Cluster.objects.filter(deleted_at__isnull=True):
            cluster_sync_enqueue(cluster_id=each.pk)
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo data ready: {len(people['departments'])} departments, "
                f"{len(people['teams'])} teams, {len(USERS)} users (password "
                f"'{DEMO_PASSWORD}'), cluster '{cluster.name}' with "
                f"{cluster.pools.count()} pools and {Cluster.objects.count() - 1} more, "
                f"{history['jobs']} jobs of history and {billing['usage_rows']} usage rows added."
            )
        )
