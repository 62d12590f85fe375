"""``code_o`` (deduction): given a program ``f`` and an input, predict the output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import populora.tasks.azr_templates as azr
import populora.tasks.kinds.compact as compact
from populora.tasks.kinds.base import (
    Judgement,
    ProgramAndInput,
    is_literal,
    judged,
    literal_outputs_reason,
    program_and_input_templates,
)
from populora.tasks.kinds.registry import register_kind
from populora.tasks.records import Task
from populora.tasks.values import reprs_match

if TYPE_CHECKING:
    from populora.tasks.config import TaskEnv


@register_kind
class CodeO(ProgramAndInput):
    name = "code_o"
    position = 0
    summary = "deduction: given f and an input, predict the output"
    student_block = "output"
    student_prefill = "</think>\n<answer>\n```output"
    seed_order = 1  # AZR's seeding asks code_i teachers first, then code_o
    templates = program_and_input_templates(azr.teacher_code_o, lambda task: azr.student_code_o(task.program, task.input),
                                            "predict its output from an input", compact.student_deduction)

    def output_reason(self, outputs: Sequence[str], env: TaskEnv) -> str | None:
        return literal_outputs_reason(outputs, env)  # the student writes the output back as a literal

    def answer_ok(self, payload: str) -> bool:
        return is_literal(payload)

    def check(self, task: Task, answer: str, env: TaskEnv) -> Judgement:
        # read with ast.literal_eval and compared type-strictly: model text never runs here
        return judged(answer, [reprs_match(task.output, answer)])
