"""Sweeps: one submission over a grid makes one job per combination (all or none), listed and
cancelled together, visible to the team only."""

import pytest
from django.urls import reverse

from queues.models import Job, Sweep
from tests.queues.test_job_api import BODY

URL = "/api/v1/sweeps/"
GRID = {"env": {"LR": ["0.1", "0.01"]}, "args": {"--batch": ["32", 64]}}


def test_a_grid_makes_one_job_per_combination(jw, api_as):
    answer = api_as(jw["alice"]).post(URL, {**BODY, "grid": GRID}, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert len(body["jobs"]) == 4 and body["name"] == "resnet"
    jobs = list(Job.objects.filter(sweep_id=body["id"]).order_by("pk"))
    assert [j.name for j in jobs] == [
        "resnet [LR=0.1 --batch=32]", "resnet [LR=0.1 --batch=64]",
        "resnet [LR=0.01 --batch=32]", "resnet [LR=0.01 --batch=64]",
    ]  # fmt: skip
    assert jobs[1].env == {"LR": "0.1"} and jobs[1].args == ["--batch", "64"]
    assert {j.state for j in jobs} == {"submitted"}


@pytest.mark.parametrize(
    "grid, text",
    [
        ({"env": {"LR": [str(i) for i in range(11)]}, "args": {"--b": [str(i) for i in range(10)]}},
         "makes 110 jobs"),
        ({"env": {"1BAD": ["x"]}}, "not a valid variable"),
        ({"args": {"batch": ["1"]}}, "not a valid flag"),
        ({"env": {"LR": []}}, "give 1 to 50 values"),
        ({}, "at least one parameter"),
        (["LR"], "Give {"),
    ],
)  # fmt: skip
def test_a_bad_grid_is_a_400_and_makes_nothing(jw, api_as, grid, text):
    answer = api_as(jw["alice"]).post(URL, {**BODY, "grid": grid}, format="json")
    assert answer.status_code == 400 and text in str(answer.json()["grid"])
    assert not Job.objects.exists() and not Sweep.objects.exists()


@pytest.mark.parametrize(
    "field, value, text",
    [("args", -1, "list of strings"), ("args", "--lr 0.1", "list of strings"),
     ("args", [1.5], "list of strings"), ("env", "LR=0.1", "map of NAME"),
     ("env", ["LR"], "map of NAME"), ("env", 7, "map of NAME")],
)  # fmt: skip
def test_the_specs_own_args_and_env_of_the_wrong_shape_are_a_400_not_a_500(
    jw, api_as, field, value, text
):
    """Found by the schema property tests (#32): the sweep joined the grid's values to args and
    env before they were checked, and a number or a string there was a server error."""
    answer = api_as(jw["alice"]).post(URL, {**BODY, field: value, "grid": GRID}, format="json")
    assert answer.status_code == 400, answer.content
    assert text in str(answer.json()[field])
    assert not Job.objects.exists() and not Sweep.objects.exists()


def test_the_specs_env_in_the_kubernetes_shape_is_kept_beside_the_grids(jw, api_as):
    env = [{"name": "SEED", "value": "7"}]
    answer = api_as(jw["alice"]).post(URL, {**BODY, "env": env, "grid": GRID}, format="json")
    assert answer.status_code == 201, answer.content
    job = Job.objects.filter(sweep_id=answer.json()["id"]).order_by("pk").first()
    assert job.env == {"SEED": "7", "LR": "0.1"}


def test_one_bad_combination_makes_no_job_at_all(jw, api_as):
    grid = {"env": {"LR": ["0.1", "bad\u0000value"]}}
    answer = api_as(jw["alice"]).post(URL, {**BODY, "grid": grid}, format="json")
    assert answer.status_code == 400
    assert not Job.objects.exists() and not Sweep.objects.exists()


def test_a_sweep_is_cancelled_together_and_other_teams_see_nothing(jw, api_as):
    sweep_id = api_as(jw["alice"]).post(URL, {**BODY, "grid": GRID}, format="json").json()["id"]
    carol = api_as(jw["carol"])
    assert carol.get(f"{URL}{sweep_id}/").status_code == 404
    assert carol.post(f"{URL}{sweep_id}/cancel/").status_code == 404
    assert carol.get(URL).json()["count"] == 0
    done = api_as(jw["alice"]).post(f"{URL}{sweep_id}/cancel/")
    assert done.status_code == 200 and done.json() == {"cancelled": 4}
    assert set(Job.objects.values_list("state", flat=True)) == {"cancelled"}


def test_the_job_form_starts_a_sweep_and_its_page_lists_the_jobs(jw, client):
    client.force_login(jw["alice"])
    form = {
        "team": "vision", "name": "grid", "image": "ghcr.io/acme/train:1",
        "command": "python train.py", "workers": 1, "gpus_per_worker": 1, "pool": "a100",
        "tier": "experiment", "max_runtime_seconds": 600, "sweep": "LR=0.1,0.01\n--seed=1,2,3",
    }  # fmt: skip
    answer = client.post(reverse("job-create"), form)
    sweep = Sweep.objects.get()
    assert answer.status_code == 302 and answer["Location"] == reverse("job-sweep", args=[sweep.pk])
    page = client.get(answer["Location"]).content.decode()
    assert page.count('href="/jobs/') >= 6 and "Cancel sweep" in page
    bad = client.post(reverse("job-create"), {**form, "sweep": "LR"}).content.decode()
    assert "Line 1: write NAME=value1,value2" in bad
