"""The error of an invalid ``policy:`` setting, and the one-line checks that raise it.

Below ``config.py`` and the engine modules alike: an engine's own settings (its ``Config``, the
``policy.<engine>:`` section) validate with the same error type as the common keys, and
``config.py`` imports the engine modules to build ``PolicyConfig``, so this cannot live there.
"""

from __future__ import annotations

from typing import Any

from populora.errors import ConfigError


class PolicyConfigError(ConfigError):
    """A policy/backend setting is invalid; the message names the key and value."""


def need(cond: bool, key: str, msg: str) -> None:
    """Raise ``PolicyConfigError("<key> <msg>")`` unless ``cond``."""
    if not cond:
        raise PolicyConfigError(f"{key} {msg}")


def is_int(value: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)
