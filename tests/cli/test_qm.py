"""`qm` against the running test server (live_server, a real HTTP round trip) and kubesim."""

import io
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from qm.cli import main
from queues.models import Job, QuotaRequest, Sweep
from tests.factories import PASSWORD
from tests.fixtures_cluster import make_sim_cluster
from tests.queues.builders import sim_jobs_setup, sync_until

pytestmark = pytest.mark.django_db(transaction=True)

JOB_YAML = """\
name: resnet
image: ghcr.io/acme/train:1.0
command: [python, train.py]
workers: 1
gpus_per_worker: 1
pool: a100
max_runtime_seconds: 3600
expected_runtime_seconds: 60
"""


@pytest.fixture
def qm(tmp_path, monkeypatch, live_server, capsys):
    """qm(*argv, stdin="") -> (exit code, stdout, stderr), with its own config directory."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))

    def run(*argv, stdin=""):
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main([str(a) for a in argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    run.url = live_server.url
    run.config = tmp_path / "config" / "quartermaster" / "config.json"
    return run


@pytest.fixture
def cluster_world(world):
    with make_sim_cluster() as sim:
        sim.sync()
        yield sim_jobs_setup(world, sim)


def _login(qm, user="alice"):
    code, out, _ = qm("login", "--url", qm.url, "--username", user, "--password-stdin",
                      stdin=PASSWORD + "\n")  # fmt: skip
    assert code == 0 and f"as {user}" in out


def test_login_keeps_a_token_only_the_owner_can_read(qm, world):
    code, _, err = qm("ls")
    assert code == 3 and "Not signed in" in err
    code, _, err = qm("login", "--url", qm.url, "--username", "alice", "--password-stdin",
                      stdin="wrong\n")  # fmt: skip
    assert code == 1 and "Wrong username or password" in err
    _login(qm)
    mode = stat.S_IMODE(os.stat(qm.config).st_mode)
    assert mode == 0o600 and json.loads(qm.config.read_text())["token"].startswith("qm_")


def test_submit_list_status_and_cancel_a_job(qm, cluster_world, tmp_path):
    _login(qm)
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB_YAML)
    code, out, _ = qm("submit", spec)
    assert code == 0 and "resnet" in out and "state submitted" in out
    job = Job.objects.get(name="resnet")
    code, out, _ = qm("ls")
    assert code == 0 and out.splitlines()[0].split() == ["ID", "NAME", "TEAM", "STATE", "GPUS",
                                                        "SUBMITTED"]  # fmt: skip
    assert re.search(rf"^{job.pk}\s+resnet\s+vision\s+submitted", out, re.M)
    code, out, _ = qm("--json", "status", job.pk)
    assert code == 0 and json.loads(out)["id"] == job.pk
    code, out, _ = qm("cancel", job.pk)
    assert code == 0 and out.strip() == f"job {job.pk} cancelled"
    code, _, err = qm("cancel", job.pk)
    assert code == 1 and "already" in err


def test_bad_input_says_what_to_fix_with_its_exit_code(qm, cluster_world, tmp_path):
    _login(qm)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    assert qm("submit", bad)[0] == 2
    assert qm("submit", tmp_path / "missing.yaml")[0] == 2
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(JOB_YAML.replace("ghcr.io/acme/train:1.0", "not an image"))
    code, _, err = qm("submit", wrong)
    assert code == 1 and "image: Not a valid image reference" in err
    assert not Job.objects.exists()
    with pytest.raises(SystemExit) as usage:
        main(["logs"])
    assert usage.value.code == 2


def test_the_log_of_a_running_job(qm, cluster_world):
    from queues.services.jobs.apply import job_apply
    from queues.services.jobs.submit import job_submit

    job = job_submit(
        user=cluster_world["alice"], team=cluster_world["vision"], name="talker",
        image="ghcr.io/acme/train:1", command=["python", "t.py"], gpus_per_worker=1,
        pool="a100", max_runtime_seconds=600, expected_runtime_seconds=120,
    )  # fmt: skip
    job_apply(job_id=job.pk)
    sync_until(job, Job.State.RUNNING)
    _login(qm)
    code, out, _ = qm("logs", job.pk, "--tail", 50)
    assert code == 0 and out.startswith("[rank 0] starting on a100-node-")


def test_sweep_quota_request_and_usage(qm, cluster_world, tmp_path):
    _login(qm, "bob")
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB_YAML)
    code, out, _ = qm("sweep", spec, "--set", "LR=0.1,0.01", "--set=--seed=1,2")
    assert code == 0 and ": 4 jobs" in out and "resnet [LR=0.1 --seed=1]" in out
    assert Sweep.objects.get().jobs.count() == 4
    code, out, _ = qm("quota", "request", "--team", "vision", "--pool", "a100", "--gpus", 10,
                      "--why", "more detectors")  # fmt: skip
    assert code == 0 and "10 GPUs in a100 for vision, pending" in out
    assert QuotaRequest.objects.get().justification == "more detectors"
    code, out, _ = qm("usage", "--team", "vision")
    assert code == 0 and "GPU-HOURS HELD" in out and out.splitlines()[-1].startswith("total")
    code, _, err = qm("usage", "--team", "recsys")
    assert code == 1 and "that you can see" in err


def test_an_unreachable_portal_is_exit_code_4(qm, tmp_path):
    qm.config.parent.mkdir(parents=True, exist_ok=True)
    qm.config.write_text(json.dumps({"url": "http://127.0.0.1:9", "token": "qm_x"}))
    code, _, err = qm("ls")
    assert code == 4 and "No answer from" in err


def test_the_qm_command_is_installed_with_the_project():
    qm_bin = Path(sys.executable).with_name("qm")
    assert qm_bin.exists(), "make install installs the project (pip install -e .)"
    done = subprocess.run([str(qm_bin), "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "submit" in done.stdout


@pytest.fixture
def quota_world(world):
    from tests.queues.builders import quota_world_setup

    return quota_world_setup(world)


def test_a_quota_request_changes_only_the_limits_it_names(qm, quota_world):
    _login(qm, "bob")
    args = ("quota", "request", "--team", "vision", "--pool", "a100", "--gpus", 12, "--why", "x")
    assert qm(*args)[0] == 0
    kept = QuotaRequest.objects.get()
    assert not kept.sets_borrowing_limit and not kept.sets_lending_limit
    assert qm(*args, "--borrowing", "none", "--lending", 3)[0] == 0
    named = QuotaRequest.objects.exclude(pk=kept.pk).get()
    assert (named.sets_borrowing_limit, named.borrowing_limit) == (True, None)
    assert (named.sets_lending_limit, named.lending_limit) == (True, 3)
    code, _, err = qm(*args, "--lending", "lots")
    assert code == 2 and "give a number of GPUs, or none" in err


def test_submit_takes_the_forms_fields_as_the_form_writes_them(qm, quota_world, tmp_path):
    """The README says the file takes the job form's fields: a command as one string (split
    as the form splits it), environment variables as NAME=value lines."""
    _login(qm)
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB_YAML.replace("command: [python, train.py]", (
        "command: python train.py --note 'two words'\n"
        "args: --epochs 3\n"
        "env: |\n  SEED=7\n  # a comment\n  MODE=a=b\n"
    )))  # fmt: skip
    code, out, err = qm("submit", spec)
    assert code == 0, err
    job = Job.objects.get(name="resnet")
    assert job.command == ["python", "train.py", "--note", "two words"]
    assert job.args == ["--epochs", "3"] and job.env == {"SEED": "7", "MODE": "a=b"}
    spec.write_text(JOB_YAML.replace("command: [python, train.py]", "command: python 'oops"))
    code, _, err = qm("submit", spec)
    assert code == 2 and "command: unbalanced quotes" in err


def test_a_lead_reserves_a_manager_decides_and_the_lead_cancels(qm, quota_world):
    """`qm reserve` takes a local time and a length; `qm reservations` lists, shows (with the
    price), approves, rejects and cancels, each as the API lets that user."""
    from datetime import datetime, timedelta
    from decimal import Decimal

    from fleet.models import GpuPrice
    from queues.models import Reservation

    GpuPrice.objects.create(gpu_model=quota_world["a100"].gpu_model,
                            price_per_hour=Decimal("2.5000"), currency="EUR",
                            effective_from=datetime(2026, 1, 1).astimezone())  # fmt: skip
    start = (datetime.now() + timedelta(days=3)).replace(second=0, microsecond=0)
    ask = ("reserve", "--team", "vision", "--pool", "a100", "--gpus", 2,
           "--start", start.strftime("%Y-%m-%d %H:%M"))  # fmt: skip

    _login(qm, "alice")
    code, _, err = qm(*ask, "--hours", 5, "--why", "deadline")
    assert code == 1 and "lead" in err and not Reservation.objects.exists()

    _login(qm, "bob")
    for bad, says in (
        (("--start", "next tuesday", "--hours", 5), "give a date and time"),
        (("--hours", 0), "above 0"),
        (("--hours", 5, "--end", "2030-01-01T00:00"), "one of them"),
        ((), "--end TIME or --hours N"),
    ):
        code, _, err = qm(*ask, *bad)
        assert code == 2 and says in err, (bad, err)
    code, out, err = qm(*ask, "--hours", 5, "--why", "Conference deadline")
    assert code == 0, err
    made = Reservation.objects.get()
    assert made.starts_at == start.astimezone() and made.ends_at - made.starts_at == timedelta(
        hours=5
    )
    first = out.splitlines()[0]
    assert first.startswith(f"reservation {made.pk}: 2 GPUs in a100 for vision") and first.endswith(
        "UTC, pending"
    )
    code, out, _ = qm("reservations")
    assert code == 0 and out.splitlines()[1].split()[:4] == [str(made.pk), "vision", "a100", "2"]
    code, out, _ = qm("--json", "reservations", "--state", "approved")
    assert code == 0 and json.loads(out)["results"] == []
    code, out, _ = qm("reservations", "show", made.pk)
    # 2 GPUs × 5 h × 2.50 EUR.
    assert code == 0 and "price: 25.00 EUR for 10 GPU-hours held (allocated)" in out
    code, _, err = qm("reservations", "approve", made.pk)
    assert code == 1 and "manager" in err.lower()

    _login(qm, "maria")
    code, _, err = qm("reservations", "reject", made.pk)
    assert code == 2 and "--why" in err
    code, out, _ = qm("reservations", "approve", made.pk, "--why", "fits")
    assert code == 0 and "approved" in out and "decided by maria" in out and ": fits" in out

    _login(qm, "bob")
    code, out, _ = qm("reservations", "cancel", made.pk)
    assert code == 0 and out.splitlines()[0].endswith("cancelled")
    made.refresh_from_db()
    assert made.state == "cancelled"
    code, _, err = qm("reservations", "show", 999999)
    assert code == 1 and err
