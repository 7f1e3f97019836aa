"""PostgreSQL connections bind parameters on the server and prepare frequent queries, unless
DATABASE_URL turns it off (for a pooler that cannot keep prepared statements)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _options(url: str) -> dict:
    env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": "x"}
    code = "import json; from config import settings; print(json.dumps(settings.DATABASES))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["default"].get("OPTIONS", {})


@pytest.mark.parametrize(
    "url, expected",
    [
        ("postgres://u:p@db:5432/qm", {"server_side_binding": True, "prepare_threshold": 5}),
        ("postgres://u:p@db:5432/qm?server_side_binding=false", {"server_side_binding": "false"}),
        ("sqlite:////tmp/qm.sqlite3", None),
    ],
)
def test_postgres_prepares_queries_unless_the_url_says_not(url, expected):
    options = _options(url)
    if expected is None:
        assert "server_side_binding" not in options and "prepare_threshold" not in options
    else:
        assert expected.items() <= options.items()
        assert ("prepare_threshold" in options) is (expected["server_side_binding"] is True)
