"""The add-ons' cluster objects (CRDs, webhook configurations, Kueue's visibility API), read
from the very Go modules the binaries were built from and turned to loopback.

Upstream installs each add-on with kustomize: webhooks and conversion webhooks name a Service
in the add-on's namespace and a certificate manager fills in the CA. Here each add-on runs as a
process on 127.0.0.1, so every `clientConfig.service` becomes `url: https://127.0.0.1:<port>
<path>` with our CA as `caBundle`. The kustomize patches that change webhooks (Kueue's
namespace selectors, JobSet's pod webhooks) are read from the same kustomization files and
applied here; nothing of upstream's is copied into the repository.
"""

from __future__ import annotations

import base64
import copy
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from cluster import build, components, credentials

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# libyaml's loader when PyYAML has it: Kueue's CRDs are megabytes of YAML.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_all(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [doc for doc in yaml.load_all(handle, Loader=_LOADER) if doc]


def ca_bundle(ca_cert: Path) -> str:
    return base64.b64encode(ca_cert.read_bytes()).decode()


def _loopback(client_config: dict, port: int, bundle: str) -> dict:
    path = (client_config.get("service") or {}).get("path") or client_config.get("path") or ""
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}


def loopback_webhooks(config: dict, *, name: str, port: int, bundle: str) -> dict:
    """A webhook configuration renamed and pointed at 127.0.0.1:port."""
    out = copy.deepcopy(config)
    out["metadata"] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "real-cluster"}}
    for webhook in out.get("webhooks") or []:
        webhook["clientConfig"] = _loopback(webhook["clientConfig"], port, bundle)
    return out


def loopback_conversion(crd: dict, *, port: int, bundle: str) -> dict:
    """A CRD whose conversion webhook (if it has one) is served on 127.0.0.1:port."""
    out = copy.deepcopy(crd)
    conversion = (out.get("spec") or {}).get("conversion") or {}
    if conversion.get("strategy") == "Webhook":
        webhook = conversion.setdefault("webhook", {})
        webhook["clientConfig"] = _loopback(webhook.get("clientConfig") or {}, port, bundle)
    return out


def _active_patch_paths(kustomization: dict) -> list[str]:
    return [p["path"] for p in kustomization.get("patches") or [] if "path" in p]


def _json_pointer_set(doc, pointer: str, value) -> None:
    """RFC 6901 pointer assignment (the replace/add operations kustomize's JSON patches use)."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.lstrip("/").split("/")]
    target = doc
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    last = parts[-1]
    if isinstance(target, list):
        if last == "-":
            target.append(value)
        else:
            target[int(last)] = value
    else:
        target[last] = value


def apply_json_patch(doc: dict, operations: list[dict]) -> dict:
    out = copy.deepcopy(doc)
    for op in operations:
        if op.get("op") not in ("replace", "add"):
            raise ValueError(f"unsupported JSON patch operation {op!r}")
        _json_pointer_set(out, op["path"], copy.deepcopy(op["value"]))
    return out


def crds_with_patches(crd_dir: Path) -> list[dict]:
    """The CRDs a kustomization lists, with its conversion-webhook patches merged in."""
    kustomization = yaml.safe_load((crd_dir / "kustomization.yaml").read_text(encoding="utf-8"))
    crds = {}
    for resource in kustomization.get("resources") or []:
        for doc in load_all(crd_dir / resource):
            crds[doc["metadata"]["name"]] = doc
    for patch_path in _active_patch_paths(kustomization):
        for patch in load_all(crd_dir / patch_path):
            conversion = (patch.get("spec") or {}).get("conversion")
            name = patch["metadata"]["name"]
            # Only the conversion patches: the CA-injection ones are a certificate manager's.
            if conversion and name in crds:
                crds[name]["spec"]["conversion"] = copy.deepcopy(conversion)
    return list(crds.values())


def _named_webhook(configs: list[dict], kind: str, name: str) -> dict | None:
    for config in configs:
        if config["kind"] != kind:
            continue
        for webhook in config.get("webhooks") or []:
            if webhook["name"] == name:
                return webhook
    return None


def webhooks_with_patches(webhook_dir: Path) -> list[dict]:
    """The webhook configurations of a kustomization with its patches and replacements: JSON
    patches (JobSet), strategic patches that add fields to webhooks by name, and replacements
    that copy a field from one webhook to others (Kueue's namespace selectors)."""
    kustomization = yaml.safe_load((webhook_dir / "kustomization.yaml").read_text(encoding="utf-8"))
    configs = [
        doc
        for resource in kustomization.get("resources") or []
        for doc in load_all(webhook_dir / resource)
        if doc.get("kind") in WEBHOOK_KINDS
    ]
    for entry in kustomization.get("patches") or []:
        patch_docs = (
            load_all(webhook_dir / entry["path"])
            if "path" in entry
            else list(yaml.safe_load_all(entry["patch"]))
        )
        target = entry.get("target") or {}
        for patch in patch_docs:
            if isinstance(patch, list):  # a JSON 6902 patch aimed by its target
                for i, config in enumerate(configs):
                    if config["kind"] == target.get("kind") and (
                        "name" not in target or config["metadata"]["name"] == target["name"]
                    ):
                        configs[i] = apply_json_patch(config, patch)
            elif patch and patch.get("kind") in WEBHOOK_KINDS:
                for hook in patch.get("webhooks") or []:
                    webhook = _named_webhook(configs, patch["kind"], hook["name"])
                    if webhook is not None:
                        webhook.update(copy.deepcopy(dict(hook.items())))
    for replacement in kustomization.get("replacements") or []:
        source = replacement["source"]
        field = source["fieldPath"]
        match = re.fullmatch(r"webhooks\.\[name=([^\]]+)\]\.(\w+)", field)
        if not match:
            raise ValueError(f"unsupported replacement source {field!r}")
        origin = _named_webhook(configs, source["kind"], match.group(1))
        value = (origin or {}).get(match.group(2))
        if value is None:
            continue
        for target in replacement.get("targets") or []:
            kind = target["select"]["kind"]
            for path in target.get("fieldPaths") or []:
                found = re.fullmatch(r"webhooks\.\[name=([^\]]+)\]\.(\w+)", path)
                if not found:
                    raise ValueError(f"unsupported replacement target {path!r}")
                webhook = _named_webhook(configs, kind, found.group(1))
                if webhook is not None:
                    webhook[found.group(2)] = copy.deepcopy(value)
    return configs


def _rename_namespace(obj, old: str, new: str):
    """Namespace names inside selectors, as kustomize's `namespace:` rewrites them."""
    if isinstance(obj, dict):
        return {k: _rename_namespace(v, old, new) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rename_namespace(v, old, new) for v in obj]
    return new if obj == old else obj


@dataclass(frozen=True)
class Addon:
    """What one add-on installs."""

    crds: list[dict]
    webhook_configurations: list[dict]
    extra: list[dict]


def kubebuilder_addon(
    components: Path,
    *,
    prefix: str,
    port: int,
    bundle: str,
    namespaces: tuple[tuple[str, str], ...] = (),
) -> Addon:
    """The CRDs and webhooks of a kubebuilder layout (config/components/{crd,webhook}), named
    with the prefix kustomize's namePrefix gives them, served on 127.0.0.1:port."""
    crds = [
        loopback_conversion(crd, port=port, bundle=bundle)
        for crd in crds_with_patches(components / "crd")
    ]
    hooks = []
    for config in webhooks_with_patches(components / "webhook"):
        for old, new in namespaces:
            config = _rename_namespace(config, old, new)
        hooks.append(
            loopback_webhooks(
                config, name=prefix + config["metadata"]["name"], port=port, bundle=bundle
            )
        )
    return Addon(crds, hooks, [])


def kueue(source: Path, *, port: int, visibility_port: int, bundle: str, namespace: str) -> Addon:
    """Kueue's CRDs, webhooks and visibility API (an ExternalName Service, so that the API
    server's aggregator reaches the visibility server on loopback)."""
    components = source / "config" / "components"
    addon = kubebuilder_addon(
        components,
        prefix="kueue-",
        port=port,
        bundle=bundle,
        namespaces=(("kueue-system", namespace),),
    )
    services = set()
    for path in sorted((components / "visibility").glob("apiservice_*.yaml")):
        for doc in load_all(path):
            spec = {k: v for k, v in doc["spec"].items() if k != "insecureSkipTLSVerify"}
            services.add(spec["service"]["name"])
            spec["service"] = {**spec["service"], "namespace": namespace, "port": visibility_port}
            spec["caBundle"] = bundle
            addon.extra.append({**doc, "metadata": {"name": doc["metadata"]["name"]}, "spec": spec})
    addon.extra[:0] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        }
        for service in sorted(services)
    ]
    return addon


def jobset(source: Path, *, port: int, bundle: str) -> Addon:
    return kubebuilder_addon(
        source / "config" / "components", prefix="jobset-", port=port, bundle=bundle
    )


def training_operator(source: Path, *, port: int, bundle: str, kinds: tuple[str, ...]) -> Addon:
    """The training operator's CRDs and validating webhooks of the job kinds it runs (its
    webhook server serves only those)."""
    base = source / "manifests" / "base"
    plurals = {kind.lower() + "s" for kind in kinds}
    crds = [
        crd
        for path in sorted((base / "crds").glob("kubeflow.org_*.yaml"))
        for crd in load_all(path)
        if crd["spec"]["names"]["plural"] in plurals
    ]
    hooks = []
    for config in webhooks_with_patches(base / "webhook"):
        config = copy.deepcopy(config)
        config["webhooks"] = [
            hook
            for hook in config.get("webhooks") or []
            if any(set(rule.get("resources") or []) & plurals for rule in hook.get("rules") or [])
        ]
        if config["webhooks"]:
            hooks.append(
                loopback_webhooks(config, name=config["metadata"]["name"], port=port, bundle=bundle)
            )
    return Addon(crds, hooks, [])


def kwok(source: Path, *, kinds: tuple[str, ...] = ("stages",)) -> Addon:
    """kwok's CRDs of the kinds it is told to read from the API server (its stages)."""
    bases = source / "kustomize" / "crd" / "bases"
    crds = [crd for kind in kinds for crd in load_all(bases / f"kwok.x-k8s.io_{kind}.yaml")]
    return Addon(crds, [], [])


NAMESPACES = ("kueue-system", "jobset-system", "kubeflow")


def install_set(ctx) -> list[Addon]:
    """What `up` installs for the add-ons of a start (a cluster.components.Context): Kueue's
    webhooks trust Kueue's own CA, the others the cluster CA."""
    ports, certs = ctx.ports, ctx.certs
    bundle = ca_bundle(certs.ca.cert)
    return [
        kueue(
            build.module_source("sigs.k8s.io/kueue"),
            port=ports.kueue_webhook,
            visibility_port=ports.kueue_visibility,
            bundle=ca_bundle(certs.kueue_ca.cert),
            namespace=credentials.KUEUE_NAMESPACE,
        ),
        jobset(build.module_source("sigs.k8s.io/jobset"), port=ports.jobset_webhook, bundle=bundle),
        training_operator(
            build.module_source("github.com/kubeflow/training-operator", "training-operator"),
            port=ports.training_webhook,
            bundle=bundle,
            kinds=components.TRAINING_KINDS,
        ),
        kwok(build.module_source("sigs.k8s.io/kwok")),
    ]
