"""Kubernetes objects checked against the Kubernetes API's schema as the official client's
models carry it (generated from the API server's OpenAPI document): unknown fields refused,
required fields and types checked, as `kubectl apply --validate=strict` would."""

from __future__ import annotations

import re

from kubernetes import client

_LIST = re.compile(r"^list\[(.+)\]$", re.IGNORECASE)
_DICT = re.compile(r"^dict\(([^,]+), (.+)\)$|^Dict\[([^,]+), (.+)\]$")
_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float)}


def model_name(obj: dict) -> str:
    """apps/v1 Deployment -> V1Deployment; autoscaling/v2 HPA -> V2HorizontalPodAutoscaler."""
    version = obj["apiVersion"].split("/")[-1]
    return version[0].upper() + version[1:] + obj["kind"]


def schema_errors(obj: dict) -> list[str]:
    """What is wrong with obj for its kind ([] when it is valid)."""
    name = model_name(obj)
    if not hasattr(client.models, name):
        return [f"{obj.get('apiVersion')} {obj.get('kind')}: no such kind in Kubernetes"]
    errors: list[str] = []
    _walk(obj, name, obj["kind"], errors)
    if not errors:
        try:  # required fields and enums, as the client's models enforce them
            client.ApiClient()._ApiClient__deserialize(obj, name)
        except (ValueError, TypeError) as exc:
            errors.append(f"{obj['kind']}: {exc}")
    return errors


def _walk(value, type_name: str, path: str, errors: list[str]) -> None:
    if value is None or type_name in ("object", "datetime", "date"):
        return
    if type_name in _PRIMITIVES:
        if not isinstance(value, _PRIMITIVES[type_name]) or (
            type_name != "bool" and isinstance(value, bool)
        ):
            errors.append(f"{path}: expected {type_name}, got {type(value).__name__}")
        return
    if match := _LIST.match(type_name):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            _walk(item, match.group(1), f"{path}[{i}]", errors)
        return
    if match := _DICT.match(type_name):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map")
            return
        inner = match.group(2) or match.group(4)
        for key, item in value.items():
            _walk(item, inner, f"{path}.{key}", errors)
        return
    model = getattr(client.models, type_name)
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object ({type_name})")
        return
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    for key, item in value.items():
        if key not in by_json:
            errors.append(f"{path}: unknown field {key!r}")
            continue
        _walk(item, model.openapi_types[by_json[key]], f"{path}.{key}", errors)
