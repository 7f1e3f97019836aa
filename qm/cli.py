"""`qm`: Quartermaster from a terminal, over the REST API only.

    qm login --url https://gpu.example.org          # asks for username and password
    qm submit job.yaml                             # the job form's fields, as YAML
    qm ls [--state queued] | qm status ID | qm logs [-f] ID | qm cancel ID
    qm sweep job.yaml --set LR=0.1,0.01 --set=--seed=1,2   # (a flag's values after "=")
    qm quota request --team vision --pool a100 --gpus 12 [--borrowing N|none] --why "..."
    qm usage --team vision [--start 2026-11-01] [--end 2026-12-01]
    qm reserve --team vision --pool a100 --gpus 8 --start "2026-12-01 09:00" --hours 48 --why "..."
    qm reservations [--state pending] | qm reservations show|cancel|approve|reject ID [--why "..."]

Tables for people by default; --json prints the API's answer for scripts. Exit codes: 0 done,
1 the portal refused (its message is printed), 2 bad usage, 3 not signed in, 4 no answer.
The token is kept in $XDG_CONFIG_HOME/quartermaster/config.json (owner-only permissions).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shlex
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests
import yaml

EXIT_REFUSED, EXIT_USAGE, EXIT_SIGNED_OUT, EXIT_UNREACHABLE = 1, 2, 3, 4
TIMEOUT = 30


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_REFUSED):
        super().__init__(message)
        self.code = code


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "quartermaster" / "config.json"


def load_config() -> dict:
    try:
        return json.loads(config_path().read_text())
    except (OSError, ValueError):
        return {}


def save_config(config: dict) -> None:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(config, out)
    os.chmod(path, 0o600)


class Api:
    """The portal's REST API with the saved token."""

    def __init__(self, config: dict):
        if not config.get("url") or not config.get("token"):
            raise CliError("Not signed in: run `qm login --url <portal address>`.", EXIT_SIGNED_OUT)
        self.base = config["url"].rstrip("/") + "/api/v1/"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {config['token']}"

    def call(self, method: str, path: str, *, stream=False, **kwargs):
        try:
            response = self.session.request(
                method, self.base + path, timeout=None if stream else TIMEOUT, stream=stream,
                **kwargs,
            )  # fmt: skip
        except requests.RequestException as exc:
            raise CliError(f"No answer from {self.base}: {exc}", EXIT_UNREACHABLE) from exc
        if response.status_code == 401:
            raise CliError("The portal does not accept the saved token: `qm login` again.",
                           EXIT_SIGNED_OUT)  # fmt: skip
        if response.status_code >= 400:
            raise CliError(_error_text(response))
        return response

    def json(self, method: str, path: str, **kwargs):
        response = self.call(method, path, **kwargs)
        return response.json() if response.content else {}


def _error_text(response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:300]}"
    if isinstance(body, dict):
        if "detail" in body and len(body) == 1:
            return str(body["detail"])
        parts = []
        for field, messages in body.items():
            text = " ".join(messages) if isinstance(messages, list) else str(messages)
            parts.append(text if field in ("non_field_errors", "detail") else f"{field}: {text}")
        return "; ".join(parts)
    return str(body)


def _table(rows: list[list], headers: list[str]) -> str:
    cells = [[str(c) if c is not None else "—" for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def _print(args, data, text: str) -> None:
    print(json.dumps(data, indent=2) if args.json else text)


def _read_spec(path: str) -> dict:
    try:
        with open(path) as source:
            spec = yaml.safe_load(source)
    except OSError as exc:
        raise CliError(f"Cannot read {path}: {exc.strerror}.", EXIT_USAGE) from exc
    except yaml.YAMLError as exc:
        raise CliError(f"{path} is not valid YAML: {exc}", EXIT_USAGE) from exc
    if not isinstance(spec, dict):
        raise CliError(f"{path} must hold the job's fields (name, image, command, ...).",
                       EXIT_USAGE)  # fmt: skip
    return spec


def _as_form_writes(spec: dict) -> dict:
    """The job form's text fields written as the form takes them, turned into what the API
    takes: a command, arguments or driver as one string split as a shell does (quotes group
    words), environment variables as NAME=value lines, volumes as name:/path[:ro] lines and
    secrets as NAME=secret/key lines. Lists and mappings pass unchanged."""
    spec = dict(spec)
    for name in ("command", "args", "driver_command"):
        if isinstance(spec.get(name), str):
            try:
                spec[name] = shlex.split(spec[name])
            except ValueError as exc:
                raise CliError(f"{name}: unbalanced quotes ({exc}).", EXIT_USAGE) from exc
    for name, sep in (("env", "="), ("secret_env", "=")):
        if isinstance(spec.get(name), str):
            pairs = {}
            for line in _lines(spec[name]):
                key, found, value = line.partition(sep)
                if not found:
                    raise CliError(f"{name}: write one NAME=value per line ({line!r}).",
                                   EXIT_USAGE)  # fmt: skip
                pairs[key.strip()] = value if name == "env" else value.strip()
            spec[name] = pairs
    if isinstance(spec.get("volumes"), str):
        mounts = []
        for line in _lines(spec["volumes"]):
            parts = line.split(":")
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
                raise CliError(f"volumes: write volume:/path or volume:/path:ro ({line!r}).",
                               EXIT_USAGE)  # fmt: skip
            mounts.append({"volume": parts[0].strip(), "mount_path": parts[1].strip(),
                           "read_only": parts[2:] == ["ro"]})  # fmt: skip
        spec["volumes"] = mounts
    return spec


def _lines(text: str) -> list[str]:
    """The lines that say something (blank lines and # comments skipped, as the form does)."""
    return [line.strip() for line in text.splitlines() if line.strip() and
            not line.strip().startswith("#")]  # fmt: skip


def _job_text(job: dict) -> str:
    lines = [
        f"job {job['id']}  {job['name']}",
        f"  team {job['team']}  state {job['state']}  "
        f"{job['workers']} × {job['gpus_per_worker']} GPUs  pool {job.get('pool') or 'any'}",
    ]
    if job.get("pending_reason"):
        lines.append(f"  why it waits: {job['pending_reason']}")
    if job.get("queue_position"):
        lines.append(f"  position in the team's queue: {job['queue_position']}")
    if job.get("estimated_start"):
        lines.append(f"  estimated start: {job['estimated_start']}")
    if job.get("exit_reason"):
        lines.append(f"  {job['exit_reason']}")
    return "\n".join(lines)


# -- commands ----------------------------------------------------------------------------------


def cmd_login(args) -> int:
    url = (args.url or load_config().get("url") or "").rstrip("/")
    if not url:
        raise CliError("Say where the portal is: qm login --url https://…", EXIT_USAGE)
    username = args.username or input("Username: ")
    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else getpass.getpass()
    try:
        response = requests.post(
            f"{url}/api/v1/auth/token/",
            data={"username": username, "password": password, "name": "qm command line"},
            timeout=TIMEOUT,
        )
    except requests.RequestException as exc:
        raise CliError(f"No answer from {url}: {exc}", EXIT_UNREACHABLE) from exc
    if response.status_code >= 400:
        raise CliError(_error_text(response))
    save_config({"url": url, "token": response.json()["token"], "username": username})
    print(f"Signed in to {url} as {username}; the token is in {config_path()}.")
    return 0


def cmd_submit(args) -> int:
    spec = _as_form_writes(_read_spec(args.file))
    if args.team:
        spec["team"] = args.team
    job = Api(load_config()).json("POST", "jobs/", json=spec)
    _print(args, job, _job_text(job))
    return 0


def cmd_ls(args) -> int:
    params = {"limit": args.limit}
    if args.state:
        params["state"] = args.state
    if args.team:
        params["team"] = args.team
    data = Api(load_config()).json("GET", "jobs/", params=params)
    rows = [
        [j["id"], j["name"][:40], j["team"], j["state"], j["workers"] * j["gpus_per_worker"],
         (j.get("submitted_at") or j.get("created_at") or "")[:16].replace("T", " ")]
        for j in data["results"]
    ]  # fmt: skip
    _print(args, data, _table(rows, ["ID", "NAME", "TEAM", "STATE", "GPUS", "SUBMITTED"]))
    return 0


def cmd_status(args) -> int:
    job = Api(load_config()).json("GET", f"jobs/{args.id}/")
    text = _job_text(job)
    for t in job.get("transitions") or []:
        text += f"\n  {t['at'][:19].replace('T', ' ')}  {t['to_state']:<16} {t.get('reason', '')}"
    _print(args, job, text)
    return 0


def cmd_logs(args) -> int:
    params = {"tail": args.tail}
    if args.pod:
        params["pod"] = args.pod
    if args.follow:
        params["follow"] = "true"
    response = Api(load_config()).call(
        "GET", f"jobs/{args.id}/logs/", params=params, stream=args.follow
    )
    if not args.follow:
        sys.stdout.write(response.text)
        return 0
    try:
        for chunk in response.iter_content(chunk_size=None):
            sys.stdout.write(chunk.decode("utf-8", "replace"))
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    return 0


def cmd_cancel(args) -> int:
    job = Api(load_config()).json("POST", f"jobs/{args.id}/cancel/")
    _print(args, job, f"job {job['id']} {job['state']}")
    return 0


def _grid(settings: list[str]) -> dict:
    grid: dict = {}
    for item in settings:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            raise CliError(f"--set {item}: write NAME=v1,v2 or --flag=v1,v2.", EXIT_USAGE)
        kind = "args" if name.startswith("-") else "env"
        grid.setdefault(kind, {})[name] = [v for v in values.split(",") if v]
    return grid


def cmd_sweep(args) -> int:
    spec = _as_form_writes(_read_spec(args.file))
    if args.team:
        spec["team"] = args.team
    spec["grid"] = _grid(args.set)
    sweep = Api(load_config()).json("POST", "sweeps/", json=spec)
    rows = [[j["id"], j["name"], j["state"]] for j in sweep["jobs"]]
    text = f"sweep {sweep['id']}  {sweep['name']}: {len(rows)} jobs\n" + _table(
        rows, ["ID", "NAME", "STATE"]
    )
    _print(args, sweep, text)
    return 0


def _limit(option: str, value: str) -> int | None:
    """--borrowing/--lending: a number of GPUs, or "none" for no limit."""
    if value.strip().lower() in ("none", "unlimited"):
        return None
    if not value.strip().isdigit():
        raise CliError(f"--{option} {value}: give a number of GPUs, or none for no limit.",
                       EXIT_USAGE)  # fmt: skip
    return int(value)


def _pool_id(api: Api, name: str) -> int:
    pools = api.json("GET", "pools/", params={"limit": 1000})["results"]
    matches = [p for p in pools if p["name"] == name]
    if not matches:
        raise CliError(f"No pool named {name!r}; pools: {', '.join(p['name'] for p in pools)}.")
    return matches[0]["id"]


def cmd_quota_request(args) -> int:
    api = Api(load_config())
    body = {"team": args.team, "pool": _pool_id(api, args.pool), "nominal_gpus": args.gpus,
            "justification": args.why or ""}  # fmt: skip
    # A limit not given is left out: the team keeps its current one.
    for option, field in (("borrowing", "borrowing_limit"), ("lending", "lending_limit")):
        value = getattr(args, option)
        if value is not None:
            body[field] = _limit(option, value)
    made = api.json("POST", "quota-requests/", json=body)
    _print(args, made, f"quota request {made['id']}: {made['nominal_gpus']} GPUs in "
                       f"{args.pool} for {args.team}, {made['state']}")  # fmt: skip
    return 0


def cmd_usage(args) -> int:
    now = datetime.now(UTC)
    start = args.start or now.replace(day=1).strftime("%Y-%m-%d")
    end = args.end or (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:00:00Z")
    params = {"team": args.team, "start": start, "end": end}
    data = Api(load_config()).json("GET", "billing/usage/", params=params)
    rows = [[m["gpu_model"], m["gpu_hours_allocated"], m["gpu_hours_used"], m["cost"]]
            for m in data["models"]]  # fmt: skip
    total = data["totals"]
    rows.append(["total", total["gpu_hours_allocated"], total["gpu_hours_used"], total["cost"]])
    text = (f"{data['team']} from {data['start'][:16]} to {data['end'][:16]} ({data['currency']})\n"
            + _table(rows, ["GPU", "GPU-HOURS HELD", "GPU-HOURS USED", "COST"]))  # fmt: skip
    _print(args, data, text)
    return 0


def _when(option: str, text: str) -> datetime:
    """A date and time as a person writes it: ISO 8601, a space allowed before the time; without
    an offset it is this terminal's local time."""
    try:
        when = datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError as exc:
        raise CliError(
            f"--{option} {text}: give a date and time such as 2026-12-01T09:00 (your local "
            "time) or 2026-12-01T09:00+01:00.", EXIT_USAGE,
        ) from exc  # fmt: skip
    return when.astimezone() if when.tzinfo is None else when


def _utc(text: str | None) -> str:
    """An API time as the tables show it: UTC to the minute."""
    if not text:
        return "—"
    return datetime.fromisoformat(text).astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _reservation_text(r: dict) -> str:
    lines = [
        f"reservation {r['id']}: {r['gpus']} GPUs in {r['pool_name']} for {r['team']}, "
        f"{_utc(r['starts_at'])} to {_utc(r['ends_at'])} UTC, {r['state']}"
    ]
    if r.get("reason"):
        lines.append(f"  why: {r['reason']}")
    if r.get("decided_by"):
        said = f": {r['decision_reason']}" if r.get("decision_reason") else ""
        lines.append(f"  decided by {r['decided_by']} at {_utc(r['decided_at'])} UTC{said}")
    price = r.get("price")
    if price:
        hours = str(price["gpu_hours"])
        hours = hours.rstrip("0").rstrip(".") if "." in hours else hours
        lines.append(f"  price: {price['amount']} {price['currency']} for {hours} GPU-hours "
                     f"held ({price.get('basis', '')})")  # fmt: skip
    elif "price" in r:
        lines.append("  price: none (the price book has no price for this pool's GPUs)")
    return "\n".join(lines)


def cmd_reserve(args) -> int:
    if (args.end is None) == (args.hours is None):
        raise CliError("Say when the window ends: --end TIME or --hours N (one of them).",
                       EXIT_USAGE)  # fmt: skip
    start = _when("start", args.start)
    if args.hours is not None:
        if not args.hours > 0:
            raise CliError(f"--hours {args.hours:g}: give a number of hours above 0.", EXIT_USAGE)
        end = start + timedelta(hours=args.hours)
    else:
        end = _when("end", args.end)
    api = Api(load_config())
    body = {"team": args.team, "pool": _pool_id(api, args.pool), "gpus": args.gpus,
            "starts_at": start.isoformat(), "ends_at": end.isoformat(),
            "reason": args.why or ""}  # fmt: skip
    made = api.json("POST", "reservations/", json=body)
    _print(args, made, _reservation_text(made))
    return 0


def cmd_reservations(args) -> int:
    params = {"limit": args.limit, "ordering": "starts_at"}
    if args.state:
        params["state"] = args.state
    if args.team:
        params["team__slug"] = args.team
    data = Api(load_config()).json("GET", "reservations/", params=params)
    rows = [[r["id"], r["team"], r["pool_name"], r["gpus"], _utc(r["starts_at"]),
             _utc(r["ends_at"]), r["state"], r["requested_by"]]
            for r in data["results"]]  # fmt: skip
    headers = ["ID", "TEAM", "POOL", "GPUS", "STARTS (UTC)", "ENDS (UTC)", "STATE", "ASKED BY"]
    _print(args, data, _table(rows, headers))
    return 0


def cmd_reservation(args) -> int:
    """show, cancel, approve or reject one reservation (--why: the decision's reason)."""
    why = (getattr(args, "why", None) or "").strip()
    if args.action == "reject" and not why:
        raise CliError("Say why with --why: the team reads it.", EXIT_USAGE)
    api = Api(load_config())
    path = f"reservations/{args.id}/"
    if args.action == "show":
        made = api.json("GET", path)
    else:
        body = {"reason": why} if args.action in ("approve", "reject") else None
        made = api.json("POST", f"{path}{args.action}/", json=body)
    _print(args, made, _reservation_text(made))
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="qm", description="Quartermaster from a terminal.")
    top.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("login", help="sign in and keep a token")
    p.add_argument("--url", help="the portal's address, e.g. https://gpu.example.org")
    p.add_argument("--username")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    p.set_defaults(run=cmd_login)

    p = sub.add_parser("submit", help="submit a job described in a YAML file")
    p.add_argument("file")
    p.add_argument("--team")
    p.set_defaults(run=cmd_submit)

    p = sub.add_parser("ls", help="list your jobs")
    p.add_argument("--state")
    p.add_argument("--team")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(run=cmd_ls)

    p = sub.add_parser("status", help="a job's state, why it waits, and its timeline")
    p.add_argument("id", type=int)
    p.set_defaults(run=cmd_status)

    p = sub.add_parser("logs", help="a job's pod log")
    p.add_argument("id", type=int)
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--tail", type=int, default=200)
    p.add_argument("--pod")
    p.set_defaults(run=cmd_logs)

    p = sub.add_parser("cancel", help="cancel a job")
    p.add_argument("id", type=int)
    p.set_defaults(run=cmd_cancel)

    p = sub.add_parser("sweep", help="one job per combination of parameter values")
    p.add_argument("file")
    p.add_argument("--team")
    p.add_argument(
        "--set", action="append", default=[], required=True, metavar="NAME=V1,V2",
        help="an env variable's values (LR=0.1,0.01), or an argument's: --set=--seed=1,2",
    )  # fmt: skip
    p.set_defaults(run=cmd_sweep)

    p = sub.add_parser("quota", help="quota requests")
    quota = p.add_subparsers(dest="quota_command", required=True)
    q = quota.add_parser("request", help="ask for a team's quota in a pool")
    q.add_argument("--team", required=True)
    q.add_argument("--pool", required=True)
    q.add_argument("--gpus", type=int, required=True, help="nominal GPUs")
    q.add_argument(
        "--borrowing",
        metavar="N|none",
        help="borrowing limit (none: no limit); left out: the team keeps its own",
    )
    q.add_argument(
        "--lending",
        metavar="N|none",
        help="lending limit (none: no limit); left out: the team keeps its own",
    )
    q.add_argument("--why")
    q.set_defaults(run=cmd_quota_request)

    p = sub.add_parser("reserve", help="ask for GPUs held for a team over a window (leads)")
    p.add_argument("--team", required=True)
    p.add_argument("--pool", required=True)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--start", required=True, help="2026-12-01T09:00 (local time) or with offset")
    p.add_argument("--end", help="when the window ends (or --hours)")
    p.add_argument("--hours", type=float, help="how long the window lasts (or --end)")
    p.add_argument("--why", help="what the GPUs are for (the manager reads it)")
    p.set_defaults(run=cmd_reserve)

    p = sub.add_parser("reservations", help="reservations you see; show, cancel or decide one")
    p.add_argument(
        "--state", help="pending, approved, holding, active, ended, rejected or cancelled"
    )
    p.add_argument("--team")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(run=cmd_reservations)
    acts = p.add_subparsers(dest="action")
    for action, text in (
        ("show", "one reservation, with its price"),
        ("cancel", "withdraw it, or end an open window now"),
        ("approve", "approve it (a manager of the department)"),
        ("reject", "reject it, saying why (a manager of the department)"),
    ):
        a = acts.add_parser(action, help=text)
        a.add_argument("id", type=int)
        if action in ("approve", "reject"):
            a.add_argument("--why", help="the reason the team reads (reject: required)")
        a.set_defaults(run=cmd_reservation)

    p = sub.add_parser("usage", help="a team's GPU-hours and cost")
    p.add_argument("--team", required=True)
    p.add_argument("--start", help="YYYY-MM-DD (default: the first of this month)")
    p.add_argument("--end", help="YYYY-MM-DD (default: now)")
    p.set_defaults(run=cmd_usage)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except CliError as exc:
        print(f"qm: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
