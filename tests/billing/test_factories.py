"""Every billing model has a factory in tests/factories.py that saves a valid row."""

from django.apps import apps

from tests import factories


def test_every_billing_model_has_a_factory(db):
    by_model = {
        f._meta.model: f
        for f in vars(factories).values()
        if isinstance(f, type) and issubclass(f, factories.factory.django.DjangoModelFactory)
    }
    for model in apps.get_app_config("billing").get_models():
        assert model in by_model, f"no factory for {model.__name__}"
        row = by_model[model]()
        row.full_clean()
        assert model.objects.filter(pk=row.pk).exists()
