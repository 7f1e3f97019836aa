"""The job kinds Kueue manages in kubesim, as Kueue's integrations see them: where each keeps its
pod templates (one pod set per replica type), how it is suspended, and when it has finished.

- batch/v1 Job: one pod set "main" of min(parallelism, completions) pods.
- kubeflow.org/v1 PyTorchJob: a pod set per replica type (master, worker) of `replicas` pods,
  suspended by `spec.runPolicy.suspend`, finished by its Succeeded or Failed condition.
- jobset.x-k8s.io/v1alpha2 JobSet: a pod set per replicated job of replicas x parallelism pods,
  suspended by `spec.suspend`, finished by its Completed or Failed condition.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesim import resources


def _true(obj: dict, ctype: str) -> bool:
    return any(
        c.get("type") == ctype and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


@dataclass(frozen=True)
class Integration:
    rt: resources.ResourceType
    done: tuple[str, str]  # the owner's (succeeded, failed) condition types

    @property
    def kind(self) -> str:
        return self.rt.kind

    def finished(self, obj: dict) -> str:
        """ "Complete" or "Failed" once the owner has finished, else ""."""
        if _true(obj, self.done[0]):
            return "Complete"
        if _true(obj, self.done[1]):
            return "Failed"
        return ""

    def podsets(self, obj: dict) -> list[tuple[str, int, dict]]:
        """(pod set name, pod count, pod template) per pod set, templates as stored in obj."""
        spec = obj.get("spec") or {}
        if self.rt is resources.PYTORCHJOBS:
            return [
                (rtype.lower(), int(rs.get("replicas", 1)), rs.setdefault("template", {}))
                for rtype, rs in sorted(
                    (spec.get("pytorchReplicaSpecs") or {}).items(),
                    key=lambda item: (item[0] != "Master", item[0]),
                )
            ]
        if self.rt is resources.JOBSETS:
            out = []
            for rj in spec.get("replicatedJobs") or []:
                job_spec = (rj.get("template") or {}).get("spec") or {}
                per_job = int(job_spec.get("parallelism", 1))
                if job_spec.get("completions") is not None:
                    per_job = min(per_job, int(job_spec["completions"]))
                template = rj.setdefault("template", {}).setdefault("spec", {})
                out.append(
                    (rj["name"], int(rj.get("replicas", 1)) * per_job,
                     template.setdefault("template", {}))
                )  # fmt: skip
            return out
        count = int(spec["parallelism"]) if spec.get("parallelism") is not None else 1
        if spec.get("completions") is not None:
            count = min(count, int(spec["completions"]))
        return [("main", count, spec.setdefault("template", {}))]

    def suspended(self, obj: dict) -> bool:
        spec = obj.get("spec") or {}
        if self.rt is resources.PYTORCHJOBS:
            return bool((spec.get("runPolicy") or {}).get("suspend"))
        return bool(spec.get("suspend"))

    def set_suspend(self, obj: dict, value: bool) -> None:
        spec = obj.setdefault("spec", {})
        if self.rt is resources.PYTORCHJOBS:
            spec.setdefault("runPolicy", {})["suspend"] = value
        else:
            spec["suspend"] = value


BATCH_JOB = Integration(resources.JOBS, ("Complete", "Failed"))
PYTORCH_JOB = Integration(resources.PYTORCHJOBS, ("Succeeded", "Failed"))
JOB_SET = Integration(resources.JOBSETS, ("Completed", "Failed"))
INTEGRATIONS = (BATCH_JOB, PYTORCH_JOB, JOB_SET)
BY_KIND = {i.kind: i for i in INTEGRATIONS}


def for_resource(rt) -> Integration | None:
    """The integration of a resource type (any served version of it), or None."""
    return next((i for i in INTEGRATIONS if i.rt.storage_key == rt.storage_key), None)


def for_owner(ref: dict) -> Integration | None:
    """The integration an ownerReference points at, or None."""
    integration = BY_KIND.get(ref.get("kind", ""))
    if integration and ref.get("apiVersion") == integration.rt.api_version:
        return integration
    return None
