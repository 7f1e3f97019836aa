"""Patches and server-side apply: JSON merge patch, JSON patch, and field ownership (managedFields).

Field paths are tuples of FieldsV1 tokens: ``"f:<field>"`` for a map field, ``"k:<json>"`` for the
item of a list of maps identified by its key fields, and ``"."`` for that list item itself.
Lists are merged by key when `keys_for` names key fields for them, and are atomic otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubesim.store import BadRequest, Conflict, Invalid, deep_copy

Path = tuple[str, ...]
KeysFor = Callable[[tuple[str, ...], list], tuple[str, ...] | None]

_MISSING = object()

# Lists of maps that Kubernetes merges by key, by field name (for kinds without a CRD schema).
DEFAULT_LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "imagePullSecrets": ("name",),
    "ports": ("containerPort", "port", "protocol"),
    "conditions": ("type",),
    "ownerReferences": ("uid",),
    "flavors": ("name",),
    "resources": ("name",),
    "podSets": ("name",),
    "tasks": ("name",),
    "resourceGroups": (),  # atomic in Kueue's schema
}

# Metadata the API server owns; never tracked as managed fields nor taken from a patch.
SYSTEM_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)


def default_keys_for(spath: tuple[str, ...], items: list) -> tuple[str, ...] | None:
    """Key fields for a list of maps, from DEFAULT_LIST_KEYS; None means atomic."""
    if not spath or not all(isinstance(i, dict) for i in items):
        return None
    keys = DEFAULT_LIST_KEYS.get(spath[-1])
    return keys or None


# ------------------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (returns a new value; null deletes a key)."""
    if not isinstance(patch, dict):
        return deep_copy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# Merge keys of the built-in lists that strategic merge patch merges item by item
# (patchMergeKey in the Kubernetes API types); other lists are replaced.
STRATEGIC_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "resourceClaims": "name",
}
# Lists of scalars that strategic merge patch treats as sets.
STRATEGIC_MERGE_SETS = ("finalizers",)


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge patch for built-in kinds: a merge patch whose known lists merge by key.

    Supports `$patch: delete` on list items and `$patch: replace` on maps; other directives
    ($retainKeys, $setElementOrder, $deleteFromPrimitiveList) are ignored.
    """
    if isinstance(patch, dict):
        directive = patch.get("$patch")
        body = {k: v for k, v in patch.items() if not k.startswith("$")}
        if directive == "replace":
            return deep_copy(body)
        if directive == "delete":
            return None
        out = dict(target) if isinstance(target, dict) else {}
        for key, value in body.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = strategic_merge_patch(out.get(key), value, key)
        return out
    if isinstance(patch, list) and isinstance(target, list):
        key = STRATEGIC_MERGE_KEYS.get(field)
        if key and all(isinstance(i, dict) for i in patch + target):
            out = list(target)
            for item in patch:
                idx = next((n for n, i in enumerate(out) if i.get(key) == item.get(key)), None)
                if item.get("$patch") == "delete":
                    if idx is not None:
                        del out[idx]
                elif idx is None:
                    out.append(strategic_merge_patch(None, item, ""))
                else:
                    out[idx] = strategic_merge_patch(out[idx], item, "")
            return out
        if field in STRATEGIC_MERGE_SETS:
            return target + [i for i in patch if i not in target]
    return deep_copy(patch)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise BadRequest(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, tokens: list[str]) -> Any:
    for tok in tokens:
        if isinstance(doc, dict):
            if tok not in doc:
                raise _patch_error(f"path element {tok!r} does not exist")
            doc = doc[tok]
        elif isinstance(doc, list):
            doc = doc[_index(doc, tok, allow_end=False)]
        else:
            raise _patch_error(f"cannot descend into a scalar at {tok!r}")
    return doc


def _index(lst: list, tok: str, *, allow_end: bool) -> int:
    if tok == "-" and allow_end:
        return len(lst)
    if not tok.isdigit():
        raise _patch_error(f"invalid array index {tok!r}")
    idx = int(tok)
    if idx > len(lst) or (idx == len(lst) and not allow_end):
        raise _patch_error(f"array index {idx} out of bounds")
    return idx


def _patch_error(message: str) -> Invalid:
    return Invalid(f"the server rejected our request due to an error in our request: {message}")


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test); returns a new document."""
    if not isinstance(operations, list):
        raise BadRequest("a JSON patch must be a list of operations")
    doc = deep_copy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise BadRequest(f"invalid JSON patch operation {op!r}")
        kind = op["op"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise BadRequest(f"JSON patch operation {kind!r} needs a value")
        if kind == "test":
            if _walk(doc, _pointer(op["path"])) != op["value"]:
                raise _patch_error(f"test operation failed at {op['path']}")
            continue
        if kind in ("move", "copy"):
            value = deep_copy(_walk(doc, _pointer(op["from"])))
            if kind == "move":
                doc = _remove(doc, _pointer(op["from"]))
            doc = _add(doc, _pointer(op["path"]), value)
        elif kind == "add":
            doc = _add(doc, _pointer(op["path"]), deep_copy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, _pointer(op["path"]))
        elif kind == "replace":
            doc = _remove(doc, _pointer(op["path"]))
            doc = _add(doc, _pointer(op["path"]), deep_copy(op["value"]))
        else:
            raise BadRequest(f"unknown JSON patch operation {kind!r}")
    return doc


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise _patch_error(f"cannot add below a scalar at {last!r}")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return None
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _patch_error(f"path element {last!r} does not exist")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, allow_end=False)]
    else:
        raise _patch_error(f"cannot remove below a scalar at {last!r}")
    return doc


# ------------------------------------------------------------------------------------ field sets


def _key_token(item: dict, keys: tuple[str, ...]) -> str:
    key = {k: item[k] for k in keys if k in item}
    return "k:" + json.dumps(key, sort_keys=True, separators=(",", ":"))


def _fields(value: Any, prefix: Path, spath: tuple[str, ...], keys_for: KeysFor, out: set) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _fields(v, (*prefix, "f:" + k), (*spath, k), keys_for, out)
        return
    if isinstance(value, list) and value:
        keys = keys_for(spath, value)
        if keys:
            for item in value:
                token = _key_token(item, keys)
                out.add((*prefix, token, "."))
                for k, v in item.items():
                    _fields(v, (*prefix, token, "f:" + k), (*spath, "[]", k), keys_for, out)
            return
    if prefix:
        out.add(prefix)


def fields_of(obj: dict, keys_for: KeysFor, *, subresource: str | None, has_status: bool) -> set:
    """The managed field paths of obj (status only for the status subresource)."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if subresource == "status":
            if key == "status":
                _fields(value, ("f:status",), ("status",), keys_for, out)
            continue
        if key == "status" and has_status:
            continue
        if key == "metadata" and isinstance(value, dict):
            for mk, mv in value.items():
                if mk in SYSTEM_METADATA or mk in ("name", "namespace", "generateName"):
                    continue
                _fields(mv, ("f:metadata", "f:" + mk), ("metadata", mk), keys_for, out)
            continue
        _fields(value, ("f:" + key,), (key,), keys_for, out)
    return out


def to_fields_v1(paths: set) -> dict:
    """Nested FieldsV1 form of a set of paths."""
    root: dict = {}
    for path in sorted(paths):
        node = root
        for tok in path:
            node = node.setdefault(tok, {})
    return root


def from_fields_v1(tree: dict, prefix: Path = ()) -> set:
    """Inverse of to_fields_v1."""
    out: set[Path] = set()
    for tok, sub in (tree or {}).items():
        if tok == ".":
            out.add((*prefix, "."))
        elif sub:
            out |= from_fields_v1(sub, (*prefix, tok))
        else:
            out.add((*prefix, tok))
    return out


def _match_key(item: Any, token: str) -> bool:
    if not isinstance(item, dict):
        return False
    key = json.loads(token[2:])
    return all(item.get(k) == v for k, v in key.items())


def value_at(obj: Any, path: Path) -> Any:
    """The value at path, or _MISSING."""
    cur = obj
    for tok in path:
        if tok == ".":
            return cur
        if tok.startswith("f:"):
            if not isinstance(cur, dict) or tok[2:] not in cur:
                return _MISSING
            cur = cur[tok[2:]]
        else:
            if not isinstance(cur, list):
                return _MISSING
            cur = next((i for i in cur if _match_key(i, tok)), _MISSING)
            if cur is _MISSING:
                return _MISSING
    return cur


def remove_path(obj: Any, path: Path) -> None:
    """Delete the field or list item at path from obj (in place; missing paths are ignored)."""
    if path and path[-1] == ".":
        parent = value_at(obj, path[:-2])
        if isinstance(parent, list):
            parent[:] = [i for i in parent if not _match_key(i, path[-2])]
        return
    parent = value_at(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1][2:], None)


# ------------------------------------------------------------------------------- managed fields


def _entries(obj: dict) -> list[dict]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def _entry_key(entry: dict) -> tuple[str, str, str]:
    return (entry.get("manager", ""), entry.get("operation", ""), entry.get("subresource", ""))


def _set_entries(obj: dict, entries: list[dict]) -> None:
    entries = [e for e in entries if e.get("fieldsV1")]
    meta = obj.setdefault("metadata", {})
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)


def _entry(manager: str, operation: str, api_version: str, now: str, sub: str | None, paths: set):
    entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    }
    if sub:
        entry["subresource"] = sub
    return entry


def _merge(live: Any, cfg: Any, spath: tuple[str, ...], keys_for: KeysFor) -> Any:
    if isinstance(cfg, dict) and isinstance(live, dict):
        out = dict(live)
        for k, v in cfg.items():
            if v is None:
                continue
            out[k] = _merge(live[k], v, (*spath, k), keys_for) if k in live else deep_copy(v)
        return out
    if isinstance(cfg, list) and isinstance(live, list):
        keys = keys_for(spath, cfg) if all(isinstance(i, dict) for i in live) else None
        if keys:
            out = list(live)
            for item in cfg:
                token = _key_token(item, keys)
                idx = next((n for n, i in enumerate(out) if _match_key(i, token)), None)
                if idx is None:
                    out.append(deep_copy(item))
                else:
                    out[idx] = _merge(out[idx], item, (*spath, "[]"), keys_for)
            return out
    return deep_copy(cfg)


def apply(
    live: dict | None,
    config: dict,
    *,
    manager: str,
    force: bool,
    api_version: str,
    now: str,
    keys_for: KeysFor,
    has_status: bool,
    subresource: str | None = None,
) -> dict:
    """Server-side apply of config by manager onto live (None when creating); the new object.

    Raises Conflict (with one cause per field) when another manager owns a field config sets
    to a different value, unless force, in which case ownership moves to manager.
    """
    live = live or {}
    applied = fields_of(config, keys_for, subresource=subresource, has_status=has_status)
    me = (manager, "Apply", subresource or "")
    entries = _entries(live)
    owned = {_entry_key(e): from_fields_v1(e.get("fieldsV1") or {}) for e in entries}
    previous = owned.get(me, set())

    conflicts = []
    for key, paths in owned.items():
        if key == me:
            continue
        for path in sorted(paths & applied):
            if path[-1] == ".":
                continue
            if value_at(config, path) != value_at(live, path):
                conflicts.append((key[0], path))
    if conflicts and not force:
        raise _apply_conflict(conflicts, api_version)
    if conflicts:
        taken = {path for _, path in conflicts}
        for key in owned:
            if key != me:
                owned[key] = owned[key] - taken

    merged = _merge(deep_copy(live), config, (), keys_for)
    others = set().union(*(p for k, p in owned.items() if k != me)) if owned else set()
    for path in sorted(previous - applied, key=len, reverse=True):
        if any(a[: len(path)] == path for a in applied):
            continue  # still set, now with fields inside (an empty map given content)
        if not any(o[: len(path)] == path for o in others):
            remove_path(merged, path)

    new_entries = []
    seen = False
    for e in entries:
        key = _entry_key(e)
        if key == me:
            seen = True
            if applied == previous:
                new_entries.append(e)
            else:
                new_entries.append(_entry(manager, "Apply", api_version, now, subresource, applied))
        elif owned[key] != from_fields_v1(e.get("fieldsV1") or {}):
            new_entries.append({**e, "fieldsV1": to_fields_v1(owned[key])})
        else:
            new_entries.append(e)
    if not seen:
        new_entries.append(_entry(manager, "Apply", api_version, now, subresource, applied))
    _set_entries(merged, new_entries)
    return merged


def _apply_conflict(conflicts: list[tuple[str, Path]], api_version: str) -> Conflict:
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{manager}" using {api_version}',
            "field": _dotted(path),
        }
        for manager, path in conflicts
    ]
    n = len(causes)
    listed = "; ".join(f"{c['message']}: {c['field']}" for c in causes)
    return Conflict(
        f"Apply failed with {n} conflict{'s' if n > 1 else ''}: {listed}", causes=causes
    )


def _dotted(path: Path) -> str:
    out = ""
    for tok in path:
        if tok.startswith("f:"):
            out += "." + tok[2:]
        elif tok.startswith("k:"):
            out += "[" + tok[2:] + "]"
    return out


def record_update(
    old: dict | None,
    new: dict,
    *,
    manager: str,
    api_version: str,
    now: str,
    keys_for: KeysFor,
    has_status: bool,
    subresource: str | None = None,
) -> dict:
    """Record in new's managedFields that manager (operation Update) set what changed from old."""
    old = old or {}
    new_fields = fields_of(new, keys_for, subresource=subresource, has_status=has_status)
    old_fields = fields_of(old, keys_for, subresource=subresource, has_status=has_status)
    changed = {p for p in new_fields if value_at(old, p) != value_at(new, p)}
    removed = old_fields - new_fields
    entries = _entries(old)
    if not changed and not removed:
        _set_entries(new, entries)
        return new
    me = (manager, "Update", subresource or "")
    out = []
    seen = False
    for e in entries:
        key = _entry_key(e)
        paths = from_fields_v1(e.get("fieldsV1") or {})
        if key == me:
            seen = True
            mine = (paths | changed) - removed
            out.append(_entry(manager, "Update", api_version, now, subresource, mine))
            continue
        kept = paths - changed - removed
        out.append(e if kept == paths else {**e, "fieldsV1": to_fields_v1(kept)})
    if not seen:
        out.append(_entry(manager, "Update", api_version, now, subresource, changed))
    _set_entries(new, out)
    return new
