"""fleet.kube against kubesim (and a tiny failing HTTP server) through the official client."""

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleet import kube
from fleet.kube.client import _watch_event, rate_limit_for
from fleet.kube.ratelimit import SharedRateLimit
from kubesim.server import Cluster as SimServer
from kubesim.testing import running_kubesim
from tests.fixtures_cluster import CRDS_DIR, SIM_FLEET

FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {"name": "a100", "labels": {"app.kubernetes.io/managed-by": "quartermaster"}},
    "spec": {"nodeLabels": {"accelerator": "nvidia-a100-80gb"}},
}


def _cluster_queue(nominal):
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "vision"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": nominal}],
                        }
                    ],
                }
            ],
        },
    }


@pytest.fixture
def sim():
    with running_kubesim(fleet=SIM_FLEET, crds_dir=CRDS_DIR) as ks:
        yield ks


@pytest.fixture
def client(sim):
    kube_client = kube.KubeClient(
        kube.build_api_client(kubeconfig_path=sim.kubeconfig), name="sim", backoff_base=0.05
    )
    yield kube_client
    kube_client.close()


def test_apply_is_idempotent_and_owned_by_quartermaster(client):
    first = client.apply(FLAVOR)
    second = client.apply(FLAVOR)

    assert first["metadata"]["uid"] == second["metadata"]["uid"]
    assert first["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
    managers = {m["manager"] for m in second["metadata"]["managedFields"]}
    assert managers == {"quartermaster"}
    assert client.get("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "a100")["spec"] == FLAVOR["spec"]


def test_apply_changes_and_namespaced_objects(client):
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-vision"}})
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "team-vision"},
        "data": {"a": "1"},
    }
    client.apply(cm)
    cm["data"] = {"a": "2"}
    stored = client.apply(cm)

    assert stored["data"] == {"a": "2"}
    listed = client.list("v1", "ConfigMap", namespace="team-vision")
    assert [item["metadata"]["name"] for item in listed] == ["settings"]
    assert listed[0]["kind"] == "ConfigMap"


def test_invalid_object_is_a_permanent_error_naming_the_field(client):
    client.apply(FLAVOR)
    with pytest.raises(kube.PermanentError) as caught:
        client.apply(_cluster_queue("lots"))

    error = caught.value
    assert error.status == 422
    assert error.reason == "Invalid"
    field = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert [c["field"] for c in error.causes] == [field]
    assert field in str(error)
    assert client.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "vision") is None


def test_conflict_without_force_is_permanent(client):
    client.apply(FLAVOR, field_manager="someone-else")
    changed = {**FLAVOR, "spec": {"nodeLabels": {"accelerator": "other"}}}

    with pytest.raises(kube.PermanentError) as caught:
        client.apply(changed, force=False)
    assert caught.value.status == 409

    # With force (the default) ownership moves to us.
    assert client.apply(changed)["spec"]["nodeLabels"] == {"accelerator": "other"}


def test_get_and_delete_missing_objects(client):
    assert client.get("v1", "Node", "no-such-node") is None
    assert client.delete("v1", "Namespace", "nope") is False
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}})
    assert client.delete("v1", "Namespace", "gone") is True
    assert client.get("v1", "Namespace", "gone") is None


def test_unknown_kind_is_permanent(client):
    with pytest.raises(kube.PermanentError, match="does not serve kind Gadget"):
        client.list("example.com/v1", "Gadget")


def test_list_pages_through_everything(client, monkeypatch):
    monkeypatch.setattr("fleet.kube.client.LIST_PAGE_SIZE", 2)
    nodes = client.list("v1", "Node")
    assert len(nodes) == 5
    assert len(client.list("v1", "Node", label_selector="accelerator=nvidia-l4")) == 2


def test_raw_get_reaches_the_visibility_api(client):
    client.apply(FLAVOR)
    client.apply(_cluster_queue(8))
    pending = client.raw_get(
        "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/vision/pendingworkloads"
    )
    assert pending["kind"] == "PendingWorkloadsSummary"
    assert pending["items"] == []


def test_watch_yields_events_from_a_resource_version(client):
    events = client.watch("v1", "Node", label_selector="accelerator=nvidia-l4", timeout_seconds=1)
    names = sorted(e["object"]["metadata"]["name"] for e in events if e["type"] == "ADDED")
    assert names == ["l4-node-0", "l4-node-1"]

    before = client.get("v1", "Node", "l4-node-0")["metadata"]["resourceVersion"]
    client.patch("v1", "Node", "l4-node-0", {"spec": {"unschedulable": True}})
    events = list(client.watch("v1", "Node", resource_version=before, timeout_seconds=1))
    modified = [e["object"] for e in events if e["type"] == "MODIFIED"]
    assert [n["metadata"]["name"] for n in modified] == ["l4-node-0"]
    assert modified[0]["spec"]["unschedulable"] is True


def test_watch_error_event_410_is_resource_expired():
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    line = json.dumps({"type": "ERROR", "object": status}).encode()
    with pytest.raises(kube.ResourceExpired, match="too old"):
        _watch_event(line)


def test_client_for_is_cached_per_cluster(sim, db):
    from fleet.models import Cluster

    cluster = Cluster.objects.create(name="c1", kubeconfig_path=sim.kubeconfig)
    try:
        assert kube.client_for(cluster) is kube.client_for(cluster)
        other = Cluster.objects.create(name="c2", kubeconfig_path=sim.kubeconfig)
        assert kube.client_for(other) is not kube.client_for(cluster)
        assert len(kube.client_for(cluster).list("v1", "Node")) == 5
    finally:
        kube.clear_client_cache()


def test_missing_kubeconfig_is_a_configuration_error(tmp_path):
    with pytest.raises(kube.ConfigurationError):
        kube.build_api_client(kubeconfig_path=str(tmp_path / "missing"))


class _Flaky(BaseHTTPRequestHandler):
    """Answers the first `failures` requests with `status`, then 200 with a small JSON body."""

    failures = 2
    status = 500
    retry_after = None
    seen: list

    def do_GET(self):
        self.seen.append(self.path)
        if len(self.seen) <= self.failures:
            body = json.dumps(
                {"kind": "Status", "status": "Failure", "reason": "InternalError", "code": 500}
            )
            self.send_response(self.status)
            if self.retry_after:
                self.send_header("Retry-After", self.retry_after)
        else:
            body = json.dumps({"ok": True})
            self.send_response(200)
        data = body.encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky_server():
    servers = []

    def start(**attrs):
        handler = type("Handler", (_Flaky,), {"seen": [], **attrs})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return httpd, handler

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def _client_for_url(url, tmp_path, **kwargs):
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "x", "cluster": {"server": url}}],
                "users": [{"name": "x", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
                "current-context": "x",
            }
        )
    )
    return kube.KubeClient(
        kube.build_api_client(kubeconfig_path=str(config)), backoff_base=0.01, **kwargs
    )


def test_server_errors_are_retried_until_success(flaky_server, tmp_path):
    httpd, handler = flaky_server(failures=2, status=500)
    client = _client_for_url(f"http://127.0.0.1:{httpd.server_port}", tmp_path, max_attempts=5)

    assert client.raw_get("/anything") == {"ok": True}
    assert len(handler.seen) == 3


def test_retries_give_up_with_a_transient_error(flaky_server, tmp_path):
    httpd, handler = flaky_server(failures=10, status=503)
    client = _client_for_url(f"http://127.0.0.1:{httpd.server_port}", tmp_path, max_attempts=3)

    with pytest.raises(kube.TransientError) as caught:
        client.raw_get("/anything")
    assert caught.value.status == 503
    assert len(handler.seen) == 3


def test_too_many_requests_honours_retry_after(flaky_server, tmp_path):
    httpd, handler = flaky_server(failures=1, status=429, retry_after="1")
    client = _client_for_url(f"http://127.0.0.1:{httpd.server_port}", tmp_path, max_attempts=3)

    started = time.monotonic()
    assert client.raw_get("/anything") == {"ok": True}
    assert time.monotonic() - started >= 0.5  # half of Retry-After at least (jitter)


def test_connection_refused_then_server_back_on_same_port(tmp_path):
    with running_kubesim(fleet=SIM_FLEET, crds_dir=CRDS_DIR, controllers=False) as first:
        port = first.port
        client = kube.KubeClient(
            kube.build_api_client(kubeconfig_path=first.kubeconfig),
            backoff_base=0.2,
            max_attempts=8,
        )
        assert len(client.list("v1", "Node")) == 5
        first.cluster.server.stop()

        replacement = SimServer(fleet=SIM_FLEET, crds_dir=CRDS_DIR, controllers=False, port=port)
        timer = threading.Timer(0.6, replacement.start)
        timer.start()
        try:
            assert len(client.list("v1", "Node")) == 5
        finally:
            timer.join()
            replacement.stop()
            client.close()


def test_connection_refused_is_transient(tmp_path):
    from kubesim.testing import free_port

    client = _client_for_url(f"http://127.0.0.1:{free_port()}", tmp_path, max_attempts=2)
    with pytest.raises(kube.TransientError, match="cannot reach"):
        client.list("v1", "Node")


def test_token_bucket_limits_rate_and_reads_settings_each_call():
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    rate = {"qps": 10.0, "burst": 2}
    bucket = kube.TokenBucket(
        lambda: rate["qps"], lambda: rate["burst"], clock=lambda: now[0], sleep=sleep
    )
    assert bucket.acquire() == 0 and bucket.acquire() == 0  # the burst
    assert bucket.acquire() == pytest.approx(0.1)
    rate["qps"] = 0  # unlimited from now on
    assert bucket.acquire() == 0
    assert slept == [pytest.approx(0.1)]


def test_token_bucket_is_thread_safe():
    bucket = kube.TokenBucket(lambda: 200.0, lambda: 5)
    started = time.monotonic()
    threads = [threading.Thread(target=bucket.acquire) for _ in range(25)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 5 free, then 20 at 200/s: at least ~0.1 s in all.
    assert time.monotonic() - started >= 0.09


def _shared(key, url, rate, burst, slept):
    local = kube.TokenBucket(lambda: 0.0, lambda: 1)  # unlimited: only the shared window counts
    return SharedRateLimit(key, url, local, lambda: rate, lambda: burst, sleep=slept.append)


def test_the_rate_limit_is_one_window_for_all_processes_of_a_portal(settings):
    """Two limiters with the same key (two processes: their only common state is in Redis)
    take turns in one window; another cluster's key has a window of its own."""
    assert settings.KUBE_RATE_LIMIT_URL.startswith("redis")
    key = f"test-{uuid.uuid4().hex}"
    slept = []
    # 5 requests in any 60 s: BURST/QPS = 60 s.
    one, two = (_shared(key, settings.KUBE_RATE_LIMIT_URL, 5 / 60, 5, slept) for _ in range(2))
    assert [one.try_acquire(), two.try_acquire(), one.try_acquire()] == [None, None, None]
    assert [two.try_acquire(), one.try_acquire()] == [None, None]
    # The window is full for both: each is told how long until it has room.
    for limiter in (one, two):
        wait = limiter.try_acquire()
        assert wait is not None and 55 < wait <= 60
    other = _shared(f"{key}-other", settings.KUBE_RATE_LIMIT_URL, 5 / 60, 5, slept)
    assert other.try_acquire() is None
    assert slept == []


def test_the_shared_window_follows_the_settings_and_acquire_sleeps_until_it_has_room(settings):
    key = f"test-{uuid.uuid4().hex}"
    slept = []
    rate = {"qps": 2.0, "burst": 2}

    def sleep(seconds):
        slept.append(seconds)
        time.sleep(seconds)

    limiter = SharedRateLimit(
        key, settings.KUBE_RATE_LIMIT_URL, kube.TokenBucket(lambda: 0.0, lambda: 1),
        lambda: rate["qps"], lambda: rate["burst"], sleep=sleep,
    )  # fmt: skip
    assert str(limiter.window()) == "2 per 1 second"
    rate.update(qps=50.0, burst=100)
    assert str(limiter.window()) == "100 per 2 second"
    rate.update(qps=2.0, burst=2)
    assert limiter.acquire() == 0 and limiter.acquire() == 0
    assert limiter.acquire() > 0 and 0 < sum(slept) <= 1.0
    rate["qps"] = 0  # unlimited
    assert limiter.window() is None and limiter.acquire() == 0


def test_without_its_storage_each_process_limits_its_own_requests(caplog):
    """A Redis that does not answer costs the shared window only: the process's bucket goes on
    limiting, and the request is sent."""
    from kubesim.testing import free_port

    now, local_waits = [0.0], []

    def sleep(seconds):
        local_waits.append(seconds)
        now[0] += seconds

    local = kube.TokenBucket(lambda: 10.0, lambda: 1, clock=lambda: now[0], sleep=sleep)
    limiter = SharedRateLimit(
        "test-down", f"redis://127.0.0.1:{free_port()}/0", local, lambda: 10.0, lambda: 1
    )
    with caplog.at_level("WARNING"):
        assert limiter.acquire() == 0
        limiter.acquire()
    assert local_waits == [pytest.approx(0.1)]  # the second request waited for the local bucket
    assert "cannot be reached" in caplog.text


def test_a_registered_clusters_client_shares_its_rate_limit(client, settings):
    """Per registered cluster, named by this portal's database; per process without a storage
    or for a client of no registered cluster (client here: a kubeconfig's)."""
    shared = rate_limit_for(7, "gpu-west")
    assert isinstance(shared, SharedRateLimit)
    assert shared.key == f"{settings.DATABASES['default']['NAME']}:7"
    assert isinstance(client.bucket, kube.TokenBucket)
    settings.KUBE_RATE_LIMIT_URL = ""
    assert isinstance(rate_limit_for(7, "gpu-west"), kube.TokenBucket)


def test_client_uses_settings_rate_limit(client, settings):
    settings.KUBE_QPS = 20.0
    settings.KUBE_BURST = 1
    started = time.monotonic()
    for _ in range(5):
        client.get("v1", "Node", "l4-node-0")
    assert time.monotonic() - started >= 0.18


def test_apply_dry_run_stores_nothing_and_strict_refuses_unknown_fields(client):
    previewed = client.apply(FLAVOR, dry_run=True)
    assert previewed["spec"] == FLAVOR["spec"]
    assert client.get("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "a100") is None

    sloppy = {**FLAVOR, "spec": {**FLAVOR["spec"], "colour": "blue"}}
    with pytest.raises(kube.PermanentError, match="colour"):
        client.apply(sloppy, field_validation="Strict")
    # The server's default (Warn) drops the field and stores the rest.
    assert "colour" not in client.apply(sloppy)["spec"]
