"""``code_i`` (abduction): given a program ``f`` and an output, give an input that produces it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import populora.tasks.azr_templates as azr
import populora.tasks.kinds.compact as compact
from populora.tasks.kinds.base import (
    CheckRun,
    ProgramAndInput,
    is_argument_list,
    literal_outputs_reason,
    program_and_input_templates,
    run_matches,
)
from populora.tasks.kinds.registry import register_kind
from populora.tasks.records import Task

if TYPE_CHECKING:
    from populora.tasks.config import TaskEnv


@register_kind
class CodeI(ProgramAndInput):
    name = "code_i"
    position = 1
    summary = "abduction: given f and an output, give an input that produces it"
    student_block = "input"
    student_prefill = "</think>\n<answer>\n```input"
    seed_order = 0  # AZR's seeding asks code_i teachers first, then code_o
    templates = program_and_input_templates(azr.teacher_code_i, lambda task: azr.student_code_i(task.program, task.output),
                                            "find an input that produces a given output", compact.student_abduction)

    def output_reason(self, outputs: Sequence[str], env: TaskEnv) -> str | None:
        return literal_outputs_reason(outputs, env)  # the output is shown to the student as a literal

    def answer_ok(self, payload: str) -> bool:
        return is_argument_list(payload)

    def check(self, task: Task, answer: str, env: TaskEnv) -> CheckRun:
        # any input that makes f return the gold output is right: run f on it in the sandbox
        return run_matches(task.program, (answer,), [task.output], answer, env.entry)
