"""Validation helpers shared by the population configs and the operator registry.

Ranges are written as intervals (``"[0, 1)"``, ``"(0, inf)"``) so that the same text is used to
check a value and to document it (``docs/operators.md``, ``populora evolve --list``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from populora.errors import ConfigError

__all__ = ["ConfigError", "Interval", "check_in", "coerce_number", "from_mapping", "interval"]


class Interval(NamedTuple):
    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool
    text: str

    def __contains__(self, x: object) -> bool:
        if not isinstance(x, (int, float)) or isinstance(x, bool) or math.isnan(x):
            return False
        above = x >= self.lo if self.lo_closed else x > self.lo
        below = x <= self.hi if self.hi_closed else x < self.hi
        return above and below


def interval(text: str) -> Interval:
    """Parse ``"[lo, hi)"``-style text; ``inf`` is allowed for an open end."""
    t = text.strip()
    if len(t) < 5 or t[0] not in "[(" or t[-1] not in "])" or "," not in t:
        raise ValueError(f"interval {text!r}: expected e.g. '[0, 1)'")
    lo_s, hi_s = (p.strip() for p in t[1:-1].split(","))
    return Interval(float(lo_s), float(hi_s), t[0] == "[", t[-1] == "]", t)


def check_in(where: str, key: str, value: Any, allowed: str | Interval) -> None:
    """Raise ConfigError unless ``value`` is a number in ``allowed``."""
    iv = interval(allowed) if isinstance(allowed, str) else allowed
    if value not in iv:
        raise ConfigError(f"{where}: {key} must be in {iv.text}, got {value!r}")


def coerce_number(where: str, key: str, value: Any, like: int | float) -> int | float:
    """``value`` as the type of ``like`` (int or float); strings from a command line are parsed."""
    want = int if isinstance(like, int) and not isinstance(like, bool) else float
    try:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, str):
            out = float(value.strip())
        else:
            out = float(value)
        if want is int:
            if out != int(out):
                raise ValueError
            return int(out)
        return out
    except (TypeError, ValueError):
        kind = "an integer" if want is int else "a number"
        raise ConfigError(f"{where}: {key} must be {kind}, got {value!r}") from None


def from_mapping(cls, section: str, data: Mapping[str, Any] | None):
    """Build the config dataclass ``cls`` from a plain mapping (e.g. an omegaconf section).

    Unknown keys are an error naming the section and the key, never silently ignored.
    """
    data = dict(data or {})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{section}: unknown key {unknown[0]!r} (known: {', '.join(sorted(names))})")
    return cls(**data)
