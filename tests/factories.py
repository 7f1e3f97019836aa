"""factory-boy factories shared by all tests."""

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from queues.models import Department, Membership, Team
from queues.roles import GROUP_FINANCE, GROUP_MANAGERS, GROUP_PLATFORM_ADMINS

PASSWORD = "pw-for-tests-1"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def groups(self, create, extracted, **kwargs):
        if create and extracted:
            self.groups.set([Group.objects.get_or_create(name=name)[0] for name in extracted])
        if create:
            self.save()


class DepartmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Department
        django_get_or_create = ("slug",)
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"dept-{n}")
    name = factory.LazyAttribute(lambda d: d.slug.title())

    @factory.post_generation
    def managers(self, create, extracted, **kwargs):
        if create and extracted:
            self.managers.set(extracted)


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())
    namespace = factory.LazyAttribute(lambda t: f"ns-{t.slug}")
    cost_centre = "CC-0000"
    department = factory.SubFactory(DepartmentFactory)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Membership.Role.MEMBER


def manager_of(department, username="manager"):
    user = UserFactory(username=username, groups=[GROUP_MANAGERS])
    department.managers.add(user)
    return user


def finance_user(username="finance"):
    return UserFactory(username=username, groups=[GROUP_FINANCE])


def platform_admin(username="platformadmin"):
    return UserFactory(username=username, groups=[GROUP_PLATFORM_ADMINS], is_staff=True)
