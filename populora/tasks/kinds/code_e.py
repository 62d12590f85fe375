"""``code_e`` (error prediction, AZR's fourth type, off by default): given ``f`` and an input, name the
error ``f`` raises on it (its exception type), or ``NoError``.

The teacher writes a program and one input as for ``code_o``; validation accepts an execution that
raises (its exception type is the output) as well as one that returns (``NoError``), and still
rejects timeouts, memory errors, crashes and nondeterminism. The student answers in an ```output
block; the answer is compared with the gold type name as text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import populora.tasks.azr_templates as azr
import populora.tasks.kinds.compact as compact
from populora.sandbox.api import Outcome
from populora.tasks.kinds.base import Judgement, ProgramAndInput, judged, program_and_input_templates
from populora.tasks.kinds.registry import register_kind
from populora.tasks.records import Task

if TYPE_CHECKING:
    from populora.tasks.config import TaskEnv

NO_ERROR = "NoError"  # AZR's answer for a program that raises nothing
_TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


@register_kind
class CodeE(ProgramAndInput):
    name = "code_e"
    position = 3
    summary = "error prediction: given f and an input, name the exception f raises (or NoError)"
    default_on = False  # AZR's scripts leave it off too
    program_source = False  # its programs may raise: not given to induction teachers
    student_block = "output"
    student_prefill = "</think>\n<answer>\n```output"
    templates = program_and_input_templates(azr.teacher_code_e, lambda task: azr.student_code_e(task.program, task.input),
                                            "predict which error it raises on an input (or that it raises none)",
                                            compact.student_error, output_block="error")

    def outputs_of(self, outcome: Outcome, n_calls: int) -> tuple[str | None, list[str]]:
        if outcome.ok:
            return (None, [NO_ERROR]) if len(outcome.values) == n_calls else ("crashed:bad_result", [])
        reason = outcome.reason or outcome.status
        if reason.startswith("runtime_error:"):
            return None, [reason.split(":", 1)[1]]  # the exception's type name is the task's output
        return reason, []

    def answer_ok(self, payload: str) -> bool:
        return _TYPE_NAME.fullmatch(payload.strip()) is not None

    def check(self, task: Task, answer: str, env: TaskEnv) -> Judgement:
        return judged(answer, [answer.strip() == task.output])
