"""`manage.py seed_demo`: the demo world, idempotent (each app's part in demo/)."""

from django.core.management.base import BaseCommand

from demo.billing import seed_billing
from demo.fleet import seed_fleet
from demo.queues import DEMO_PASSWORD, USERS, seed_people, seed_quotas
from fleet.services.clusters import cluster_sync_enqueue


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
