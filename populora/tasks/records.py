"""Records of the AZR task environment: proposals, tasks, attempts, and rejection reasons.

The task types are task kinds (``populora.tasks.kinds``: ``code_o`` deduction, ``code_i`` abduction,
``code_f`` induction, ``code_e`` error prediction). A task of a kind with one input has ``input`` and
``output``; an induction task has ``inputs``, ``outputs``, a ``message`` and ``n_shown``: the first
``n_shown`` pairs are shown to the student, the rest are hidden and decide correctness.

Inputs and outputs are kept as text: an input is the text of a Python argument list of literals
(``"1, [2, 3]"`` means ``f(1, [2, 3])``) and an output is the ``repr`` of the returned value.

All records serialise to plain JSON (``to_json`` / ``from_json``) for buffers and checkpoints. They are
plain data: whether a record's ``type`` names a registered kind is checked where records come in
(the buffers, the command line), by the kinds' registry.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

# The names of AZR's three task types (the kinds that are on by default); code that must not depend on
# a kind's name asks ``populora.tasks.kinds`` instead.
CODE_O = "code_o"
CODE_I = "code_i"
CODE_F = "code_f"

# The teacher id of the tasks the buffers start with (``seeds.py``): no member wrote them.
SEED_TEACHER = "seed"

# --- machine-readable reasons --------------------------------------------------------------------
# A rejected proposal or a failed attempt carries one of these (or a parametrised form below).
FORMAT = "format"  # the completion lacks the expected <answer> block / fenced blocks / grammar
SYNTAX_ERROR = "syntax_error"  # the program does not parse
NO_ENTRY_FUNCTION = "no_entry_function"  # no top-level ``def f``
BAD_INPUT = "bad_input"  # an input is not an argument list of Python literals
DUPLICATE_INPUTS = "duplicate_inputs"  # code_f: two proposed inputs are the same value
TOO_FEW_INPUTS = "too_few_inputs"  # code_f: fewer distinct inputs than required
NONDETERMINISTIC = "nondeterministic"  # the two independent executions disagree
TIMEOUT = "timeout"
MEMORY = "memory"
OUTPUT_TOO_LARGE = "output_too_large"  # an output repr is over the limit (never truncated)
NOT_LITERAL = "not_literal"  # code_o/code_i output that ``ast.literal_eval`` cannot read back
WRONG = "wrong"  # attempt: well formed but not equal to the gold answer
# infrastructure losses (not the model's fault: no reward, not trained on, counted apart)
SANDBOX_ERROR = "sandbox_error"  # the verifier itself failed (not the program under test)
GENERATION_ERROR = "generation_error"  # the engine gave no usable completion (failed call, aborted)
REASONS = (
    FORMAT,
    SYNTAX_ERROR,
    NO_ENTRY_FUNCTION,
    BAD_INPUT,
    DUPLICATE_INPUTS,
    TOO_FEW_INPUTS,
    NONDETERMINISTIC,
    TIMEOUT,
    MEMORY,
    OUTPUT_TOO_LARGE,
    NOT_LITERAL,
    WRONG,
    SANDBOX_ERROR,
    GENERATION_ERROR,
)


def banned(name: str) -> str:
    """Reason for a program that uses a banned module, name or attribute: ``banned:<name>``."""
    return f"banned:{name}"


def runtime_error(exc_type: str) -> str:
    """Reason for a program that raised: ``runtime_error:<ExceptionType>``."""
    return f"runtime_error:{exc_type}"


# The families of reasons (the part before ``:``). Metric names are built from these
# (``teacher/reject/<kind>``), so ``reason_kind`` returns only members of this fixed set.
BANNED_KIND = "banned"
RUNTIME_ERROR_KIND = "runtime_error"
CRASHED_KIND = "crashed"
BAD_LINE = "bad_line"  # a CLI input line that could not be read (too deep, too long, not UTF-8)
# the checker refuses a task whose gold was computed under other sandbox limits than its own:
# ``limits_changed:<field>`` names the first field of ``GoldLimits`` that differs (a fixed set)
LIMITS_CHANGED_KIND = "limits_changed"
OTHER_KIND = "other"  # any reason outside the known families
REASON_KINDS = (*REASONS, BANNED_KIND, RUNTIME_ERROR_KIND, CRASHED_KIND, BAD_LINE, LIMITS_CHANGED_KIND, OTHER_KIND)
_REASON_KINDS = frozenset(REASON_KINDS)


def limits_changed(field_name: str) -> str:
    """Reason for an answer the checker refuses to judge: the task's gold was computed under another
    value of the sandbox limit ``field_name`` (one of ``GoldLimits``' fields)."""
    return f"{LIMITS_CHANGED_KIND}:{field_name}"


def reason_kind(reason: str | None) -> str | None:
    """The family of a reason (``banned:os`` -> ``banned``), for counting rejections.

    Always a member of ``REASON_KINDS`` (None for no reason): a reason of an unknown family,
    however long or strange its text, counts as ``other``.
    """
    if reason is None:
        return None
    kind = str(reason).split(":", 1)[0]
    return kind if kind in _REASON_KINDS else OTHER_KIND


LARGEST_COUNT = (1 << 63) - 1  # a count in a record (a step, ``n_shown``, a token id) fits 64 bits


class RecordFieldError(ValueError):
    """A field of a record read from JSON that does not have its type; ``field`` names it."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"'{field_name}' {message}")
        self.field = field_name
        self.message = message


def _kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= LARGEST_COUNT


# What a field's annotation requires of a value read from JSON (the records' annotations are text:
# ``from __future__ import annotations``); fields of other types are the record's own business.
_FIELD_RULES = {
    "str": (lambda v: isinstance(v, str), "must be a string"),
    "str | None": (lambda v: v is None or isinstance(v, str), "must be a string or null"),
    "int": (_is_count, f"must be a whole number in [0, {LARGEST_COUNT}]"),
    "bool": (lambda v: isinstance(v, bool), "must be true or false"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
              "must be a finite number"),
}
_ITEM_RULES = {  # list fields: what each item must be
    "tuple[str, ...]": (lambda v: isinstance(v, str), "must be a list of strings"),
    "tuple[int, ...]": (_is_count, f"must be a list of whole numbers in [0, {LARGEST_COUNT}]"),
}


def _field_problem(annotation: str, value: Any) -> str | None:
    """Why ``value`` cannot be a field annotated ``annotation``, or None."""
    rule = _FIELD_RULES.get(annotation)
    if rule is not None:
        return None if rule[0](value) else f"{rule[1]}, got {_kind_of(value)}"
    items = _ITEM_RULES.get(annotation)
    if items is None:
        return None
    if not isinstance(value, (list, tuple)):
        return f"{items[1]}, got {_kind_of(value)}"
    bad = next((i for i, item in enumerate(value) if not items[0](item)), None)
    return None if bad is None else f"{items[1]}, got {_kind_of(value[bad])} at [{bad}]"


class _JsonRecord:
    """JSON (de)serialisation shared by the records: tuples become lists and back.

    ``from_json`` reads outside data (checkpoints, buffers, command-line corpora): every field must
    have its annotated type (a string is a string, a count a whole number that fits 64 bits, a float
    finite), or ``RecordFieldError`` names the field; a value never reaches the sandbox as something
    else (a list of numbers as inputs made the child exit 123)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, data: dict[str, Any]):
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}.from_json: a JSON object is needed, got {_kind_of(data)}")
        known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - set(known)
        if unknown:
            shown = sorted(str(k)[:40] for k in unknown)[:5]
            raise ValueError(f"{cls.__name__}.from_json: unknown keys {shown}")
        kwargs = {}
        for name, value in data.items():
            problem = _field_problem(str(known[name].type), value)
            if problem is not None:
                raise RecordFieldError(name, problem)
            if isinstance(value, list) and "tuple" in str(known[name].type):
                value = tuple(value)
            kwargs[name] = value
        return cls(**kwargs)


@dataclass(frozen=True)
class Proposal(_JsonRecord):
    """A teacher's raw output, parsed but not yet validated.

    For ``code_o``/``code_i``: ``program`` and one input in ``inputs``. For ``code_f``: the program given
    to the teacher (from the buffer), the proposed ``inputs`` and the ``message``. ``reason`` is
    ``"format"`` when the completion could not be parsed (the other fields may then be empty).
    """

    type: str
    program: str
    inputs: tuple[str, ...] = ()
    message: str = ""
    teacher_id: str = ""
    step: int = 0
    completion: str = ""
    reason: str | None = None


@dataclass(frozen=True)
class GoldLimits(_JsonRecord):
    """The sandbox limits a task's gold outputs were computed under: every limit that can change a
    program's outcome (a timeout, ``MemoryError``, a refused fork or file write, an output too large,
    a reachable network). Not ``workers`` (how many run at once) nor ``max_stdout_chars`` (captured
    output past it is dropped; stdout is no answer). The checker judges a task only under the same
    limits (``checking.check_and_rerun``): a gold that depends on ``memory_mb`` is never compared
    with a student's answer run under another one."""

    wall_seconds: float
    cpu_seconds: float
    memory_mb: int
    max_processes: int
    max_output_chars: int
    max_file_bytes: int
    network: bool

    @classmethod
    def of(cls, limits: Any) -> GoldLimits | None:
        """The gold limits of a ``SandboxLimits`` (anything with those attributes), None for None or
        for a sandbox that has no limits to say (a test double)."""
        if limits is None or not all(hasattr(limits, f.name) for f in fields(cls)):
            return None
        return cls(float(limits.wall_seconds), float(limits.cpu_seconds), int(limits.memory_mb),
                   int(limits.max_processes), int(limits.max_output_chars), int(limits.max_file_bytes),
                   bool(limits.network))

    def first_difference(self, other: GoldLimits) -> str | None:
        """The first field whose value differs from ``other``'s, or None when they agree."""
        return next((f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)), None)


@dataclass(frozen=True)
class Task(_JsonRecord):
    """A validated task. ``input``/``output`` for code_o/code_i; ``inputs``/``outputs`` for code_f.

    ``limits``: the sandbox limits its gold outputs were computed under (``GoldLimits``; issue 37).
    None for a task validated without them: records written before issue 37 (buffers, checkpoints,
    task logs) and tasks made by hand; the checker judges those under its own limits, as it always
    did, and in a run the check stage's re-run recomputes their gold under them."""

    id: str
    type: str
    program: str
    input: str = ""
    output: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    message: str = ""
    n_shown: int = 5
    teacher_id: str = ""
    step: int = 0
    limits: GoldLimits | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        if not isinstance(data, dict) or data.get("limits") is None:
            return super().from_json(data)
        if not isinstance(data["limits"], dict):
            raise RecordFieldError("limits", f"must be a JSON object or null, got {_kind_of(data['limits'])}")
        try:
            limits = GoldLimits.from_json(data["limits"])
        except RecordFieldError as exc:
            raise RecordFieldError(f"limits.{exc.field}", exc.message) from None
        except TypeError:  # a field missing
            missing = sorted({f.name for f in fields(GoldLimits)} - set(data["limits"]))
            raise RecordFieldError("limits", f"lacks {missing}") from None
        except ValueError as exc:  # an unknown key
            raise RecordFieldError("limits", str(exc).split(": ", 1)[-1]) from None
        return replace(super().from_json({**data, "limits": None}), limits=limits)

    def __post_init__(self) -> None:
        if self.inputs or self.outputs:  # a task of several input/output pairs (induction)
            if len(self.inputs) != len(self.outputs):
                raise RecordFieldError("outputs", f"must have one output per input: {len(self.inputs)} inputs "
                                                  f"but {len(self.outputs)} outputs (task {self.id!r:.60})")
            if not (isinstance(self.n_shown, int) and 0 < self.n_shown < len(self.inputs)):
                raise RecordFieldError("n_shown", f"must leave shown and hidden pairs among {len(self.inputs)} "
                                                  f"inputs, got {str(self.n_shown)[:40]} (task {self.id!r:.60})")

    @property
    def shown_pairs(self) -> list[tuple[str, str]]:
        """Induction: the (input, output) pairs shown to the student."""
        return list(zip(self.inputs[: self.n_shown], self.outputs[: self.n_shown]))

    @property
    def hidden_pairs(self) -> list[tuple[str, str]]:
        """Induction: the (input, output) pairs that decide correctness."""
        return list(zip(self.inputs[self.n_shown :], self.outputs[self.n_shown :]))


def task_id(task_type: str, program: str, inputs: tuple[str, ...]) -> str:
    """Content id of a task: the same program and inputs give the same id in every process."""
    h = hashlib.sha1(repr((task_type, program, tuple(inputs))).encode("utf-8"))
    return f"{task_type}-{h.hexdigest()[:12]}"


@dataclass
class Attempt(_JsonRecord):
    """A student's answer to a task and its verdict.

    ``answer`` is the parsed payload (None when the format check failed); ``score`` is 1.0/0.0, or the
    fraction of hidden pairs passed for ``code_f`` in fractional mode; ``reason`` is None when correct.
    """

    task_id: str
    student_id: str
    completion: str
    token_ids: tuple[int, ...] = ()
    answer: str | None = None
    format_ok: bool = False
    correct: bool = False
    score: float = 0.0
    reward: float = 0.0
    reason: str | None = None


@dataclass(frozen=True)
class Verdict(_JsonRecord):
    """Result of validating one proposal: the task when valid, else the reason."""

    valid: bool
    reason: str | None = None
    outputs: tuple[str, ...] = ()
    seconds: float = 0.0
    task: Task | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["task"] = None if self.task is None else self.task.to_json()
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verdict:
        d = dict(data)
        task = d.pop("task", None)
        v = super().from_json(d)
        return cls(v.valid, v.reason, v.outputs, v.seconds, None if task is None else Task.from_json(task))
