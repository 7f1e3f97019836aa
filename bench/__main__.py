"""`python -m bench` (what `make bench` runs): every benchmark, one after the other.

Each prints its own figures and the ratio to the baseline its issue names. Run one alone with
`python -m bench.<name> --help`.
"""

import subprocess
import sys

BENCHMARKS = [
    "bench.kubesim_admission",
    "bench.jobs_submit",
    "bench.jobs_sync",
    "bench.cluster_isolation",
    "bench.reads_at_scale",
    "bench.pod_logs",
    "bench.log_streams",
    "bench.billing_report",
    "bench.billing_accuracy",
    "bench.billing_backfill",
    "bench.whatif",
]
# Run only when named (`make bench BENCH=suite_time`): the test suite before and after, twice
# over, about 45 minutes.
ON_REQUEST = ["bench.suite_time"]


def main(argv: list[str]) -> int:
    chosen = [b for b in BENCHMARKS if not argv or b.rsplit(".", 1)[1] in argv]
    chosen += [b for b in ON_REQUEST if b.rsplit(".", 1)[1] in argv]
    failed = []
    for module in chosen:
        print(f"\n=== {module} ===", flush=True)
        if subprocess.run([sys.executable, "-m", module], check=False).returncode != 0:
            failed.append(module)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
