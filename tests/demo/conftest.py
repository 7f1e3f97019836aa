"""The demo as `make run` starts it: seeded (demo/), its two clusters real kubesims (the demo
fleet, Kueue with fair sharing on as scripts/serve runs it, and the lab fleet), their inventory
synced and the portal's objects applied, as the worker does in its first seconds."""

from __future__ import annotations

import contextlib
import shutil
import time

import pytest
from django.db import transaction
from django.test import override_settings

from tests.fixtures_cluster import CRDS_DIR, REPO_ROOT

DEMO_FLEET = REPO_ROOT / "kubesim" / "fleets" / "demo.yaml"
LAB_FLEET = REPO_ROOT / "kubesim" / "fleets" / "demo-lab.yaml"


@contextlib.contextmanager
def demo_running(var_dir):
    """Seed the demo against two running kubesims (DB access allowed); yields a dict with the
    `sim` and `lab_sim` kubesims, the `cluster` and `lab` clusters and what the seed said."""
    from demo.billing import seed_billing
    from demo.fleet import seed_fleet
    from demo.history import seed_history
    from demo.protection import seed_protection
    from demo.queues import seed_people, seed_quotas, seed_reservations, seed_storage
    from fleet import kube
    from fleet.models import Cluster
    from fleet.services.inventory import cluster_sync_inventory
    from kubesim.testing import running_kubesim
    from queues.models import ManagedObject
    from queues.services.reconcile import cluster_check_drift, cluster_reconcile

    with (
        running_kubesim(fleet=DEMO_FLEET, crds_dir=CRDS_DIR) as sim,
        running_kubesim(fleet=LAB_FLEET, crds_dir=CRDS_DIR) as lab_sim,
    ):
        sim.controllers.kueue.fair_sharing = True  # as scripts/serve kubesim runs it
        (var_dir / "kubesim-lab").mkdir(parents=True, exist_ok=True)
        shutil.copy(lab_sim.kubeconfig, var_dir / "kubesim-lab" / "kubeconfig")
        with override_settings(KUBECONFIG=sim.kubeconfig, KUBE_CONTEXT="", VAR_DIR=var_dir,
                               KUBESIM_LAB_PORT=lab_sim.port):  # fmt: skip
            try:
                people = seed_people()
                cluster = seed_fleet()
                seed_quotas()
                seed_storage()
                history = seed_history()
                billing = seed_billing()
                protection = seed_protection()
                seed_reservations()
                lab = Cluster.objects.get(name="lab")
                for each in (cluster, lab):
                    cluster_sync_inventory(cluster=each)
                    cluster_reconcile(cluster_id=each.pk)
                # What Kueue reports back (the shares of fair sharing among it) is read.
                deadline = time.monotonic() + 20
                rows = ManagedObject.objects.filter(cluster=cluster, kind="ClusterQueue")
                while not rows.filter(live_status__has_key="fairSharing").exists():
                    assert time.monotonic() < deadline, "no ClusterQueue reported its share"
                    time.sleep(0.3)
                    cluster_check_drift(cluster_id=cluster.pk)
                yield {"sim": sim, "lab_sim": lab_sim, "cluster": cluster, "lab": lab,
                       "people": people, "history": history, "billing": billing,
                       "protection": protection}  # fmt: skip
            finally:
                kube.clear_client_cache()


@pytest.fixture(scope="module")
def seeded_demo(django_db_setup, django_db_blocker, tmp_path_factory):
    """The demo seeded once for the module's tests, rolled back after them (each test's own
    writes are rolled back after it, inside)."""
    with django_db_blocker.unblock(), transaction.atomic():
        with demo_running(tmp_path_factory.mktemp("var")) as demo:
            yield demo
        transaction.set_rollback(True)
