"""Sandboxed, parallel execution of untrusted Python programs (see ``docs/sandbox.md``)."""

from populora.sandbox.api import (
    CRASHED,
    ERROR,
    MEMORY,
    OK,
    OUTPUT_TOO_LARGE,
    STATUSES,
    TIMEOUT,
    Outcome,
    Program,
    SandboxLimits,
    SandboxLimitsError,
)
from populora.sandbox.executor import Sandbox, SandboxError
from populora.sandbox.naive import execute_naive

__all__ = [
    "CRASHED",
    "ERROR",
    "MEMORY",
    "OK",
    "OUTPUT_TOO_LARGE",
    "STATUSES",
    "TIMEOUT",
    "Outcome",
    "Program",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxLimitsError",
    "execute_naive",
]
