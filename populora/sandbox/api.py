"""Records of the sandbox: what to run (``Program``), under which limits, and what came back.

The implementation (``populora.sandbox.executor.Sandbox``) runs every ``Program`` in its own
short-lived, resource-limited process. Nothing in this module executes anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Outcome.status values
OK = "ok"
ERROR = "error"  # the program raised, did not define the entry, had bad input or a syntax error
TIMEOUT = "timeout"  # wall-clock or CPU-time limit
MEMORY = "memory"  # address-space limit (MemoryError or allocation failure)
OUTPUT_TOO_LARGE = "output_too_large"  # a return value's repr or captured stdout over the limit
CRASHED = "crashed"  # killed by a signal, os._exit, sys.exit, or the child died otherwise
STATUSES = (OK, ERROR, TIMEOUT, MEMORY, OUTPUT_TOO_LARGE, CRASHED)


class SandboxLimitsError(ValueError):
    """A limit that is not a finite number in its range; ``key`` names it as ``sandbox.<field>``."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


# (field, smallest allowed value, whether the smallest value itself is allowed)
_RANGES = (
    ("workers", 0, True),  # 0 = one per CPU core
    ("wall_seconds", 0, False),
    ("cpu_seconds", 0, False),
    ("memory_mb", 0, False),
    ("max_processes", 0, True),
    ("max_output_chars", 0, False),
    ("max_stdout_chars", 0, True),
    ("max_file_bytes", 0, True),
)
_INTEGRAL = {"workers", "max_processes", "max_output_chars", "max_stdout_chars", "max_file_bytes"}
# The largest value of each field: above it a limit limits nothing or cannot be enforced (a typo such
# as ``--memory-mb 10**14`` made every program fail its setup, and a wall limit of 1e300 s overflowed
# the caller's select()).
LARGEST = {
    "workers": 4096,  # a lane and its fork servers per worker; far beyond any machine's cores
    "wall_seconds": 86_400,  # one day: also keeps every deadline the caller computes within time_t
    "cpu_seconds": 86_400,
    "memory_mb": 1 << 27,  # 128 TiB, the x86-64 user address space; RLIMIT_AS is in bytes (rlim_t)
    "max_processes": 4_194_304,  # the kernel's PID_MAX_LIMIT: no more processes can exist
    "max_output_chars": 1 << 26,  # an answer carries at most server.MAX_RESULT_BYTES (63 MiB)
    "max_stdout_chars": 1 << 24,  # the fork server's capture buffer holds 4 bytes per character
    "max_file_bytes": 1 << 30,  # the scratch tmpfs is 8x this, held in memory outside RLIMIT_AS
}


def _shown(value) -> str:
    """``repr(value)`` for an error message, at most 80 characters (an int of 10**5000 has no repr)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**60:
        return f"an integer of {len(str(abs(value))) if value.bit_length() < 14_000 else 'over 4,000'} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class SandboxLimits:
    """Resource limits of one untrusted program (all enforced by the operating system), and the
    number of programs run at once (``workers``).

    Every field is checked when the record is made (and again by ``Sandbox``): a limit must be a
    finite number in its range, never negative, zero (where zero would mean "nothing is valid"),
    NaN, infinite or above ``LARGEST`` (where it would limit nothing or could not be enforced); the
    error names the field as ``sandbox.<field>`` (``SandboxLimitsError``).
    """

    wall_seconds: float = 5.0  # whole program (all calls); the process group is killed after it
    cpu_seconds: int = 5  # RLIMIT_CPU (whole seconds; a fraction is rounded up)
    memory_mb: int = 512  # RLIMIT_AS of the child
    max_processes: int = 0  # extra processes/threads the child may create (RLIMIT_NPROC headroom)
    max_output_chars: int = 1000  # per returned value repr; larger -> output_too_large, never truncated
    max_stdout_chars: int = 10_000  # captured stdout/stderr; larger is cut (stdout is not an answer)
    max_file_bytes: int = 1_000_000  # RLIMIT_FSIZE inside the scratch directory
    network: bool = False  # False: a fresh network namespace where the platform allows it
    workers: int = 0  # programs run at once; 0 = one per CPU core

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> SandboxLimits:
        """Raise ``SandboxLimitsError`` naming the first field out of range; return self."""
        for name, low, inclusive in _RANGES:
            value = getattr(self, name)
            key = f"sandbox.{name}"
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SandboxLimitsError(key, f"must be a number, got {_shown(value)}")
            if isinstance(value, float) and not math.isfinite(value):  # an int of any size is finite
                raise SandboxLimitsError(key, f"must be finite, got {value!r}")
            if value < low or (value == low and not inclusive):
                bound = f">= {low}" if inclusive else f"> {low}"
                raise SandboxLimitsError(key, f"must be {bound}, got {_shown(value)}")
            if value > LARGEST[name]:
                raise SandboxLimitsError(key, f"must be <= {LARGEST[name]}, got {_shown(value)}")
            if name in _INTEGRAL and value != int(value):
                raise SandboxLimitsError(key, f"must be a whole number, got {value!r}")
        if not isinstance(self.network, bool):
            raise SandboxLimitsError("sandbox.network", f"must be true or false, got {self.network!r}")
        return self


@dataclass(frozen=True)
class Program:
    """One untrusted execution.

    ``source`` is executed as a fresh module. Then, unless ``entry`` is None, ``entry`` is looked up
    in that module and called once per item of ``calls``; each item is the text of a Python
    argument list made of literals (``"1, [2, 3]"`` -> ``f(1, [2, 3])``), parsed inside the
    child with ``ast.literal_eval``. ``stdin`` is fed to the program's standard input (for
    stdin/stdout problems, with ``entry=None``).

    ``hash_seed`` picks the fork servers that run it: servers started with that ``PYTHONHASHSEED``
    (a separate ``exec`` each, so with an address-space layout of their own). Without it,
    ``replica`` picks servers with that replica's fixed seed (``replica_hash_seed``), kept for the
    sandbox's lifetime. Running the same program under several seeds is how cross-process
    nondeterminism (set ordering under hash randomisation, ``id()``: the layout is drawn from the
    seed) is detected; the determinism check draws its seeds from (run seed, step, replica)
    (``populora/tasks/determinism.py``). A program's process has no clock and no entropy, so its
    outputs are a function of its code, its inputs and its seed (``docs/sandbox.md``).
    """

    source: str
    entry: str | None = "f"
    calls: tuple[str, ...] = ()
    stdin: str = ""
    replica: int = 0
    hash_seed: int | None = None


@dataclass
class Outcome:
    """What one ``Program`` did.

    ``values[i]`` is ``repr()`` of the return value of call ``i`` (all calls, in order, only when
    ``status == "ok"``). ``reason`` is None when ok, else machine-readable: ``syntax_error``,
    ``no_entry_function``, ``bad_input``, ``runtime_error:<ExceptionType>``, ``timeout``,
    ``memory``, ``output_too_large``, ``crashed:<detail>``.
    """

    status: str
    reason: str | None = None
    values: list[str] = field(default_factory=list)
    stdout: str = ""
    seconds: float = 0.0
    detail: str = ""  # human-readable extra (exception message, signal name), bounded
    # True only when the sandbox itself proves that the outcome is not the program's doing: its
    # fork server died, could not start or failed on it, no outcome was recorded, the child's
    # confinement failed before the program ran, or the host starved it (killed at the wall-clock
    # limit having never blocked, with less than half of that time on a CPU). See
    # ``results.classify``; a re-run at the check stage trusts nothing else (``tasks/checking.py``).
    infrastructure: bool = False

    @property
    def ok(self) -> bool:
        return self.status == OK
