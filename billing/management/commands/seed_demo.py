"""`manage.py seed_demo`: the demo world, idempotent.

It lives in billing because it composes every app's demo data, and billing is the top of the
dependency chain fleet ← queues ← billing.
"""

from django.core.management.base import BaseCommand

from billing.demo import seed_billing
from fleet.demo import seed_fleet
from fleet.services.clusters import cluster_sync_enqueue
from queues.demo import DEMO_PASSWORD, USERS, seed_people, seed_quotas


class Command(BaseCommand):
    help = (
        "Load the demo data (idempotent): departments, teams, users of every role, the kubesim "
        "cluster and its pools, tiers and quotas, prices, budgets and some usage history."
    )

    def handle(self, *args, **options):
        people = seed_people()
        cluster = seed_fleet()
        seed_quotas()
        seed_billing()
        # The worker takes these when it starts, so the fleet pages fill without waiting for beat;
        # the task retries while kubesim is still starting.
        cluster_sync_enqueue(cluster_id=cluster.pk)
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo data ready: {len(people['departments'])} departments, "
                f"{len(people['teams'])} teams, {len(USERS)} users (password "
                f"'{DEMO_PASSWORD}'), cluster '{cluster.name}' with "
                f"{cluster.pools.count()} pools."
            )
        )
