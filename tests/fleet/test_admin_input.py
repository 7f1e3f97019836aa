"""What platform admins and operators set is checked as user input is: a kubeconfig path to a
file that is not a kubeconfig is a field error (not a 500, and not a cluster that can never be
reached), and every URL the portal will call (Prometheus, DCGM exporters, team webhooks, the
identity provider, its own address) is http or https, nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from fleet.models import Cluster
from queues.services.notifications import webhook_post

REPO = Path(__file__).resolve().parents[2]

NOT_KUBECONFIGS = {
    "binary": b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00",
    "broken-yaml": b"clusters: [{name: c\n  - : :",
    "a-list": b"- one\n- two\n",
    "a-scalar": b"just some text\n",
    "no-contexts": b"apiVersion: v1\nkind: Config\nclusters: []\n",
}


@pytest.mark.parametrize("content", NOT_KUBECONFIGS.values(), ids=NOT_KUBECONFIGS.keys())
@pytest.mark.parametrize("context", ["", "prod"])
def test_a_kubeconfig_path_to_a_file_that_is_not_one_is_a_field_error(
    api_as, world, tmp_path, content, context
):
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    answer = api_as(world["admin"]).post(
        reverse("cluster-list"),
        {"name": "east", "kubeconfig_path": str(path), "context": context},
        format="json",
    )
    assert answer.status_code == 400, answer.content
    message = answer.json()["kubeconfig_path"][0]
    assert "not a kubeconfig" in message
    assert not Cluster.objects.exists()


def test_a_kubeconfig_that_is_far_too_large_is_not_read(api_as, world, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_bytes(b"# padding\n" * 600_000)  # 6 MB
    answer = api_as(world["admin"]).post(
        reverse("cluster-list"), {"name": "east", "kubeconfig_path": str(path)}, format="json"
    )
    assert answer.status_code == 400 and "kubeconfig_path" in answer.json()


SCHEMES = ["ftp://metrics.example.org/", "file:///etc/passwd", "gopher://x.example.org/"]


@pytest.mark.parametrize("url", SCHEMES)
def test_cluster_urls_are_http_or_https_only(api_as, world, kubeconfig, url):
    client = api_as(world["admin"])
    for field, value in [("prometheus_url", url), ("dcgm_scrape_urls", [url])]:
        answer = client.post(
            reverse("cluster-list"),
            {"name": "east", "kubeconfig_path": kubeconfig, field: value},
            format="json",
        )
        assert answer.status_code == 400, (field, answer.content)
        assert field in answer.json()
    assert not Cluster.objects.exists()


def test_the_cluster_form_refuses_a_prometheus_url_that_is_not_http(world, client, kubeconfig):
    client.force_login(world["admin"])
    answer = client.post(
        reverse("fleet-cluster-create"),
        {"name": "east", "kubeconfig_path": kubeconfig, "scheduler": "kueue",
         "kueue_api_version": "v1beta2", "prometheus_url": "ftp://metrics.example.org/"},
    )  # fmt: skip
    assert answer.status_code == 200  # the form again, with the error
    assert "http" in answer.context["form"].errors["prometheus_url"][0]
    assert not Cluster.objects.exists()


@pytest.mark.parametrize("url", SCHEMES)
def test_a_team_webhook_is_http_or_https_only(world, url):
    team = world["vision"]
    team.webhook_url = url
    with pytest.raises(ValidationError) as refused:
        team.full_clean()
    assert "webhook_url" in refused.value.message_dict
    # A row that holds one all the same is never opened (urllib would read a file:// URL): a
    # permanent error, which the task does not retry.
    with pytest.raises(ValueError, match="not http"):
        webhook_post(url=url, text="job done")


@pytest.mark.parametrize(
    "name,value",
    [("PROMETHEUS_URL", "file:///etc/passwd"), ("DCGM_SCRAPE_URLS", "http://a:9400,ftp://b/"),
     ("OIDC_ISSUER", "ftp://id.example.org"), ("PORTAL_URL", "javascript:alert(1)")],
)  # fmt: skip
def test_url_settings_that_are_not_http_stop_the_start(name, value):
    env = {**os.environ, "SECRET_KEY": "x" * 50, name: value}
    done = subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert name in done.stderr and "http" in done.stderr
