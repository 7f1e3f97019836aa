"""kubesim/limits.py: quantities in the API server's canonical form, and the LimitRanger's
defaults and bounds (the scenarios in tests/scenarios/test_guard_rails.py hold both clusters to
the same rules through the API)."""

import pytest

from kubesim.limits import canonical, default_limit_range


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("2000m", "2"),
        ("500m", "500m"),
        ("0.5", "500m"),
        ("1000", "1k"),
        ("10", "10"),
        ("1024Mi", "1Gi"),
        ("1024Gi", "1Ti"),
        ("1.5Gi", "1536Mi"),
        ("1500Mi", "1500Mi"),
        ("512Ki", "512Ki"),
        ("0", "0"),
        ("1e3", "1e3"),
    ],
)
def test_a_quantity_is_stored_in_its_canonical_form(written, stored):
    assert canonical(written) == stored


def test_a_container_item_defaults_its_default_from_max_and_its_request_from_default():
    lr = {"spec": {"limits": [{"type": "Container", "max": {"cpu": "2000m"},
                               "default": {"memory": "2Gi"}}]}}  # fmt: skip
    default_limit_range(lr)
    (item,) = lr["spec"]["limits"]
    assert item["default"] == {"memory": "2Gi", "cpu": "2"}
    assert item["defaultRequest"] == {"memory": "2Gi", "cpu": "2"}
