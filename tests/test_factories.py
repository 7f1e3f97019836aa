"""Every model of the portal's apps has a factory-boy factory that makes a row."""

import factory
import pytest
from django.apps import apps

from tests import factories

PORTAL_APPS = ("core", "fleet", "queues", "billing", "planning", "sso", "demo")
MODELS = [m for m in apps.get_models() if m._meta.app_label in PORTAL_APPS]
FACTORIES = {
    f._meta.model: f
    for f in vars(factories).values()
    if isinstance(f, type) and issubclass(f, factory.django.DjangoModelFactory) and f._meta.model
}


@pytest.mark.django_db
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m._meta.label)
def test_every_model_has_a_factory_that_makes_a_row(model):
    assert model in FACTORIES, f"tests/factories.py has no factory for {model._meta.label}"
    made = FACTORIES[model]()
    assert model.objects.filter(pk=made.pk).exists()
