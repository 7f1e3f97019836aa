"""`manage.py export_manifests DIR`: the desired cluster state as YAML, one object per file."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from fleet.models import Cluster
from queues.backends import backend_for
from queues.manifests.common import manifest_identity, manifest_yaml
from queues.models import Job
from queues.services.reconcile import cluster_desired_state

ACTIVE = ("submitted", "queued", "admitted", "running", "preempted")


def manifest_filename(manifest: dict) -> str:
    """e.g. clusterqueue-qm-vision.yaml, localqueue-ns-vision-vision.yaml."""
    _api_version, kind, namespace, name = manifest_identity(manifest)
    parts = [kind.lower(), namespace, name]
    return "-".join(p for p in parts if p) + ".yaml"


class Command(BaseCommand):
    help = "Write the desired Kueue/Volcano objects as YAML files (for GitOps and review)."

    def add_arguments(self, parser):
        parser.add_argument("directory")
        parser.add_argument("--cluster", help="Only this cluster (default: every cluster).")
        parser.add_argument(
            "--jobs", action="store_true",
            help="Also the objects of the cluster's active jobs (Jobs, PyTorchJobs, JobSets, "
            "Volcano jobs), in a jobs/ folder.",
        )  # fmt: skip

    def handle(self, *args, directory, cluster=None, jobs=False, **options):
        clusters = Cluster.objects.order_by("name")
        if cluster:
            clusters = clusters.filter(name=cluster)
            if not clusters.exists():
                raise CommandError(f"No cluster named {cluster!r}.")
        clusters = list(clusters)
        if not clusters:
            raise CommandError("No cluster is registered yet.")
        root = Path(directory)
        written = 0
        for item in clusters:
            # One cluster: flat; several: one folder each, so names never collide.
            target = root if len(clusters) == 1 else root / item.name
            target.mkdir(parents=True, exist_ok=True)
            for _owner_type, _owner_id, manifest in cluster_desired_state(cluster=item):
                (target / manifest_filename(manifest)).write_text(manifest_yaml(manifest))
                written += 1
            if jobs:
                written += self._jobs(item, target / "jobs")
        self.stdout.write(self.style.SUCCESS(f"Wrote {written} manifests to {root}."))

    def _jobs(self, cluster, target: Path) -> int:
        active = (
            Job.objects.filter(cluster=cluster, state__in=ACTIVE)
            .exclude(k8s_name="")
            .select_related("team", "tier", "pool")
            .order_by("pk")
        )
        written = 0
        for job in active:
            target.mkdir(parents=True, exist_ok=True)
            for manifest in backend_for(cluster).job_objects(job):
                (target / manifest_filename(manifest)).write_text(manifest_yaml(manifest))
                written += 1
        return written
