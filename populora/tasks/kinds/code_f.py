"""``code_f`` (induction): given input/output pairs and a message, write ``f``.

The teacher is given ONE program from the buffers of the kinds that write programs (AZR conditions
the induction proposer on one program) and proposes ``tasks.code_f.inputs`` inputs and a message;
the first ``tasks.code_f.shown`` (input, output) pairs are shown to the student, the rest are hidden
and decide whether its program is right (binary by default: every hidden output must match;
``tasks.code_f.fractional`` scores the fraction matched).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import populora.tasks.azr_templates as azr
import populora.tasks.kinds.compact as compact
from populora.sandbox.api import Outcome, Program
from populora.tasks.blocks import blocks_of_kind
from populora.tasks.kinds.base import CheckRun, Judgement, TaskKind, Templates, judged, run_matches
from populora.tasks.kinds.registry import register_kind
from populora.tasks.programs import program_reason
from populora.tasks.records import (
    BAD_INPUT,
    DUPLICATE_INPUTS,
    FORMAT,
    TOO_FEW_INPUTS,
    Proposal,
    Task,
    task_id,
)
from populora.tasks.values import LiteralError, input_key, read_arguments, reprs_match

if TYPE_CHECKING:
    from populora.tasks.config import TaskEnv


@dataclass(frozen=True)
class CodeFKnobs:
    """The ``tasks.code_f:`` section."""

    inputs: int = 10  # AZR: the induction proposer writes 10 inputs
    shown: int = 5  # AZR: 5 of them are shown to the solver, the other 5 are hidden and decide
    # ours: False is AZR's binary check (every hidden output must match); True scores the fraction matched
    fractional: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.inputs, int) or isinstance(self.inputs, bool) or self.inputs < 2:
            raise ValueError(f"key 'tasks.code_f.inputs': must be an integer >= 2 (some shown, some hidden), "
                             f"got {self.inputs!r}")
        if not 0 < self.shown < self.inputs:
            raise ValueError(f"key 'tasks.code_f.shown': must be in (0, tasks.code_f.inputs={self.inputs}); the rest "
                             f"are hidden and decide correctness, got {self.shown!r}")


@register_kind
class CodeF(TaskKind):
    name = "code_f"
    position = 2
    summary = "induction: given input/output pairs and a message, write f"
    given_program = True
    student_block = "python"
    teacher_prefill = "</think>\n<answer>\n```input"
    student_prefill = "</think>\n<answer>\n```python\ndef f("
    Knobs = CodeFKnobs
    templates = {
        # AZR: one program, no examples
        "azr": Templates(teacher=lambda refs, program, env: azr.teacher_code_f(program, env.code_f.inputs),
                         student=lambda task, env: azr.student_code_f(task.shown_pairs, task.message)),
        "compact": Templates(
            teacher=lambda refs, program, env: compact.teacher_induction(program, refs, env.code_f.inputs,
                                                                         env.code_f.shown),
            student=lambda task, env: compact.student_induction(task)),
    }

    def teacher_question(self, references: Sequence[Task], program: str | None, env: TaskEnv) -> str:
        if not program:
            raise ValueError("code_f: the teacher question needs the program to propose inputs for")
        return super().teacher_question(references, program, env)

    def parse_proposal(self, answer: str, program: str | None, common: dict) -> Proposal:
        inputs = tuple(i for i in blocks_of_kind(answer, "input") if i)
        messages = [m for m in blocks_of_kind(answer, "message") if m]
        if not inputs or not messages:
            return Proposal(program=program or "", inputs=inputs, reason=FORMAT, **common)
        return Proposal(program=program or "", inputs=inputs, message=messages[-1], **common)

    def check_inputs(self, proposal: Proposal, env: TaskEnv) -> tuple[str | None, tuple[str, ...]]:
        inputs = tuple(i.strip() for i in proposal.inputs)
        for text in inputs:
            try:
                if not read_arguments(text):
                    return BAD_INPUT, ()
            except LiteralError:
                return BAD_INPUT, ()
        keys = [input_key(i) for i in inputs]
        if len(set(keys)) != len(keys):
            return DUPLICATE_INPUTS, ()
        wanted = self.knobs(env).inputs
        if len(inputs) < wanted:
            return TOO_FEW_INPUTS, ()
        return None, inputs[:wanted]  # extra inputs beyond the number asked for are dropped

    def make_task(self, proposal: Proposal, inputs: tuple[str, ...], outputs: Sequence[str], env: TaskEnv) -> Task:
        return Task(id=task_id(proposal.type, proposal.program, inputs), type=proposal.type, program=proposal.program,
                    inputs=inputs, outputs=tuple(outputs), message=proposal.message, n_shown=self.knobs(env).shown,
                    teacher_id=proposal.teacher_id, step=proposal.step)

    def dedup_inputs(self, task: Task) -> tuple[str, ...]:
        return tuple(task.inputs)

    def reference_text(self, task: Task) -> tuple[str, str]:
        return "\n".join(task.inputs[:3]), task.message

    def answer_ok(self, payload: str) -> bool:
        ast.parse(payload)  # SyntaxError: not a program (the caller treats it as a format failure)
        return True

    def check(self, task: Task, answer: str, env: TaskEnv) -> Judgement | CheckRun:
        # the same static rules as a proposal (entry, AST check)
        reason = program_reason(answer, env.entry, env.safety)
        if reason is not None:
            return Judgement(answer, True, False, 0.0, reason)
        hidden = [inp for inp, _ in task.hidden_pairs]
        gold = [out for _, out in task.hidden_pairs]
        if not self.knobs(env).fractional:  # each hidden input alone, as its gold was computed (tasks.calls)
            return run_matches(answer, tuple(hidden), gold, answer, env.entry, alone=env.calls == "alone")

        def judge(outs: Sequence[Outcome]) -> Judgement:  # one execution per hidden input
            matched = [o.ok and len(o.values) == 1 and reprs_match(g, o.values[0]) for g, o in zip(gold, outs)]
            first_fail = next((o.reason for o in outs if not o.ok), None)
            return judged(answer, matched, first_fail, fractional=True)

        return CheckRun([Program(answer, entry=env.entry, calls=(inp,)) for inp in hidden], judge)
