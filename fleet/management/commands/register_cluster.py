"""Register the cluster KUBECONFIG names (start-up, after migrate; idempotent)."""

from django.core.management.base import BaseCommand

from fleet.services.clusters import cluster_register_from_settings


class Command(BaseCommand):
    help = "Register the cluster that KUBECONFIG and KUBE_CONTEXT name, unless it is already."

    def handle(self, *args, **options):
        _, said = cluster_register_from_settings()
        self.stdout.write(said)
