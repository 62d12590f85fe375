"""Run-config keys that moved, and how an old preset keeps its meaning.

A key that moved keeps working with a one-line ``FutureWarning`` naming the new key, so a user's
existing preset or command line never silently changes meaning. Setting both the old and the new
spelling of a key is an error naming both. Keys that were removed without a new home are not listed
here: they fail as unknown keys, naming the key.

The table maps an old dotted path (or a path prefix ending in ``.``) to its new place.
"""

from __future__ import annotations

import warnings
from typing import Any

RENAMED: dict[str, str] = {
    # `model:` and `lora:` became the policy layer's own section (one config type per concept)
    "model.name": "policy.model",
    "model.backend": "policy.engine",
    "model.device": "policy.device",
    "model.dtype": "policy.dtype",
    "model.max_batch_size": "policy.max_batch_size",
    "model.cpu_threads": "policy.cpu_threads",
    "model.gpu_memory_utilization": "policy.vllm.gpu_memory_utilization",
    "model.prompt_style": "tasks.prompt_style",
    "lora.": "policy.lora.",
    "rl.micro_batch_size": "policy.train_micro_batch",
    # the keys the policy layer's former BackendConfig took (documented as `policy.vllm_*`)
    "policy.kind": "policy.engine",
    "policy.vllm_": "policy.vllm.",
    "policy.optim.lr": "rl.lr",
    "policy.optim.betas": "rl.betas",
    "policy.optim.eps": "rl.adam_eps",
    "policy.optim.weight_decay": "rl.weight_decay",
    # a kind's own settings live in its section of the task environment (tasks.<kind>.<knob>)
    "tasks.code_f_inputs": "tasks.code_f.inputs",
    "tasks.code_f_shown": "tasks.code_f.shown",
}


# Keys that moved and whose values were renamed with them: old key -> (new key, {old value: new value}).
CONVERTED: dict[str, tuple[str, dict[Any, str]]] = {
    # issue 37: how a program runs on several inputs became one of three layouts; the layout a true
    # used to name (issue 32's: the first execution alone) has the semantics of `alone` everywhere now
    "tasks.isolated_calls": ("tasks.calls", {True: "alone", False: "together"}),
}


def converted(key: str, value: Any, where: str) -> tuple[str, Any] | None:
    """``(new key, new value)`` for a key of ``CONVERTED`` (warning once), else None; ValueError
    naming the key for a value it never had."""
    if key not in CONVERTED:
        return None
    target, values = CONVERTED[key]
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        value = value.strip().lower() == "true"
    if not isinstance(value, bool) or value not in values:
        raise ValueError(f"{where}: key {key!r} must be true or false, got {value!r}; it now reads as {target!r}")
    warnings.warn(f"{where}: key {key!r} is deprecated; {key}={str(value).lower()} now reads as "
                  f"{target}={values[value]}: rename it", FutureWarning, stacklevel=3)
    return target, values[value]


def new_key(key: str) -> str | None:
    """The current spelling of ``key`` if it moved, else None."""
    for old, new in RENAMED.items():
        if old.endswith((".", "_")) and key.startswith(old) and len(key) > len(old):
            return new + key[len(old):]
        if key == old:
            return new
    return None


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def _unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def _warn(where: str, old: str, new: str) -> None:
    warnings.warn(f"{where}: key {old!r} is deprecated; it now reads as {new!r} (same meaning): rename it",
                  FutureWarning, stacklevel=3)


def migrate_mapping(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` (a nested dict from a YAML file) with moved keys renamed; warns once per key."""
    if not isinstance(data, dict):
        return data
    flat = _flatten(data)
    if not any(new_key(k) or k in CONVERTED for k in flat):
        return data
    out: dict[str, Any] = {}
    moved: dict[str, str] = {}
    for key, value in flat.items():
        conversion = converted(key, value, where)
        if conversion is not None:
            target, value = conversion
            if target in out:
                raise ValueError(f"{where}: keys {key!r} and {target!r} both set {target!r}; keep only {target!r}")
            moved[target] = key
            out[target] = value
            continue
        target = new_key(key) or key
        if target in out:
            first = moved.get(target, target)
            raise ValueError(f"{where}: keys {first!r} and {key!r} both set {target!r}; keep only {target!r}")
        if target != key:
            _warn(where, key, target)
            moved[target] = key
        out[target] = value
    return _unflatten(out)


def migrate_overrides(overrides: list[str], where: str = "command-line overrides") -> list[str]:
    """``key=value`` overrides with moved keys renamed; warns once per key."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        conversion = converted(key.strip(), value, where) if sep else None
        if conversion is not None:
            out.append(f"{conversion[0]}={conversion[1]}")
            continue
        target = new_key(key.strip())
        if target:
            _warn(where, key.strip(), target)
            item = f"{target}{sep}{value}"
        out.append(item)
    return out
