"""``code_o`` (deduction): given a program ``f`` and an input, predict the output."""

from __future__ import annotations

from collections.abc import Sequence

from populora.tasks.kinds.base import (
    Judgement,
    KindConfig,
    ProgramAndInput,
    PromptEnv,
    is_literal,
    judged,
    literal_outputs_reason,
)
from populora.tasks.kinds.compact import student_deduction, teacher_program_and_input
from populora.tasks.kinds.registry import register_kind
from populora.tasks.records import Task
from populora.tasks.values import reprs_match


@register_kind
class CodeO(ProgramAndInput):
    name = "code_o"
    position = 0
    summary = "deduction: given f and an input, predict the output"
    student_block = "output"
    student_prefill = "</think>\n<answer>\n```output"

    def teacher_question(self, references: Sequence[Task], program: str | None, env: PromptEnv) -> str:
        if env.templates == "azr":
            from populora.tasks import azr_templates

            return azr_templates.teacher_code_o(references)
        return teacher_program_and_input("predict its output from an input", references, env)

    def output_reason(self, outputs: Sequence[str], cfg: KindConfig) -> str | None:
        return literal_outputs_reason(outputs, cfg)  # the student writes the output back as a literal

    def student_question(self, task: Task, env: PromptEnv) -> str:
        if env.templates == "azr":
            from populora.tasks import azr_templates

            return azr_templates.student_code_o(task.program, task.input)
        return student_deduction(task)

    def answer_ok(self, payload: str) -> bool:
        return is_literal(payload)

    def check(self, task: Task, answer: str, cfg: KindConfig) -> Judgement:
        # read with ast.literal_eval and compared type-strictly: model text never runs here
        return judged(answer, [reprs_match(task.output, answer)])
