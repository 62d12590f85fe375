"""The error every configuration problem raises: ``ConfigError``, a ``ValueError`` whose message names
the file and/or the key and the value. The run config (``populora.config``) and the sections that
validate themselves (population, policy, tasks) raise it or a subclass, so a caller catches one type.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem; the message names the file and/or key (and the value)."""
