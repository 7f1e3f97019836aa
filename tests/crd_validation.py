"""Validate rendered manifests against the upstream CRD schemas in ../shared/crds, strictly.

The CRD schemas do not forbid unknown fields (the API server prunes them), so on top of the JSON
Schema check this walks the object and refuses any field the schema does not define.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import jsonschema
import yaml

from tests.conftest import SHARED_DIR

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
OBJECT_META_FIELDS = {"name", "namespace", "labels", "annotations", "generateName"}
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Built-in kinds are not CRDs: the fields the Kubernetes API defines for the ones we render.
BUILTIN = {
    ("v1", "Namespace"): {
        "allowed": {"apiVersion", "kind", "metadata", "spec"},
        "required": {"metadata"},
        "namespaced": False,
    },
    ("scheduling.k8s.io/v1", "PriorityClass"): {
        "allowed": {
            "apiVersion",
            "kind",
            "metadata",
            "value",
            "globalDefault",
            "description",
            "preemptionPolicy",
        },
        "required": {"metadata", "value"},
        "namespaced": False,
    },
}


@functools.cache
def _crds() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) → {"schema": openAPIV3Schema, "namespaced": bool}."""
    out = {}
    for path in sorted(Path(SHARED_DIR, "crds").rglob("*.yaml")):
        # libyaml's parser when there is one: eight times faster on these files, same result.
        for doc in yaml.load_all(path.read_text(), Loader=SAFE_LOADER):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                out[key] = {
                    "schema": version["schema"]["openAPIV3Schema"],
                    "namespaced": spec["scope"] == "Namespaced",
                }
    return out


def _unknown_fields(obj, schema: dict, path: str) -> list[str]:
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    errors = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key, value in obj.items():
            where = f"{path}.{key}" if path else key
            if props is not None and key in props:
                errors += _unknown_fields(value, props[key], where)
            elif isinstance(additional, dict):
                errors += _unknown_fields(value, additional, where)
            elif props is not None or additional is False:
                errors.append(f"unknown field {where}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            errors += _unknown_fields(item, schema["items"], f"{path}[{i}]")
    return errors


def _metadata_errors(meta, *, namespaced: bool) -> list[str]:
    if not isinstance(meta, dict):
        return ["metadata must be an object"]
    errors = [f"unknown field metadata.{k}" for k in meta if k not in OBJECT_META_FIELDS]
    name = meta.get("name", "")
    if not DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        errors.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    if namespaced and not DNS1123_LABEL.match(meta.get("namespace", "")):
        errors.append("metadata.namespace missing or not a DNS-1123 label")
    if not namespaced and "namespace" in meta:
        errors.append("metadata.namespace set on a cluster-scoped object")
    for key, value in (meta.get("labels") or {}).items():
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            errors.append(f"label {key}={value!r} is not a valid label value")
    for value in (meta.get("annotations") or {}).values():
        if not isinstance(value, str):
            errors.append("annotation values must be strings")
    return errors


def manifest_errors(manifest: dict) -> list[str]:
    """Everything wrong with a manifest for its apiVersion/kind; [] when it is valid."""
    key = (manifest.get("apiVersion"), manifest.get("kind"))
    if key in BUILTIN:
        rule = BUILTIN[key]
        errors = [f"unknown field {k}" for k in manifest if k not in rule["allowed"]]
        errors += [f"missing required field {k}" for k in rule["required"] if k not in manifest]
        if "value" in rule["allowed"] and not isinstance(manifest.get("value"), int):
            errors.append("value must be an integer")
        return errors + _metadata_errors(manifest.get("metadata"), namespaced=rule["namespaced"])
    crd = _crds().get(key)
    if crd is None:
        # A built-in kind: the Kubernetes schema, as the official client's models carry it.
        from tests.deploy.k8s_schema import schema_errors

        return schema_errors(manifest)
    validator = jsonschema.Draft4Validator(crd["schema"])
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in validator.iter_errors(manifest)
    ]
    errors += _unknown_fields(
        {k: v for k, v in manifest.items() if k != "metadata"}, crd["schema"], ""
    )
    return errors + _metadata_errors(manifest.get("metadata"), namespaced=crd["namespaced"])


def assert_valid_manifest(manifest: dict) -> None:
    errors = manifest_errors(manifest)
    assert not errors, (
        f"{manifest.get('kind')} {manifest.get('metadata', {}).get('name')}: {errors}"
    )
