"""``code_i`` (abduction): given a program ``f`` and an output, give an input that produces it."""

from __future__ import annotations

from collections.abc import Sequence

from populora.tasks.kinds.base import (
    CheckRun,
    KindConfig,
    ProgramAndInput,
    PromptEnv,
    is_argument_list,
    literal_outputs_reason,
    run_matches,
)
from populora.tasks.kinds.compact import student_abduction, teacher_program_and_input
from populora.tasks.kinds.registry import register_kind
from populora.tasks.records import Task


@register_kind
class CodeI(ProgramAndInput):
    name = "code_i"
    position = 1
    summary = "abduction: given f and an output, give an input that produces it"
    student_block = "input"
    student_prefill = "</think>\n<answer>\n```input"

    def teacher_question(self, references: Sequence[Task], program: str | None, env: PromptEnv) -> str:
        if env.templates == "azr":
            from populora.tasks import azr_templates

            return azr_templates.teacher_code_i(references)
        return teacher_program_and_input("find an input that produces a given output", references, env)

    def output_reason(self, outputs: Sequence[str], cfg: KindConfig) -> str | None:
        return literal_outputs_reason(outputs, cfg)  # the output is shown to the student as a literal

    def student_question(self, task: Task, env: PromptEnv) -> str:
        if env.templates == "azr":
            from populora.tasks import azr_templates

            return azr_templates.student_code_i(task.program, task.output)
        return student_abduction(task)

    def answer_ok(self, payload: str) -> bool:
        return is_argument_list(payload)

    def check(self, task: Task, answer: str, cfg: KindConfig) -> CheckRun:
        # any input that makes f return the gold output is right: run f on it in the sandbox
        return run_matches(task.program, (answer,), [task.output], answer, cfg.entry)
