"""Optimizer state on disk without pickle: tensors in safetensors, the rest as tagged JSON.

An optimizer's ``state_dict()`` is a tree of dicts (AdamW's ``state`` is keyed by int parameter
indices), lists, tuples (``betas``), numbers, strings, booleans, ``None`` and tensors.
``save_state(stem, tree)`` writes the tensors to ``<stem>.safetensors`` and the tree, each tensor
replaced by its key, to ``<stem>.json``; ``load_state(stem)`` rebuilds the same tree. Reading
either file cannot run code (``torch.save`` is a pickle, and unpickling a crafted file can), so a
run directory from anywhere can be resumed safely.

safetensors stores flat ``{name: tensor}`` maps only and JSON has no tuples, int keys or NaN, so
the tree is written here in a small tagged form (every container is a one-key object)::

    {"dict": [[key, value], ...]}   {"list": [...]}   {"tuple": [...]}
    {"tensor": "t3"}                {"float": "nan" | "inf" | "-inf"}

and every other JSON value is a plain scalar. No library does this for us: ``torch.save`` is the
pickle we avoid, and ``torch.utils._pytree`` is private and has no file format.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch

TENSORS_SUFFIX = ".safetensors"
TREE_SUFFIX = ".json"
FORMAT = "populora-optimizer-state/1"
_CONTAINERS = ("dict", "list", "tuple")


class OptimizerStateError(ValueError):
    """An optimizer state file that cannot be written or read back (the message names the file)."""


def encode(tree: Any, tensors: dict[str, torch.Tensor], where: str = "state") -> Any:
    """The JSON form of ``tree``; its tensors are added to ``tensors`` under fresh keys ``t<N>``."""
    if tree is None or isinstance(tree, (bool, int, str)):
        return tree
    if isinstance(tree, float):
        return tree if math.isfinite(tree) else {"float": repr(tree)}
    if isinstance(tree, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = tree.detach().to("cpu").contiguous()
        return {"tensor": key}
    if isinstance(tree, dict):
        for k in tree:
            if not isinstance(k, (int, str)) or isinstance(k, bool):
                raise TypeError(f"{where}: dict key {k!r} is not an int or a string")
        return {"dict": [[k, encode(v, tensors, f"{where}[{k!r}]")] for k, v in tree.items()]}
    if isinstance(tree, (list, tuple)):
        kind = "tuple" if isinstance(tree, tuple) else "list"
        return {kind: [encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(tree)]}
    raise TypeError(f"{where}: cannot store a {type(tree).__name__} in an optimizer state")


def decode(node: Any, tensors: dict[str, torch.Tensor], where: str = "state") -> Any:
    """Inverse of :func:`encode`; ValueError naming the position of anything malformed."""
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError(f"{where}: expected a scalar or a one-key tagged object, got {str(node)[:60]!r}")
    (tag, body), = node.items()
    if tag == "tensor":
        if not isinstance(body, str) or body not in tensors:
            raise ValueError(f"{where}: tensor {body!r} is not in the tensor file")
        return tensors[body]
    if tag == "float":
        if body not in ("nan", "inf", "-inf"):
            raise ValueError(f"{where}: float {body!r} is not nan, inf or -inf")
        return float(body)
    if tag not in _CONTAINERS or not isinstance(body, list):
        raise ValueError(f"{where}: unknown tag {tag!r} (expected tensor, float, {', '.join(_CONTAINERS)})")
    if tag == "dict":
        out = {}
        for item in body:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], (int, str))):
                raise ValueError(f"{where}: a dict item must be [int or string key, value]")
            out[item[0]] = decode(item[1], tensors, f"{where}[{item[0]!r}]")
        return out
    items = [decode(v, tensors, f"{where}[{i}]") for i, v in enumerate(body)]
    return tuple(items) if tag == "tuple" else items


def save_state(stem: str | os.PathLike, tree: Any) -> list[Path]:
    """Write ``<stem>.safetensors`` and ``<stem>.json``; return the two paths."""
    from safetensors.torch import save_file

    stem = Path(stem)
    tensors: dict[str, torch.Tensor] = {}
    try:
        skeleton = encode(tree, tensors)
    except TypeError as e:
        raise OptimizerStateError(f"{stem}{TREE_SUFFIX}: {e}") from e
    tensor_file, tree_file = stem.with_name(stem.name + TENSORS_SUFFIX), stem.with_name(stem.name + TREE_SUFFIX)
    stem.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(tensor_file))
    tree_file.write_text(json.dumps({"format": FORMAT, "state": skeleton}, allow_nan=False), encoding="utf-8")
    return [tensor_file, tree_file]


def load_state(stem: str | os.PathLike) -> Any:
    """The tree saved by :func:`save_state`; OptimizerStateError naming the file when it is malformed."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    stem = Path(stem)
    tensor_file, tree_file = stem.with_name(stem.name + TENSORS_SUFFIX), stem.with_name(stem.name + TREE_SUFFIX)
    try:
        doc = json.loads(tree_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise OptimizerStateError(f"{tree_file}: unreadable ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "state" not in doc:
        raise OptimizerStateError(f"{tree_file}: not an optimizer state (expected format {FORMAT!r})")
    try:
        tensors = load_file(str(tensor_file))
    except (SafetensorError, OSError) as e:
        raise OptimizerStateError(f"{tensor_file}: unreadable safetensors file ({e})") from e
    try:
        return decode(doc["state"], tensors)
    except (ValueError, RecursionError) as e:
        raise OptimizerStateError(f"{tree_file}: {e}") from e
