"""The registry of task kinds (``@register_kind``; ``get_kind(name)``; ``all_kinds()``)."""

from __future__ import annotations

_KINDS: dict = {}


def register_kind(cls):
    """Class decorator: one instance of the kind under ``cls.name``."""
    if cls.name in _KINDS:
        raise ValueError(f"task kind {cls.name!r} is registered twice")
    _KINDS[cls.name] = cls()
    return cls


def _load() -> None:
    """Import every kind module of this package (each registers itself); the package's other
    modules hold no kind."""
    import importlib
    import os
    import pkgutil

    for mod in pkgutil.iter_modules([os.path.dirname(__file__)]):
        if mod.name not in ("base", "registry", "compact"):
            importlib.import_module(f"{__package__}.{mod.name}")


def all_kinds() -> dict:
    """``{name: kind}`` of every kind module in this package, in the kinds' ``position`` order."""
    if not _KINDS:
        _load()
    return dict(sorted(_KINDS.items(), key=lambda kv: (kv[1].position, kv[0])))


def get_kind(name: str):
    kinds = all_kinds()
    if name not in kinds:
        raise ValueError(f"unknown task type {name!r}; expected one of {', '.join(kinds)}")
    return kinds[name]


def kind_names() -> tuple[str, ...]:
    return tuple(all_kinds())


def default_kind_names() -> tuple[str, ...]:
    """The kinds on by default (AZR's three: code_o, code_i, code_f)."""
    return tuple(n for n, k in all_kinds().items() if k.default_on)
