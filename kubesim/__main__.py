"""Command line: python -m kubesim serve --port 6443 --fleet FLEET.yaml --kubeconfig OUT ..."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from kubesim.server import Cluster
from kueuemodel.afs import AfsConfig

log = logging.getLogger("kubesim")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kubesim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the Kubernetes API of a simulated GPU cluster")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=6443, help="0 picks a free port")
    serve.add_argument("--fleet", help="fleet file (YAML) describing node pools")
    serve.add_argument("--kubeconfig", help="write a kubeconfig pointing at this server here")
    serve.add_argument(
        "--advertise-url",
        help="server address written into the kubeconfig (e.g. http://kubesim:6443 in compose)",
    )
    serve.add_argument("--crds", help="directory of CRD YAML files to validate against")
    serve.add_argument("--state", help="JSON file to load the state from and save it to")
    serve.add_argument(
        "--time-scale", type=float, default=1.0, help="simulated seconds per real second"
    )
    serve.add_argument("--no-controllers", action="store_true", help="serve the API only")
    serve.add_argument(
        "--fair-sharing",
        action="store_true",
        help="run Kueue with fair sharing enabled (as KUBESIM_FAIR_SHARING=true)",
    )
    serve.add_argument(
        "--admission-fair-sharing",
        metavar="JSON",
        help="run Kueue with admission fair sharing, configured as Kueue's admissionFairSharing "
        'section, e.g. \'{"usageHalfLifeTime": "168h", "usageSamplingInterval": "5m"}\' '
        "(as KUBESIM_ADMISSION_FAIR_SHARING)",
    )
    serve.add_argument("--log-level", default="INFO")
    return parser


def serve(args: argparse.Namespace) -> int:
    if args.fair_sharing:
        os.environ["KUBESIM_FAIR_SHARING"] = "true"
    if args.admission_fair_sharing:
        AfsConfig.from_text(args.admission_fair_sharing)  # refuse a bad one before serving
        os.environ["KUBESIM_ADMISSION_FAIR_SHARING"] = args.admission_fair_sharing
    cluster = Cluster(
        fleet=args.fleet,
        crds_dir=args.crds,
        state=args.state,
        controllers=not args.no_controllers,
        time_scale=args.time_scale,
        host=args.host,
        port=args.port,
    )
    done = threading.Event()

    def stop(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    cluster.start()
    if args.kubeconfig:
        cluster.write_kubeconfig(args.kubeconfig, server_url=args.advertise_url)
    log.info("kubesim serving %s (kubeconfig: %s)", cluster.url, args.kubeconfig or "not written")
    print(f"kubesim serving {cluster.url}", flush=True)
    done.wait()
    log.info("kubesim stopping")
    cluster.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    if args.command == "serve":
        return serve(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
