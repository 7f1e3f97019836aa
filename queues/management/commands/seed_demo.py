from django.core.management.base import BaseCommand

from queues.demo import DEMO_PASSWORD, USERS, seed_people


class Command(BaseCommand):
    help = "Load the demo data (idempotent): departments, teams and users of every role."

    def handle(self, *args, **options):
        seeded = seed_people()
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo data ready: {len(seeded['departments'])} departments, "
                f"{len(seeded['teams'])} teams, {len(USERS)} users "
                f"(password '{DEMO_PASSWORD}')."
            )
        )
