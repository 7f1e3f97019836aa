import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from billing.models import Budget, UsageHour
from fleet.models import Cluster, GpuPrice, NodePool
from queues.models import Department, Job, JobPod, Membership, Quota, Team, TeamVolume


def _counts():
    return (
        get_user_model().objects.count(),
        Department.objects.count(),
        Team.objects.count(),
        Membership.objects.count(),
        Cluster.objects.count(),
        NodePool.objects.count(),
        Quota.objects.count(),
        TeamVolume.objects.count(),
        Job.objects.count(),
        JobPod.objects.count(),
        UsageHour.objects.count(),
        GpuPrice.objects.count(),
        Budget.objects.count(),
    )


@pytest.mark.django_db
def test_seed_demo_is_idempotent_and_has_every_role():
    call_command("seed_demo", verbosity=0)
    first = _counts()
    call_command("seed_demo", verbosity=0)
    assert _counts() == first  # the history, its usage and the budgets too are made once
    assert Job.objects.count() > 1000 and UsageHour.objects.count() > 50_000
    assert Cluster.objects.count() == 2 and TeamVolume.objects.count() == 2

    assert Department.objects.count() == 2 and Team.objects.count() == 5
    alice = get_user_model().objects.get(username="alice")
    assert alice.check_password("quartermaster")
    assert Membership.objects.get(user=alice, team__slug="vision").role == "member"
    assert Membership.objects.get(user__username="bob", team__slug="vision").role == "lead"
    vision = Team.objects.get(slug="vision")
    assert vision.department.managers.filter(username="maria").exists()
    assert get_user_model().objects.get(username="frank").groups.filter(name="finance").exists()
    assert get_user_model().objects.get(username="admin").is_superuser
    # Every demo team can run a job without set-up: it has quota in at least one pool.
    for team in Team.objects.all():
        assert team.quotas.filter(nominal_gpus__gt=0).exists(), team.slug
