"""What a task kind is: one interface for everything that differs between AZR's task types.

A kind says how a teacher is asked for a task and how its answer is read (prompt, prefill, parse),
which inputs a proposal must have, how the executions of a valid proposal become the task's outputs
(and which outcomes are acceptable), what task is made, how a student is asked and how its answer
is read and checked, and how its buffer is seeded. Validation, checking, buffers, prompts, seeding,
stages, plots and the CLI ask the kind; none of them tests a kind's name. A new kind is one module
in this package with a ``@register_kind`` class, plus a row in docs/tasks.md.

Every method receives the run's task environment (``populora.tasks.config.TaskEnv``, the ``tasks:``
section). A kind with settings of its own declares them as a frozen dataclass ``Knobs``: the
environment then has a ``tasks.<kind name>:`` section of that type (``knobs(env)`` returns it). A
kind's prompts are data: ``templates`` maps each template set (``tasks.templates``: ``azr``, AZR's
own; ``compact``, ours for small models) to the kind's teacher and student questions.

``ProgramAndInput`` is the shape shared by the kinds whose teacher writes a program and one input
(``code_o``, ``code_i``, ``code_e``); ``code_f`` (the teacher is given a program and writes inputs
and a message) implements the interface on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from populora.sandbox.api import Outcome, Program
from populora.tasks.blocks import blocks_of_kind, last_block
from populora.tasks.records import (
    BAD_INPUT,
    FORMAT,
    NOT_LITERAL,
    OUTPUT_TOO_LARGE,
    WRONG,
    Proposal,
    Task,
    task_id,
)
from populora.tasks.values import LiteralError, read_arguments, read_literal, reprs_match

if TYPE_CHECKING:
    from populora.tasks.config import TaskEnv


@dataclass(frozen=True)
class Templates:
    """One template set's questions for one kind: ``teacher(references, program, env)`` (``program``:
    the buffer program a ``given_program`` kind's teacher is given, else None) and ``student(task, env)``,
    both unwrapped (``prompts.py`` wraps them)."""

    teacher: Callable[[Sequence[Task], str | None, TaskEnv], str]
    student: Callable[[Task, TaskEnv], str]


@dataclass(frozen=True)
class Judgement:
    """The verdict on one answer: ``reason`` is None when correct."""

    answer: str | None
    format_ok: bool
    correct: bool
    score: float
    reason: str | None = None


@dataclass
class CheckRun:
    """Programs to run in the sandbox for one answer, and how their outcomes decide it."""

    programs: list[Program]
    judge: Callable[[Sequence[Outcome]], Judgement]


def judged(answer: str, matched: Sequence[bool], fail: str | None = None, fractional: bool = False) -> Judgement:
    """The judgement of an answer whose parts ``matched`` (all must match to be correct)."""
    correct = bool(matched) and all(matched)
    score = (sum(matched) / len(matched) if matched else 0.0) if fractional else float(correct)
    return Judgement(answer, True, correct, score, None if correct else (fail or WRONG))


class TaskKind:
    """One AZR task type. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line for docs and ``--help``
    position: ClassVar[int] = 100  # where the kind is listed (code_o, code_i, code_f, then the rest)
    default_on: ClassVar[bool] = True  # in ``tasks.types`` by default
    given_program: ClassVar[bool] = False  # the teacher is given a buffer program (induction)
    program_source: ClassVar[bool] = False  # its programs may be given to a ``given_program`` teacher
    student_block: ClassVar[str]  # the fenced block kind of a student's answer
    teacher_prefill: ClassVar[str]  # answer prefill for small models (``tasks.answer_prefill``)
    student_prefill: ClassVar[str]
    templates: ClassVar[Mapping[str, Templates]]  # template set (``tasks.templates``) -> questions
    Knobs: ClassVar[type | None] = None  # the kind's own settings, the ``tasks.<name>:`` section
    # AZR's seeding (``seeds.py``): the kinds whose teachers write the shared seed triplets (program,
    # input, output), asked in this order (AZR: code_i, then code_o); their buffers start with those
    # triplets. None: the kind's buffer is not seeded with them.
    seed_order: ClassVar[int | None] = None

    def knobs(self, env: TaskEnv) -> Any:
        """This kind's ``Knobs`` in ``env`` (the ``tasks.<name>:`` section)."""
        return getattr(env, self.name)

    # -- the teacher ----------------------------------------------------------------------------------
    def teacher_question(self, references: Sequence[Task], program: str | None, env: TaskEnv) -> str:
        """The teacher's question in ``env.templates``' set, with K ``references`` from the buffer."""
        return self.templates[env.templates].teacher(references, program, env)

    def parse_proposal(self, answer: str, program: str | None, common: dict) -> Proposal:
        """The proposal in the teacher's ``answer`` text (the inside of its answer block)."""
        raise NotImplementedError

    def check_inputs(self, proposal: Proposal, env: TaskEnv) -> tuple[str | None, tuple[str, ...]]:
        """(reason or None, the inputs to run)."""
        raise NotImplementedError

    def outputs_of(self, outcome: Outcome, n_calls: int) -> tuple[str | None, list[str]]:
        """(reason or None, one output text per call) of one execution of a proposal. By default an
        execution must succeed; its outputs are the values' reprs."""
        if not outcome.ok:
            return outcome.reason or outcome.status, []
        if len(outcome.values) != n_calls:
            return "crashed:bad_result", []  # the sandbox guarantees one value per call
        return None, list(outcome.values)

    def output_reason(self, outputs: Sequence[str], env: TaskEnv) -> str | None:
        """Reason the outputs cannot make a task (too long, unreadable by a student), or None."""
        for value in outputs:
            if len(value) > env.max_output_chars:
                return OUTPUT_TOO_LARGE
        return None

    def make_task(self, proposal: Proposal, inputs: tuple[str, ...], outputs: Sequence[str], env: TaskEnv) -> Task:
        raise NotImplementedError

    def dedup_inputs(self, task: Task) -> tuple[str, ...]:
        """The inputs that, with the program, make a task the same task for a buffer."""
        return (task.input,)

    def reference_text(self, task: Task) -> tuple[str, str]:
        """(input, output) of a buffer task shown to a teacher of this kind as a reference."""
        return task.input, task.output

    # -- the student ----------------------------------------------------------------------------------
    def student_question(self, task: Task, env: TaskEnv) -> str:
        """The student's question in ``env.templates``' set."""
        return self.templates[env.templates].student(task, env)

    def answer_ok(self, payload: str) -> bool:
        """Whether a student's answer has the grammar of an answer of this kind."""
        raise NotImplementedError

    def check(self, task: Task, answer: str, env: TaskEnv) -> Judgement | CheckRun:
        """Judge a well-formed answer now, or say which programs decide it."""
        raise NotImplementedError


class ProgramAndInput(TaskKind):
    """The teacher writes a program ``f`` and one input (AZR's code_i, code_o, code_e proposers)."""

    program_source = True
    teacher_prefill = "</think>\n<answer>\n```python\ndef f("

    def parse_proposal(self, answer: str, program: str | None, common: dict) -> Proposal:
        code = last_block(answer, "python")
        inputs = blocks_of_kind(answer, "input")
        if code is None or not inputs or not inputs[-1]:
            return Proposal(program=code or "", reason=FORMAT, **common)
        return Proposal(program=code, inputs=(inputs[-1],), **common)

    def check_inputs(self, proposal: Proposal, env: TaskEnv) -> tuple[str | None, tuple[str, ...]]:
        inputs = tuple(i.strip() for i in proposal.inputs)
        if len(inputs) != 1:
            return FORMAT, ()
        if not _is_argument_list(inputs[0]):
            return BAD_INPUT, ()
        return None, inputs

    def make_task(self, proposal: Proposal, inputs: tuple[str, ...], outputs: Sequence[str], env: TaskEnv) -> Task:
        return Task(id=task_id(proposal.type, proposal.program, inputs), type=proposal.type, program=proposal.program,
                    input=inputs[0], output=outputs[0], teacher_id=proposal.teacher_id, step=proposal.step)


def program_and_input_templates(azr_teacher: Callable[[Sequence[Task]], str], azr_student: Callable[[Task], str],
                                goal: str, compact_student: Callable[[Task], str],
                                output_block: str = "output") -> dict[str, Templates]:
    """The template sets of a ``ProgramAndInput`` kind: AZR's proposer and solver questions, and our
    compact ones (the teacher told its ``goal``, the allowed modules and the output limit)."""
    import populora.tasks.kinds.compact as compact

    return {
        "azr": Templates(teacher=lambda refs, program, env: azr_teacher(refs),
                         student=lambda task, env: azr_student(task)),
        "compact": Templates(
            teacher=lambda refs, program, env: compact.teacher_program_and_input(
                goal, refs, env.safety.allowed_modules, env.max_output_chars, output_block=output_block),
            student=lambda task, env: compact_student(task)),
    }


def _is_argument_list(text: str) -> bool:
    try:
        return bool(read_arguments(text))
    except LiteralError:
        return False


def literal_outputs_reason(outputs: Sequence[str], env: TaskEnv) -> str | None:
    """Outputs a student must write back as Python literals: short enough and readable."""
    for value in outputs:
        if len(value) > env.max_output_chars:
            return OUTPUT_TOO_LARGE
        try:
            read_literal(value)
        except LiteralError:
            return NOT_LITERAL
    return None


def is_literal(payload: str) -> bool:
    try:
        read_literal(payload)
        return True
    except (LiteralError, ValueError, RecursionError, MemoryError):
        return False


def is_argument_list(payload: str) -> bool:
    try:
        return bool(read_arguments(payload))
    except (LiteralError, ValueError, RecursionError, MemoryError):
        return False


def run_matches(program: str, calls: tuple[str, ...], gold: Sequence[str], answer: str, entry: str,
                alone: bool = True) -> CheckRun:
    """``program`` on ``calls``, whose values must all equal ``gold``: each call in a fresh child of
    its own (``alone``: how validation computed the gold under ``tasks.calls: alone``, see
    ``tasks/determinism.py``), else all calls in one child in the given order (the layouts kept to
    measure). The first failure, in call order, is the reason."""
    def judge(outs: Sequence[Outcome]) -> Judgement:
        for out in outs:
            if not out.ok:
                return Judgement(answer, True, False, 0.0, out.reason or out.status)
        values = [v for out in outs for v in out.values]
        if len(values) != len(gold):  # the sandbox guarantees one value per call
            return Judgement(answer, True, False, 0.0, "crashed:bad_result")
        return judged(answer, [reprs_match(g, v) for g, v in zip(gold, values)])

    if alone:
        return CheckRun([Program(program, entry=entry, calls=(call,)) for call in calls], judge)
    return CheckRun([Program(program, entry=entry, calls=calls)], judge)
