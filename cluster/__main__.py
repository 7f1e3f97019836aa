"""scripts/real-cluster: build|up|down|status|kubeconfig for the local real control plane."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cluster import build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/real-cluster", description=__doc__)
    parser.add_argument(
        "--state", help="state directory (default REAL_CLUSTER_DIR or var/real-cluster)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build the binaries that are missing")
    up = commands.add_parser("up", help="build what is missing, start everything, wait until ready")
    up.add_argument(
        "--fleet", help="kubesim fleet file of the kwok nodes (default cluster/fleet.yaml)"
    )
    up.add_argument(
        "--pod-duration", default="10s", help="how long a pod runs when it names no duration"
    )
    up.add_argument("--api-port", type=int, help="the API server's port (default: a free one)")
    up.add_argument("--dcgm-port", type=int, help="the DCGM exporter's port (default: a free one)")
    up.add_argument("--timeout", type=float, default=180, help="seconds each component may take")
    commands.add_parser("down", help="stop every component")
    commands.add_parser("status", help="which components run")
    commands.add_parser("kubeconfig", help="print the admin kubeconfig's path")
    args = parser.parse_args(argv)

    if args.command == "build":
        return build.main([])

    # The rest needs the virtualenv's packages (cryptography, requests, kubernetes, PyYAML).
    from cluster import control

    cluster = control.Cluster(control.Layout(control.state_dir(args.state)))
    if args.command == "up":
        options = control.Options(
            pod_duration=args.pod_duration,
            api_port=args.api_port,
            dcgm_port=args.dcgm_port,
            timeout=args.timeout,
        )
        if args.fleet:
            options.fleet = Path(args.fleet).resolve()
        running = cluster.info().get("fleet") if cluster.is_up() else None
        if running and Path(running) != options.fleet:
            print(
                f"the real cluster is up with the fleet {running}: "
                "`scripts/real-cluster down` first to start it with another",
                file=sys.stderr,
            )
            return 1
        began = time.monotonic()
        try:
            seconds = cluster.up(options)
        except control.NotReady as exc:
            print(f"\n{exc}", file=sys.stderr)
            print(f"logs: {cluster.layout.logs}", file=sys.stderr)
            return 1
        info = cluster.info()
        if not running:
            print(f"\nstarted in {seconds:.1f} s ({time.monotonic() - began:.1f} s in all)")
        for name, version in info.get("versions", {}).items():
            print(f"  {name:<24} {version}")
        print(f"KUBECONFIG={cluster.layout.kubeconfig}")
        print(f"DCGM_SCRAPE_URLS={info.get('dcgm_url', '')}")
        print(f"logs: {cluster.layout.logs}")
        return 0
    if args.command == "down":
        cluster.down()
        print("the real cluster is down")
        return 0
    if args.command == "status":
        status = cluster.status()
        info = cluster.info()
        for name in info.get("components", []):
            print(f"  {name:<24} {'running' if status.get(name) else 'stopped'}")
        if cluster.is_up():
            print(json.dumps({"server": info["server"], "kubeconfig": info["kubeconfig"]}))
            return 0
        return 3
    if args.command == "kubeconfig":
        print(cluster.layout.kubeconfig)
        return 0 if cluster.layout.kubeconfig.exists() else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
