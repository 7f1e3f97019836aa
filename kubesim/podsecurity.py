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


def baseline_violations(spec: dict) -> list[str]:
    """The baseline checks a pod spec fails, each worded as the API server words it."""
    found: list[str] = []
    hosts = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        found.append(f"host namespaces ({', '.join(hosts)})")
    containers = list(_containers(spec))
    privileged = [c.get("name", "") for c in containers
                  if (c.get("securityContext") or {}).get("privileged")]  # fmt: skip
    if privileged:
        names = ", ".join(f'"{n}"' for n in privileged)
        found.append(f"privileged ({names} must not set securityContext.privileged=true)")
    added = sorted({
        cap for c in containers
        for cap in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        if cap not in BASELINE_CAPABILITIES
    })  # fmt: skip
    if added:
        found.append(
            "non-default capabilities (securityContext.capabilities.add must not include "
            + ", ".join(f'"{cap}"' for cap in added)
            + ")"
        )
    host_paths = [v.get("name", "") for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        found.append(f"hostPath volumes ({', '.join(host_paths)})")
    ports = sorted({p.get("hostPort") for c in containers for p in c.get("ports") or []
                    if p.get("hostPort")})  # fmt: skip
    if ports:
        found.append(f"hostPort ({', '.join(str(p) for p in ports)})")
    contexts = [spec.get("securityContext") or {}] + [c.get("securityContext") or {}
                                                       for c in containers]  # fmt: skip
    for profile in ("seccompProfile", "appArmorProfile"):
        if any((ctx.get(profile) or {}).get("type") == "Unconfined" for ctx in contexts):
            found.append(f'{profile} (securityContext.{profile}.type must not be "Unconfined")')
    if any(
        (ctx.get("seLinuxOptions") or {}).get("type", "") not in SELINUX_TYPES
        or (ctx.get("seLinuxOptions") or {}).get("user")
        or (ctx.get("seLinuxOptions") or {}).get("role")
        for ctx in contexts
    ):
        found.append("seLinuxOptions (only the container types may be set, no user or role)")
    if any(ctx.get("procMount") not in (None, "Default") for ctx in contexts[1:]):
        found.append('procMount (securityContext.procMount must be "Default")')
    sysctls = sorted(s.get("name", "") for s in (spec.get("securityContext") or {}).get("sysctls")
                     or [] if s.get("name") not in SAFE_SYSCTLS)  # fmt: skip
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
