"""The job form: text fields a person types, parsed into what job_submit takes."""

import shlex

from django import forms
from django.core.exceptions import ValidationError

from fleet.quantities import cpu_text, memory_text
from fleet.selectors.inventory import pool_worker_sizes
from queues.backends import backend_for
from queues.models import Job, PriorityTier
from queues.selectors import jobs as job_selectors
from queues.services.jobs import submit as job_services


def _split(text: str, field: str) -> list[str]:
    try:
        return shlex.split(text or "")
    except ValueError as exc:
        raise ValidationError({field: f"Unbalanced quotes: {exc}."}) from exc


def parse_env(text: str) -> dict:
    """NAME=value per line; blank lines and lines starting with # are skipped."""
    env = {}
    for n, line in enumerate((text or "").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ValidationError({"env": f"Line {n}: write NAME=value."})
        name, value = line.split("=", 1)
        env[name.strip()] = value
    return env


def parse_mounts(text: str) -> list[dict]:
    """volume:/path[:ro] per line, as the job form writes mounts."""
    mounts = []
    for n, line in enumerate((text or "").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise ValidationError({"volumes": f"Line {n}: write volume:/path, or volume:/path:ro."})
        mounts.append({"volume": parts[0].strip(), "mount_path": parts[1].strip(),
                       "read_only": len(parts) == 3 and parts[2] == "ro"})  # fmt: skip
    return mounts


def parse_secret_env(text: str) -> dict:
    """NAME=secret/key per line."""
    refs = {}
    for n, line in enumerate((text or "").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, ref = line.partition("=")
        if not sep or "/" not in ref:
            raise ValidationError({"secret_env": f"Line {n}: write NAME=secret/key."})
        refs[name.strip()] = ref.strip()
    return refs


def mounts_text(mounts) -> str:
    return "\n".join(
        f"{m['volume']}:{m['mount_path']}" + (":ro" if m.get("read_only") else "") for m in mounts
    )


def secret_env_text(refs: dict) -> str:
    return "\n".join(
        f"{name}={ref['secret']}/{ref['key']}" if isinstance(ref, dict) else f"{name}={ref}"
        for name, ref in refs.items()
    )


def tier_label(tier) -> str:
    """What a tier promises, in the words the tier list uses."""
    promise = "may be preempted" if tier.preemptible else "not preempted by lower tiers"
    return f"{tier.name} ({promise})"


class JobForm(forms.Form):
    team = forms.ChoiceField(label="Team")
    name = forms.CharField(max_length=200, help_text="Any text; the cluster name is derived.")
    kind = forms.ChoiceField(
        label="Kind", initial="job", required=False, choices=[
            ("job", "Job: workers as one batch Job (torchrun rendezvous set for you)"),
            ("pytorchjob", "PyTorchJob: a master and workers, run by Kubeflow's operator"),
            ("jobset", "JobSet: the workers, and a driver if you give one"),
        ],
    )  # fmt: skip
    image = forms.CharField(
        max_length=500, help_text="Container image, e.g. ghcr.io/acme/train:1.0."
    )
    command = forms.CharField(
        max_length=8000, help_text="As in a shell, e.g. torchrun train.py (quotes group words)."
    )
    args = forms.CharField(max_length=16000, required=False, label="Arguments")
    env = forms.CharField(
        max_length=32000,
        required=False,
        label="Environment",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One NAME=value per line.",
    )
    workers = forms.IntegerField(initial=1, min_value=1)
    gpus_per_worker = forms.IntegerField(initial=1, min_value=0, label="GPUs per worker")
    pool = forms.ChoiceField(label="Pool")
    tier = forms.ChoiceField(label="Priority tier")
    gang = forms.BooleanField(
        required=False,
        initial=True,
        label="Start all workers together",
        help_text="Volcano only: off lets workers start one by one as GPUs free up.",
    )
    max_runtime_seconds = forms.IntegerField(
        min_value=1, initial=3600, label="Maximum runtime (seconds)"
    )
    expected_runtime_seconds = forms.IntegerField(
        min_value=1,
        required=False,
        label="Expected runtime (seconds)",
        help_text="Used to estimate when queued jobs start.",
    )
    sweep = forms.CharField(
        required=False,
        max_length=4000,
        label="Sweep over (optional)",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One parameter per line with its values: LR=0.1,0.01 sets an environment "
        "variable, --batch=32,64 adds an argument. One job per combination (at most 100).",
    )
    retry_limit = forms.IntegerField(
        min_value=0,
        max_value=10,
        initial=0,
        required=False,
        label="Retries",
        help_text="How many times a failed worker is run again before the job fails (0 to 10).",
    )
    cpu = forms.CharField(
        required=False, max_length=32, label="CPUs per worker",
        widget=forms.TextInput(attrs={"placeholder": "pool default"}),
    )  # fmt: skip
    memory = forms.CharField(
        required=False, max_length=32, label="Memory per worker",
        widget=forms.TextInput(attrs={"placeholder": "pool default"}),
    )  # fmt: skip
    shm_size = forms.CharField(
        required=False, max_length=32, label="Shared memory (/dev/shm)",
        widget=forms.TextInput(attrs={"placeholder": "64Mi"}),
        help_text="PyTorch data loaders with several workers need more, e.g. 8Gi; it counts "
        "against the worker's memory.",
    )  # fmt: skip
    volumes = forms.CharField(
        required=False, max_length=4000, label="Volumes",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "datasets:/data:ro"}),
        help_text="One team volume per line: name:/mount/path, with :ro for read-only.",
    )  # fmt: skip
    secret_env = forms.CharField(
        required=False, max_length=8000, label="Environment from secrets",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "WANDB_API_KEY=wandb/api-key"}),
        help_text="One NAME=secret/key per line, from your team's secrets.",
    )  # fmt: skip

    topology_level = forms.ChoiceField(
        required=False, label="Keep workers within",
        help_text="One domain of the pool's topology: faster communication between workers.",
    )  # fmt: skip
    topology_mode = forms.ChoiceField(
        required=False, label="Placement", choices=[
            ("required", "Required: wait until one domain holds every worker"),
            ("preferred", "Preferred: one domain if there is room, else as few as possible"),
        ],
    )  # fmt: skip

    interruptible = forms.BooleanField(
        required=False, label="Interruptible (may run on spot capacity)",
        help_text="A worker whose node is taken back is replaced, not counted as a failure. "
        "Required in spot pools, which cost less.",
    )  # fmt: skip
    checkpoint_volume = forms.CharField(
        required=False, max_length=63, label="Checkpoint volume",
        help_text="A team volume your job saves checkpoints to (at CHECKPOINT_DIR): a replaced "
        "worker resumes from it instead of starting over.",
    )  # fmt: skip
    checkpoint_path = forms.CharField(
        required=False, max_length=200, label="Checkpoint path",
        widget=forms.TextInput(attrs={"placeholder": "/checkpoints"}),
    )  # fmt: skip
    driver_command = forms.CharField(
        max_length=8000, required=False, label="JobSet driver",
        help_text="The command of a CPU pod that coordinates the workers, e.g. python driver.py; "
        "the JobSet completes when it does.",
    )  # fmt: skip

    # Shown from the start; the other fields are folded into the sections below (each opens by
    # itself when it holds an error or a value other than its default).
    BASIC = (
        "team", "name", "image", "command", "workers", "gpus_per_worker", "pool", "tier",
        "max_runtime_seconds", "expected_runtime_seconds",
    )  # fmt: skip
    SECTIONS = (
        ("Arguments and environment", ("args", "env", "secret_env")),
        ("Resources and volumes", ("cpu", "memory", "shm_size", "volumes")),
        ("Kind, gang and retries", ("kind", "driver_command", "gang", "retry_limit")),
        ("Placement in the pool's topology", ("topology_level", "topology_mode")),
        (
            "Spot capacity and checkpoints",
            ("interruptible", "checkpoint_volume", "checkpoint_path"),
        ),
        ("Sweep: one job per combination of values", ("sweep",)),
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            limit = getattr(field, "max_length", None)
            if limit:
                # No maxlength attribute: a browser cuts pasted text there without a word. A
                # counter says the limit instead, and the server refuses what is longer.
                field.widget.attrs.pop("maxlength", None)
                field.widget.attrs["data-count-max"] = str(limit)
        self.teams = {t.slug: t for t in job_selectors.user_job_teams(user=user)}
        self.fields["team"].choices = [(slug, t.name) for slug, t in self.teams.items()]
        team = self.teams.get(self.data.get("team") or self.initial.get("team") or "")
        if team is None and self.teams:
            team = next(iter(self.teams.values()))
        self.team = team
        pools = list(job_selectors.team_job_pools(team=team)) if team else []
        self.fields["pool"].choices = [("any", "Any pool with quota")] + [
            (p.name, f"{p.name} ({p.gpu_model.name}"
                     + (f", {p.gpu_unit}s)" if p.gpu_unit != "GPU" else ")"))
            for p in pools
        ]  # fmt: skip
        if any(p.gpu_unit != "GPU" for p in pools):
            self.fields["gpus_per_worker"].help_text = (
                "In a MIG pool, instances of its profile (each a slice of a GPU); in a "
                "time-sliced pool, shares of a GPU."
            )
        backends = [backend_for(p.cluster) for p in pools]
        if pools and not any(b.retries_per_job for b in backends):
            # Volcano restarts the whole gang; a per-job retry limit is Kueue's backoffLimit.
            del self.fields["retry_limit"]
        if pools and not any(set(b.job_kinds) - {Job.Kind.JOB} for b in backends):
            # PyTorchJob and JobSet go through Kueue.
            del self.fields["kind"], self.fields["driver_command"]
        if not any(b.gang_optional for b in backends):
            # Kueue always admits all workers together: nothing to choose.
            del self.fields["gang"]
            self.fields[
                "workers"
            ].help_text = "All workers start together (Kueue admits a job whole)."
        self._describe_resources(team, pools)
        self._offer_topology(pools)
        tiers = list(PriorityTier.objects.all())
        self.fields["tier"].choices = [(t.name, tier_label(t)) for t in tiers]
        default = next((t.name for t in tiers if t.is_default), None)
        if default and "tier" not in self.initial:
            self.fields["tier"].initial = default

    def basic_fields(self) -> list:
        return [self[name] for name in self.BASIC if name in self.fields]

    def sections(self) -> list[dict]:
        """The folded sections: {"title", "fields", "open"}; open when a field in it has an
        error or holds something other than its default (a resubmission's environment, say)."""
        found = []
        for title, names in self.SECTIONS:
            fields = [self[name] for name in names if name in self.fields]
            if fields:
                changed = any(f.errors or not _holds_default(f) for f in fields)
                found.append({"title": title, "fields": fields, "open": changed})
        return found

    def _offer_topology(self, pools) -> None:
        """Offer the levels of the team's pools that describe a topology (none: no fields)."""
        topo = [p for p in pools if p.topology_levels]
        if not topo:
            del self.fields["topology_level"], self.fields["topology_mode"]
            return
        names = []
        for pool in topo:
            names += [lv["name"] for lv in pool.topology_levels if lv["name"] not in names]
        self.fields["topology_level"].choices = [("", "Anywhere in the pool")] + [
            (name, f"one {name}") for name in names
        ]
        self.fields["topology_level"].help_text += (
            " "
            + "; ".join(
                f"{p.name}: {', '.join(lv['name'] for lv in p.topology_levels)}" for p in topo
            )
            + "."
        )

    def _describe_resources(self, team, pools) -> None:
        """Say what a worker gets by default in each pool, and name the team's volumes and
        secrets, next to the fields that use them."""
        sizes = pool_worker_sizes(pools=pools)
        shares = [
            f"{p.name}: {cpu_text(sizes[p.pk].cpu_per_gpu_millis)} CPUs and "
            f"{memory_text(sizes[p.pk].memory_per_gpu_mib)} per GPU"
            + (f", at most {cpu_text(sizes[p.pk].max_cpu_millis)} CPUs and "
               f"{memory_text(sizes[p.pk].max_memory_mib)} per worker"
               if sizes[p.pk].max_cpu_millis and sizes[p.pk].max_memory_mib else "")
            for p in pools
        ]  # fmt: skip
        if shares:
            text = "Empty: the pool's share of a node per GPU (" + "; ".join(shares) + ")."
        else:
            text = "Empty: the pool's share of a node per GPU."
        self.fields["cpu"].help_text = "A quantity, e.g. 8 or 500m. " + text
        self.fields["memory"].help_text = "A quantity, e.g. 64Gi. " + text
        if team is not None:
            volumes = sorted({v.name for v in team.volumes.all()})
            secrets = sorted({f"{s.name} ({', '.join(s.keys)})" for s in team.secrets.all()
                              if s.kind == "generic"})  # fmt: skip
            if volumes:
                self.fields["volumes"].help_text += f" Your team's volumes: {', '.join(volumes)}."
            if secrets:
                self.fields[
                    "secret_env"
                ].help_text += f" Your team's secrets: {'; '.join(secrets)}."

    def submission(self) -> dict:
        """The cleaned values as job_submit keyword arguments (raises ValidationError)."""
        data = self.cleaned_data
        return {
            "name": data["name"],
            "image": data["image"],
            "command": _split(data["command"], "command"),
            "args": _split(data.get("args", ""), "args"),
            "env": parse_env(data.get("env", "")),
            "workers": data["workers"],
            "gpus_per_worker": data["gpus_per_worker"],
            "pool": data["pool"],
            "tier": data["tier"],
            "gang": data.get("gang", True) if "gang" in self.fields else True,
            "max_runtime_seconds": data["max_runtime_seconds"],
            "retry_limit": (data.get("retry_limit") or 0) if "retry_limit" in self.fields else 0,
            "expected_runtime_seconds": data.get("expected_runtime_seconds"),
            "cpu": data.get("cpu") or None,
            "memory": data.get("memory") or None,
            "shm_size": data.get("shm_size") or None,
            "volumes": parse_mounts(data.get("volumes", "")),
            "secret_env": parse_secret_env(data.get("secret_env", "")),
            "kind": data.get("kind") or "job",
            "interruptible": bool(data.get("interruptible")),
            "checkpoint_volume": data.get("checkpoint_volume") or "",
            "checkpoint_path": data.get("checkpoint_path") or "",
            "driver_command": _split(data.get("driver_command", ""), "driver_command"),
            "topology_level": data.get("topology_level") or "",
            "topology_mode": data.get("topology_mode") if data.get("topology_level") else "",
        }

    def clean_sweep(self):
        return parse_grid(self.cleaned_data.get("sweep", ""))


def _holds_default(bound) -> bool:
    """Whether a bound field shows what the form would show untouched."""
    value, initial = bound.value(), bound.field.initial
    if value in (None, "", False) and initial in (None, "", False):
        return True
    if str(value) == str(initial):
        return True
    choices = list(getattr(bound.field, "choices", []) or [])
    # A select without an initial value shows its first choice.
    return initial in (None, "") and bool(choices) and str(value) == str(choices[0][0])


def form_initial_from_job(job) -> dict:
    """Prefill the form from an earlier job (Resubmit)."""
    spec = job_services.job_spec(job)
    return {
        **spec,
        "team": job.team.slug,
        "command": shlex.join(spec["command"]),
        "args": shlex.join(spec["args"]),
        "env": "\n".join(f"{k}={v}" for k, v in spec["env"].items()),
        "pool": job.pool.name if job.pool_id else "any",
        "tier": job.tier.name,
        "volumes": mounts_text(spec["volumes"]),
        "secret_env": secret_env_text(spec["secret_env"]),
        "driver_command": shlex.join(spec["driver_command"]),
    }


def form_initial_from_template(template) -> dict:
    """Prefill the form from a team's saved template."""
    spec = template.spec
    return {
        **{
            k: v
            for k, v in spec.items()
            if k not in ("command", "args", "env", "volumes", "secret_env", "driver_command")
        },  # fmt: skip
        "team": template.team.slug,
        "volumes": mounts_text(spec.get("volumes") or []),
        "secret_env": secret_env_text(spec.get("secret_env") or {}),
        "command": shlex.join(spec.get("command") or []),
        "args": shlex.join(spec.get("args") or []),
        "env": "\n".join(f"{k}={v}" for k, v in (spec.get("env") or {}).items()),
        "driver_command": shlex.join(spec.get("driver_command") or []),
    }


class ApprovalPolicyForm(forms.Form):
    tiers_needing_approval = forms.ModelMultipleChoiceField(
        queryset=PriorityTier.objects.all(), required=False, widget=forms.CheckboxSelectMultiple
    )
    max_gpus_without_approval = forms.IntegerField(min_value=0, required=False)
    max_runtime_seconds_without_approval = forms.IntegerField(min_value=1, required=False)
    allowed_registries = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Registries job images may come from, one per line or comma-separated (e.g. "
        "ghcr.io, nvcr.io; docker.io for Docker Hub). Empty: any.",
    )

    def clean_allowed_registries(self):
        text = self.cleaned_data.get("allowed_registries") or ""
        return [v.strip() for v in text.replace(",", "\n").splitlines() if v.strip()]


def parse_grid(text: str) -> dict:
    """The job form's sweep lines as a grid: NAME=a,b sets env values, --flag=a,b arguments.
    Raises ValidationError naming the line that is not understood."""
    grid: dict = {}
    for number, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        name, sep, values = line.partition("=")
        name = name.strip()
        if not sep or not name or not values.strip():
            raise forms.ValidationError(
                f"Line {number}: write NAME=value1,value2 or --flag=value1,value2."
            )
        kind = "args" if name.startswith("-") else "env"
        grid.setdefault(kind, {})[name] = [v.strip() for v in values.split(",") if v.strip()]
    return grid
