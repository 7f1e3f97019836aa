"""Pod Security admission as the API server enforces it on pod creation: a namespace labelled
`pod-security.kubernetes.io/enforce: baseline` (or `restricted`) refuses a pod that breaks the
baseline standard with 403 Forbidden, naming each check it fails ("violates PodSecurity
"baseline:<version>": privileged (...), host namespaces (...)"); pods the job controllers
create are refused alike (their Job gets a FailedCreate event). The restricted standard's own
checks (non-root, dropped capabilities, seccomp) are not enforced here: kubesim knows no image
users. `warn` and `audit` labels are accepted and have no effect."""

from __future__ import annotations

from kubesim import resources

PREFIX = "pod-security.kubernetes.io"
# Capabilities the baseline standard lets a container add.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def _containers(spec: dict):
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _quoted(names) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _who(containers: list[str], *, pod: bool = False) -> str:
    """'pod', 'container "a"', 'containers "a", "b"' or 'pod and container "a"'."""
    parts = ["pod"] if pod else []
    if containers:
        word = "container" if len(containers) == 1 else "containers"
        parts.append(f"{word} {_quoted(containers)}")
    return " and ".join(parts)


def _plural(word: str, items: list) -> str:
    return word if len(items) == 1 else f"{word}s"


def baseline_violations(spec: dict) -> list[str]:
    """The baseline checks a pod spec fails, in the API server's order and words (checked
    against kube-apiserver's answers by tests/conformance/test_pod_security.py)."""
    found: list[str] = []
    containers = list(_containers(spec))
    pod_ctx = spec.get("securityContext") or {}

    def ctx(c: dict) -> dict:
        return c.get("securityContext") or {}

    def named(test) -> list[str]:
        return [c.get("name", "") for c in containers if test(ctx(c))]

    def unconfined(context: dict, profile: str) -> bool:
        return (context.get(profile) or {}).get("type") == "Unconfined"

    apparmor = named(lambda x: unconfined(x, "appArmorProfile"))
    if apparmor or unconfined(pod_ctx, "appArmorProfile"):
        who = _who(apparmor, pod=unconfined(pod_ctx, "appArmorProfile"))
        found.append(
            f'forbidden AppArmor profile ({who} must not set AppArmor profile type to "Unconfined")'
        )
    added: set[str] = set()
    adders = []
    for c in containers:
        bad = {cap for cap in (ctx(c).get("capabilities") or {}).get("add") or []
               if cap not in BASELINE_CAPABILITIES}  # fmt: skip
        if bad:
            added |= bad
            adders.append(c.get("name", ""))
    if adders:
        found.append(
            f"non-default capabilities ({_who(adders)} must not include {_quoted(sorted(added))} "
            "in securityContext.capabilities.add)"
        )
    hosts = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        found.append(f"host namespaces ({', '.join(hosts)})")
    host_paths = [v.get("name", "") for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        found.append(f"hostPath volumes ({_plural('volume', host_paths)} {_quoted(host_paths)})")
    port_users, ports = [], []
    for c in containers:
        theirs = [p["hostPort"] for p in c.get("ports") or [] if p.get("hostPort")]
        if theirs:
            port_users.append(c.get("name", ""))
            ports += theirs
    if port_users:
        verb = "uses" if len(port_users) == 1 else "use"
        listed = ", ".join(str(p) for p in ports)
        found.append(f"hostPort ({_who(port_users)} {verb} {_plural('hostPort', ports)} {listed})")
    privileged = named(lambda x: x.get("privileged"))
    if privileged:
        found.append(
            f"privileged ({_who(privileged)} must not set securityContext.privileged=true)"
        )
    masked = named(lambda x: x.get("procMount") not in (None, "Default"))
    if masked:
        values = sorted({ctx(c)["procMount"] for c in containers
                         if ctx(c).get("procMount") not in (None, "Default")})  # fmt: skip
        found.append(
            f"procMount ({_who(masked)} must not set securityContext.procMount to "
            f"{_quoted(values)})"
        )
    types: set[str] = set()
    user = role = False

    def bad_selinux(context: dict) -> bool:
        nonlocal user, role
        options = context.get("seLinuxOptions") or {}
        bad = False
        if options.get("type", "") not in SELINUX_TYPES:
            types.add(options["type"])
            bad = True
        for key in ("user", "role"):
            if options.get(key):
                user, role = (True, role) if key == "user" else (user, True)
                bad = True
        return bad

    pod_selinux = bad_selinux(pod_ctx)
    selinux = named(bad_selinux)
    if pod_selinux or selinux:
        what = [f"{_plural('type', sorted(types))} {_quoted(sorted(types))}"] if types else []
        what += ["user may not be set"] if user else []
        what += ["role may not be set"] if role else []
        found.append(
            f"seLinuxOptions ({_who(selinux, pod=pod_selinux)} set forbidden "
            f"securityContext.seLinuxOptions: {'; '.join(what)})"
        )
    seccomp = named(lambda x: unconfined(x, "seccompProfile"))
    if seccomp or unconfined(pod_ctx, "seccompProfile"):
        who = _who(seccomp, pod=unconfined(pod_ctx, "seccompProfile"))
        found.append(
            f"seccompProfile ({who} must not set securityContext.seccompProfile.type to "
            '"Unconfined")'
        )
    sysctls = [s.get("name", "") for s in pod_ctx.get("sysctls") or []
               if s.get("name") not in SAFE_SYSCTLS]  # fmt: skip
    if sysctls:
        found.append(f"forbidden sysctls ({', '.join(sysctls)})")
    return found


def admission_problem(store, pod: dict) -> str:
    """Why the pod's namespace refuses it under Pod Security ("" when it admits it)."""
    meta = pod.get("metadata") or {}
    namespace = store.try_get(resources.NAMESPACES, None, meta.get("namespace") or "default")
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(f"{PREFIX}/enforce", "privileged")
    if level not in ("baseline", "restricted"):
        return ""
    violations = baseline_violations(pod.get("spec") or {})
    if not violations:
        return ""
    version = labels.get(f"{PREFIX}/enforce-version") or "latest"
    return (
        f'pods "{meta.get("name", "")}" is forbidden: violates PodSecurity '
        f'"{level}:{version}": ' + ", ".join(violations)
    )
