"""The embedded default (SQLite) kept lone surrogates that reached it before input was checked,
inside its JSON text: its jobs list still answers, and the data migration of each app repairs
every such row (U+FFFD). Run on a SQLite database of its own, as `make run` has, in separate
processes; the rows are written after migrating (the ORM of today writes them as an older
portal did), then each app's repair migration runs its step again."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Rows as an older portal stored them: the ORM writes JSON with escapes, which SQLite keeps.
POISON = """
from tests.factories import (AuditEventFactory, JobFactory, JobTemplateFactory,
                             MembershipFactory)
job = JobFactory(command=["python", "x\\ud800"], args=["\\udfff"], env={"A": "1\\ud800"})
MembershipFactory(user=job.owner, team=job.team)
JobTemplateFactory(team=job.team, spec={"env": {"K\\udc00": "v"}})
AuditEventFactory(team=job.team, after={"name": "\\ud800"})
print(job.pk)
"""
# Each app's repair migration, as `migrate` ran it, run again over the rows written since.
REPAIR = """
import importlib, pkgutil
from django.apps import apps
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
applied = {(m.app, m.name) for m in MigrationRecorder.Migration.objects.all()}
for app in ("core", "fleet", "queues", "billing", "planning"):
    folder = apps.get_app_config(app).path + "/migrations"
    name = next(m.name for m in pkgutil.iter_modules([folder])
                if m.name.endswith("_repair_lone_surrogates"))
    assert (app, name) in applied, (app, name)
    for operation in importlib.import_module(f"{app}.migrations.{name}").Migration.operations:
        with connection.schema_editor() as editor:
            operation.code(apps, editor)
"""
# The team's jobs list and the job's page, as its owner sees them.
READ = """
import json
from django.test import Client
from queues.models import AuditEvent, Job, JobTemplate
job = Job.objects.get()
client = Client()
client.force_login(job.owner)
listed = client.get("/api/v1/jobs/")
page = client.get(f"/jobs/{job.pk}/")
print(json.dumps({
    "list": listed.status_code, "page": page.status_code,
    "command": listed.json()["results"][0]["command"] if listed.status_code == 200 else None,
    "stored": [job.command, job.args, job.env, JobTemplate.objects.get().spec,
               AuditEvent.objects.get().after],
}))
"""


def _manage(env, *args, code=None):
    command = [sys.executable, "manage.py", *args] + (["-c", code] if code else [])
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_stored_surrogates_render_and_the_migration_repairs_them(tmp_path):
    env = {
        **os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'qm.sqlite3'}",
        "QM_VAR_DIR": str(tmp_path), "ALLOWED_HOSTS": "testserver",
    }  # fmt: skip
    _manage(env, "migrate", "--noinput", "-v0")
    _manage(env, "shell", code=POISON)
    before = json.loads(_manage(env, "shell", code=READ).splitlines()[-1])
    assert (before["list"], before["page"]) == (200, 200)
    assert before["command"] == ["python", "x\ufffd"]  # rendered as U+FFFD, not a 500
    assert before["stored"][0] == ["python", "x\ud800"]
    _manage(env, "shell", code=REPAIR)
    after = json.loads(_manage(env, "shell", code=READ).splitlines()[-1])
    assert after["stored"] == [
        ["python", "x\ufffd"], ["\ufffd"], {"A": "1\ufffd"}, {"env": {"K\ufffd": "v"}},
        {"name": "\ufffd"},
    ]  # fmt: skip
