"""Validation of custom resources against their CRD's OpenAPI v3 schema.

For each request the API server prunes null and unknown fields (or refuses unknown fields with
fieldValidation=Strict), applies schema defaults, validates with jsonschema, and evaluates
hand-written equivalents of the CEL rules (x-kubernetes-validations) the portal can hit.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from kubesim import resources
from kubesim.apply import KeysFor, default_keys_for
from kubesim.resources import ResourceType
from kubesim.store import BadRequest, deep_copy, invalid, to_storage

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Parsed CRD directories, shared by every server in the process (parsing takes ~0.25 s).
_CRD_CACHE: dict[tuple[str, float], dict[tuple[str, str, str], dict]] = {}
_CRD_CACHE_LOCK = threading.Lock()


def load_crd_schemas(directory: str | os.PathLike) -> dict[tuple[str, str, str], dict]:
    """{(group, version, plural): openAPIV3Schema} for every CRD YAML under directory."""
    root = Path(directory).resolve()
    files = sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
    stamp = max((p.stat().st_mtime for p in files), default=0.0)
    with _CRD_CACHE_LOCK:
        cached = _CRD_CACHE.get((str(root), stamp))
        if cached is not None:
            return cached
        out: dict[tuple[str, str, str], dict] = {}
        for path in files:
            with open(path) as fh:
                docs = list(yaml.load_all(fh, Loader=_Loader))
            for doc in docs:
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                for version in spec.get("versions", []):
                    schema = (version.get("schema") or {}).get("openAPIV3Schema")
                    if schema:
                        out[(spec["group"], version["name"], spec["names"]["plural"])] = schema
        _CRD_CACHE[(str(root), stamp)] = out
        return out


# ---------------------------------------------------------------------------------- conversion


_DROPPED_KEYWORDS = ("default", "description", "nullable", "example", "externalDocs")


def _to_jsonschema(node: Any) -> Any:
    """Turn a structural OpenAPI schema into something a Draft 4 validator understands."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in _DROPPED_KEYWORDS:
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: _to_jsonschema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = _to_jsonschema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [_to_jsonschema(sub) for sub in value]
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["type"] = ["integer", "string"]
    if node.get("nullable"):
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


class _Kind:
    """Compiled validation data for one group/version/plural."""

    def __init__(self, schema: dict):
        self.schema = schema
        self.validator = jsonschema.Draft4Validator(_to_jsonschema(schema))
        self._keys: dict[tuple[str, ...], tuple[str, ...] | None] = {}

    def keys_for(self, spath: tuple[str, ...], items: list) -> tuple[str, ...] | None:
        """Merge keys of the list at spath (x-kubernetes-list-map-keys); None when atomic."""
        if spath[:1] == ("metadata",):
            # Object metadata is not described by CRD schemas; use the built-in keys.
            return default_keys_for(spath, items)
        if spath not in self._keys:
            node: Any = self.schema
            for part in spath:
                if not isinstance(node, dict):
                    break
                if part == "[]":
                    node = node.get("items")
                else:
                    node = (node.get("properties") or {}).get(part) or node.get(
                        "additionalProperties"
                    )
            keys = None
            if isinstance(node, dict) and node.get("x-kubernetes-list-type") == "map":
                keys = tuple(node.get("x-kubernetes-list-map-keys") or ()) or None
            self._keys[spath] = keys
        return self._keys[spath]


# ------------------------------------------------------------------------------------- pruning


def _field(path: list) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _prune(value: Any, schema: dict, path: list, unknown: list[str], top: bool = False) -> None:
    """Drop null and unknown fields in place; record the unknown ones' paths."""
    if isinstance(value, dict):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields")
        embedded = schema.get("x-kubernetes-embedded-resource") or top
        for key in list(value):
            sub = value[key]
            if top and key in ("apiVersion", "kind", "metadata"):
                continue
            child = (props or {}).get(key)
            if child is None and isinstance(addl, dict):
                child = addl
            if sub is None and not (child or {}).get("nullable"):
                if child is not None or not preserve:
                    del value[key]
                continue
            if child is not None:
                _prune(sub, child, [*path, key], unknown)
            elif embedded and key in ("apiVersion", "kind", "metadata"):
                continue
            elif not preserve and addl is not True:
                unknown.append(_field([*path, key]))
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for n, item in enumerate(value):
            _prune(item, schema["items"], [*path, n], unknown)


def _default(value: Any, schema: dict) -> None:
    """Apply schema defaults in place (nested defaults apply inside defaulted objects too)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = deep_copy(sub["default"])
            if key in value:
                _default(value[key], sub)
        addl = schema.get("additionalProperties")
        if isinstance(addl, dict):
            for key, sub in value.items():
                if key not in props:
                    _default(sub, addl)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])


# ----------------------------------------------------------------------------------- validation


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(value)


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "integer" if isinstance(value, int) else "number"
    )


def _cause(error: jsonschema.ValidationError) -> list[dict]:
    path = list(error.absolute_path)
    field = _field(path)
    kind = error.validator
    if kind == "required":
        missing = [r for r in error.validator_value if r not in (error.instance or {})]
        return [
            {
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": _field([*path, r]),
            }
            for r in missing
        ]
    if kind == "enum":
        allowed = ", ".join(json.dumps(v) for v in error.validator_value if v is not None)
        msg = f"Unsupported value: {json.dumps(error.instance)}: supported values: {allowed}"
        return [{"reason": "FieldValueNotSupported", "message": msg, "field": field}]
    if kind in ("type", "anyOf") and _is_type_error(error):
        wanted = _wanted_types(error)
        got = _type_name(error.instance)
        msg = f'Invalid value: "{got}": {field} in body must be of type {wanted}: "{got}"'
        return [{"reason": "FieldValueTypeInvalid", "message": msg, "field": field}]
    msg = f"Invalid value: {_short(error.instance)}: {field} in body {error.message}"
    return [{"reason": "FieldValueInvalid", "message": msg, "field": field}]


def _is_type_error(error: jsonschema.ValidationError) -> bool:
    if error.validator == "type":
        return True
    return bool(error.context) and all(e.validator == "type" for e in error.context)


def _wanted_types(error: jsonschema.ValidationError) -> str:
    if error.validator == "type":
        v = error.validator_value
        return ",".join(v) if isinstance(v, list) else v
    return ",".join(str(e.validator_value) for e in error.context)


# ------------------------------------------------------------------------------ CEL equivalents

Check = Callable[[dict, dict | None], list[dict]]


def _cel(field: str, message: str, value: str = '"object"') -> dict:
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {value}: {message}",
        "field": field,
    }


def _resource_group_checks(spec: dict) -> list[dict]:
    causes = []
    for n, rg in enumerate(spec.get("resourceGroups") or []):
        covered = len(rg.get("coveredResources") or [])
        if any(len(f.get("resources") or []) != covered for f in rg.get("flavors") or []):
            causes.append(
                _cel(
                    f"spec.resourceGroups[{n}]",
                    "flavors must have the same number of resources as the coveredResources",
                )
            )
    return causes


def _check_cluster_queue(obj: dict, old: dict | None) -> list[dict]:
    spec = obj.get("spec") or {}
    causes = []
    if not spec.get("cohortName") and spec.get("resourceGroups"):
        borrowing = any(
            "borrowingLimit" in r
            for rg in spec["resourceGroups"]
            for f in rg.get("flavors") or []
            for r in f.get("resources") or []
        )
        if borrowing:
            causes.append(_cel("spec", "borrowingLimit must be nil when cohort is empty"))
    causes += _resource_group_checks(spec)
    pre = spec.get("preemption") or {}
    bwc = pre.get("borrowWithinCohort") or {}
    if pre.get("reclaimWithinCohort") == "Never" and bwc and bwc.get("policy") != "Never":
        causes.append(
            _cel(
                "spec.preemption", "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"
            )
        )
    ff = spec.get("flavorFungibility") or {}
    if "preference" in ff and not (
        ff.get("whenCanBorrow") == "TryNextFlavor" and ff.get("whenCanPreempt") == "TryNextFlavor"
    ):
        causes.append(
            _cel(
                "spec.flavorFungibility",
                "preference can only be set when both "
                "whenCanBorrow and whenCanPreempt are TryNextFlavor",
            )
        )
    return causes


def _check_cohort(obj: dict, old: dict | None) -> list[dict]:
    return _resource_group_checks(obj.get("spec") or {})


def _immutable(path: tuple[str, ...]) -> Check:
    def check(obj: dict, old: dict | None) -> list[dict]:
        if old is None:
            return []

        def at(o: dict) -> Any:
            for p in path:
                o = o.get(p) if isinstance(o, dict) else None
            return o

        if at(obj) != at(old):
            return [_cel(".".join(path), "field is immutable", _short(at(obj)))]
        return []

    return check


def _check_workload(obj: dict, old: dict | None) -> list[dict]:
    spec = obj.get("spec") or {}
    causes = []
    for n, ps in enumerate(spec.get("podSets") or []):
        if "minCount" in ps and ps["minCount"] > ps.get("count", 1):
            causes.append(
                _cel(f"spec.podSets[{n}]", "minCount should be positive and less or equal to count")
            )
    if spec.get("priorityClassRef") and "priority" not in spec:
        causes.append(_cel("spec", "priority should not be nil when priorityClassRef is set"))
    return causes


def _check_resource_flavor(obj: dict, old: dict | None) -> list[dict]:
    spec = obj.get("spec") or {}
    causes = []
    effects = ("NoSchedule", "PreferNoSchedule", "NoExecute")
    if any(t.get("effect") not in effects for t in spec.get("nodeTaints") or []):
        causes.append(
            _cel(
                "spec.nodeTaints",
                "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
                '"array"',
            )
        )
    for t in spec.get("tolerations") or []:
        if "key" not in t and t.get("operator") != "Exists":
            causes.append(
                _cel(
                    "spec.tolerations",
                    "operator must be Exists when 'key' is empty, "
                    "which means 'match all values and all keys'",
                    '"array"',
                )
            )
            break
    if spec.get("topologyName") and not spec.get("nodeLabels"):
        causes.append(_cel("spec", "at least one nodeLabel is required when topology is set"))
    old_spec = (old or {}).get("spec") or {}
    if old_spec.get("topologyName"):
        # Kueue keeps a topology-aware flavor's node selection and topology fixed.
        for name in ("nodeLabels", "tolerations", "topologyName"):
            if spec.get(name) != old_spec.get(name):
                causes.append(_cel("spec", f"{name} {'is' if name == 'topologyName' else 'are'} "
                                           "immutable when topologyName is set"))  # fmt: skip
    return causes


CEL_CHECKS: dict[tuple[str, str], list[Check]] = {
    (resources.KUEUE, "clusterqueues"): [_check_cluster_queue],
    (resources.KUEUE, "cohorts"): [_check_cohort],
    (resources.KUEUE, "localqueues"): [_immutable(("spec", "clusterQueue"))],
    (resources.KUEUE, "admissionchecks"): [_immutable(("spec", "controllerName"))],
    (resources.KUEUE, "topologies"): [_immutable(("spec", "levels"))],
    (resources.KUEUE, "workloads"): [_check_workload],
    (resources.KUEUE, "resourceflavors"): [_check_resource_flavor],
}


# --------------------------------------------------------------------------------------- facade


class Schemas:
    """Validation for the custom resources whose CRDs were loaded (nothing when no directory)."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self._raw = load_crd_schemas(directory) if directory else {}
        self._compiled: dict[tuple[str, str, str], _Kind] = {}
        self._lock = threading.Lock()

    def has(self, rt: ResourceType) -> bool:
        return (rt.group, rt.version, rt.plural) in self._raw

    def _kind(self, rt: ResourceType) -> _Kind | None:
        key = (rt.group, rt.version, rt.plural)
        kind = self._compiled.get(key)
        if kind is None and key in self._raw:
            with self._lock:
                kind = self._compiled.get(key)
                if kind is None:
                    kind = self._compiled[key] = _Kind(self._raw[key])
        return kind

    def keys_for(self, rt: ResourceType) -> KeysFor:
        """The list-merge keys for server-side apply on rt."""
        kind = self._kind(rt)
        return kind.keys_for if kind else default_keys_for

    def prune(self, rt: ResourceType, obj: dict, *, strict: bool = False) -> list[str]:
        """Drop unknown and null fields in place (no defaults); the warnings.

        Raises BadRequest for unknown fields when strict.
        """
        kind = self._kind(rt)
        if kind is None:
            return []
        unknown: list[str] = []
        _prune(obj, kind.schema, [], unknown, top=True)
        if unknown and strict:
            name = (obj.get("metadata") or {}).get("name") or ""
            causes = [
                {"reason": "FieldValueInvalid", "message": f'unknown field "{f}"', "field": f}
                for f in unknown
            ]
            raise _strict_error(rt, name, causes)
        return [f'unknown field "{f}"' for f in unknown]

    def admit(
        self,
        rt: ResourceType,
        obj: dict,
        old: dict | None = None,
        *,
        strict: bool = False,
        subresource: str | None = None,
    ) -> list[str]:
        """Prune, default and validate obj in place; the warnings; raises Invalid."""
        kind = self._kind(rt)
        name = (obj.get("metadata") or {}).get("name") or ""
        causes: list[dict] = []
        warnings: list[str] = []
        if kind is not None:
            warnings = self.prune(rt, obj, strict=strict)
            _default(obj, kind.schema)
            for error in kind.validator.iter_errors(obj):
                causes += _cause(error)
        storage = resources.storage_type(rt)
        checks = CEL_CHECKS.get(storage.storage_key, [])
        if checks and not causes and subresource != "status":
            stored = to_storage(rt, obj)
            stored_old = to_storage(rt, old) if old else None
            for check in checks:
                causes += check(stored, stored_old)
        if causes:
            causes.sort(key=lambda c: c.get("field", ""))
            raise invalid(rt, name, causes)
        return warnings


def _strict_error(rt: ResourceType, name: str, causes: list[dict]) -> Exception:
    # A real server reports strict field validation failures as 400 BadRequest, not 422.
    joined = ", ".join(c["message"] for c in causes)
    return BadRequest(f"strict decoding error: {joined}", rt=rt, name=name, causes=causes)
