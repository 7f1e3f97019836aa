"""Run a real Prometheus for tests and benchmarks: from generated blocks or scraping a target."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import requests

from kubesim.testing import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def prometheus_available() -> bool:
    return Path(PROMETHEUS).exists()


def promtool_available() -> bool:
    return Path(PROMTOOL).exists()


def create_blocks(openmetrics: str | Path, data_dir: Path) -> None:
    """Write TSDB blocks from an OpenMetrics file (promtool tsdb create-blocks-from)."""
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data_dir)],
        check=True,
        capture_output=True,
        timeout=600,
    )


@contextmanager
def running_prometheus(
    *,
    targets: list[str] | None = None,
    interval: str = "1s",
    data_dir: Path | None = None,
    metrics_path: str = "/metrics/dcgm",
):
    """Prometheus on a free loopback port; scrapes `targets` (host:port) when given."""
    with tempfile.TemporaryDirectory(prefix="qm-prom-") as tmp:
        tmp = Path(tmp)
        data = data_dir or tmp / "data"
        config = tmp / "prometheus.yml"
        lines = ["global:", f"  scrape_interval: {interval}", f"  evaluation_interval: {interval}"]
        if targets:
            lines += [
                "scrape_configs:",
                "  - job_name: dcgm",
                "    honor_labels: true",
                f"    metrics_path: {metrics_path}",
                f"    scrape_interval: {interval}",
                "    static_configs:",
                f"      - targets: [{', '.join(repr(t) for t in targets)}]",
            ]
        config.write_text("\n".join(lines) + "\n")
        port = free_port()
        log = open(tmp / "prometheus.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=100y",
                "--query.max-samples=50000000",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError((tmp / "prometheus.log").read_text()[-2000:])
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
