"""Demo governance data: priority tiers, quota for every demo team, an approval policy.

Idempotent: existing tiers are brought back to the demo values, but quotas that already exist
are left alone (a manager may have changed them through a request since).
"""

from django.db import transaction

from fleet.models import Cluster, NodePool
from queues.models import ApprovalPolicy, PriorityTier, Quota, Team
from queues.services.reconcile import managed_objects_sync, reconcile_all_enqueue

# name: (value, preemptible, default, description)
TIERS = {
    "production": (1000, False, False, "Production training and serving; never preempted"),
    "experiment-high": (500, True, False, "Urgent experiments (deadlines)"),
    "experiment": (100, True, True, "Everyday experiments"),
    "development": (10, True, False, "Notebooks and debugging; first to be preempted"),
}

# team slug: {pool: (nominal, borrowing limit, lending limit)}. Sized to the demo fleet
# (a100 32, h100 16, l4 16 GPUs) so that every team can run a job at once.
QUOTAS = {
    "vision": {"a100": (8, 8, None), "l4": (4, 4, None)},
    "nlp": {"a100": (8, 8, None), "h100": (4, 4, None)},
    "speech": {"a100": (4, 4, None), "l4": (4, 4, None)},
    "recsys": {"l4": (4, 4, None), "h100": (4, 4, 2)},
    "robotics": {"a100": (8, 4, None), "l4": (4, 2, None)},
}


def _default_cluster() -> Cluster | None:
    return Cluster.objects.filter(is_default=True).first() or Cluster.objects.first()


@transaction.atomic
def seed_governance() -> dict:
    """Tiers, quotas for every demo team in the default cluster's pools, an approval policy."""
    PriorityTier.objects.filter(is_default=True).exclude(name="experiment").update(is_default=False)
    tiers = {}
    for name, (value, preemptible, default, description) in TIERS.items():
        tiers[name], _ = PriorityTier.objects.update_or_create(
            name=name,
            defaults={
                "value": value,
                "preemptible": preemptible,
                "is_default": default,
                "description": description,
            },
        )
    cluster = _default_cluster()
    quotas = 0
    if cluster is not None:
        pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster)}
        teams = {t.slug: t for t in Team.objects.filter(slug__in=QUOTAS)}
        for slug, per_pool in QUOTAS.items():
            for pool_name, (nominal, borrowing, lending) in per_pool.items():
                if slug not in teams or pool_name not in pools:
                    continue
                _, created = Quota.objects.get_or_create(
                    team=teams[slug],
                    pool=pools[pool_name],
                    defaults={
                        "nominal_gpus": nominal,
                        "borrowing_limit": borrowing,
                        "lending_limit": lending,
                    },
                )
                quotas += created
    if not ApprovalPolicy.objects.exists():
        policy = ApprovalPolicy.objects.create(
            max_gpus_without_approval=16, max_runtime_seconds_without_approval=7 * 24 * 3600
        )
        policy.tiers_needing_approval.set([tiers["production"]])
    for item in Cluster.objects.all():
        managed_objects_sync(cluster=item)
    reconcile_all_enqueue()
    return {"tiers": len(tiers), "quotas_created": quotas, "cluster": cluster}
