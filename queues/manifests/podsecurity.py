"""Pod Security for the teams' namespaces and their jobs' pods (pure, no I/O).

A team's namespace is labelled for Kubernetes' Pod Security admission: the baseline standard is
enforced (privileged pods, host namespaces, hostPath volumes, added capabilities and the like
are refused by the API server), and the restricted standard is warned about and audited, so its
violations show without breaking jobs. The enforced version is pinned (POD_SECURITY_VERSION), so
a cluster upgrade does not tighten it unannounced; warnings and audit follow the newest.

Every pod the portal renders runs with the defaults a security review expects: no privilege
escalation, every capability dropped, the runtime's default seccomp profile, and no service
account token mounted (jobs do not talk to the API server).

A team a platform admin exempts (Team.pod_security_exempt, with a reason, audited) gets neither:
its namespace enforces nothing (still warned and audited) and its pods carry no defaults.
"""

from __future__ import annotations

from django.conf import settings

PSA_PREFIX = "pod-security.kubernetes.io"
BASELINE, RESTRICTED, PRIVILEGED = "baseline", "restricted", "privileged"


def namespace_labels(team) -> dict[str, str]:
    """The Pod Security admission labels of the team's namespace."""
    enforce = PRIVILEGED if team.pod_security_exempt else BASELINE
    return {
        f"{PSA_PREFIX}/enforce": enforce,
        f"{PSA_PREFIX}/enforce-version": settings.POD_SECURITY_VERSION,
        f"{PSA_PREFIX}/warn": RESTRICTED,
        f"{PSA_PREFIX}/warn-version": "latest",
        f"{PSA_PREFIX}/audit": RESTRICTED,
        f"{PSA_PREFIX}/audit-version": "latest",
    }


def secure_pod_spec(spec: dict, team) -> dict:
    """The pod spec with the security defaults set (unless the team is exempt); returns it."""
    if team.pod_security_exempt:
        return spec
    spec["automountServiceAccountToken"] = False
    pod = spec.setdefault("securityContext", {})
    pod.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    for container in spec.get("containers") or []:
        context = container.setdefault("securityContext", {})
        context.setdefault("allowPrivilegeEscalation", False)
        context.setdefault("capabilities", {"drop": ["ALL"]})
    return spec
