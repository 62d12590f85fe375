"""``code_f`` (induction): given input/output pairs and a message, write ``f``.

The teacher is given ONE program from the buffers of the kinds that write programs (AZR conditions
the induction proposer on one program) and proposes ``n`` inputs and a message; the first
``n_shown`` (input, output) pairs are shown to the student, the rest are hidden and decide whether
its program is right (binary by default: every hidden output must match).
"""

from __future__ import annotations

from collections.abc import Sequence

from populora.sandbox.api import Outcome, Program
from populora.tasks.kinds.base import CheckRun, Judgement, KindConfig, PromptEnv, TaskKind, judged
from populora.tasks.kinds.compact import student_induction, teacher_induction
from populora.tasks.kinds.registry import register_kind
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


@register_kind
class CodeF(TaskKind):
    name = "code_f"
    position = 2
    summary = "induction: given input/output pairs and a message, write f"
    given_program = True
    student_block = "python"
    teacher_prefill = "</think>\n<answer>\n```input"
    student_prefill = "</think>\n<answer>\n```python\ndef f("

    def teacher_question(self, references: Sequence[Task], program: str | None, env: PromptEnv) -> str:
        if not program:
            raise ValueError("code_f: the teacher question needs the program to propose inputs for")
        if env.templates == "azr":
            from populora.tasks import azr_templates

            return azr_templates.teacher_code_f(program, env.n_inputs)  # AZR: one program, no examples
        return teacher_induction(program, references, env)

    def parse_proposal(self, answer: str, program: str | None, common: dict) -> Proposal:
        from populora.tasks.parsing import blocks_of_kind

        inputs = tuple(i for i in blocks_of_kind(answer, "input") if i)
        messages = [m for m in blocks_of_kind(answer, "message") if m]
        if not inputs or not messages:
            return Proposal(program=program or "", inputs=inputs, reason=FORMAT, **common)
        return Proposal(program=program or "", inputs=inputs, message=messages[-1], **common)

    def check_inputs(self, proposal: Proposal, cfg: KindConfig) -> tuple[str | None, tuple[str, ...]]:
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
        if len(inputs) < cfg.code_f_inputs:
            return TOO_FEW_INPUTS, ()
        return None, inputs[: cfg.code_f_inputs]  # extra inputs beyond the number asked for are dropped

    def make_task(self, proposal: Proposal, inputs: tuple[str, ...], outputs: Sequence[str], cfg: KindConfig) -> Task:
        return Task(id=task_id(proposal.type, proposal.program, inputs), type=proposal.type, program=proposal.program,
                    inputs=inputs, outputs=tuple(outputs), message=proposal.message, n_shown=cfg.code_f_shown,
                    teacher_id=proposal.teacher_id, step=proposal.step)

    def dedup_inputs(self, task: Task) -> tuple[str, ...]:
        return tuple(task.inputs)

    def reference_text(self, task: Task) -> tuple[str, str]:
        return "\n".join(task.inputs[:3]), task.message

    def student_question(self, task: Task, env: PromptEnv) -> str:
        if env.templates == "azr":
            from populora.tasks import azr_templates

            return azr_templates.student_code_f(task.shown_pairs, task.message)
        return student_induction(task)

    def answer_ok(self, payload: str) -> bool:
        import ast

        ast.parse(payload)  # SyntaxError: not a program (the caller treats it as a format failure)
        return True

    def check(self, task: Task, answer: str, cfg: KindConfig) -> Judgement | CheckRun:
        reason = cfg.static_check(answer)  # the same static rules as a proposal (entry, AST check)
        if reason is not None:
            return Judgement(answer, True, False, 0.0, reason)
        hidden = [inp for inp, _ in task.hidden_pairs]
        gold = [out for _, out in task.hidden_pairs]
        if not cfg.fractional:
            from populora.tasks.kinds.base import run_matches

            return run_matches(answer, tuple(hidden), gold, answer, cfg.entry)

        def judge(outs: Sequence[Outcome]) -> Judgement:  # one execution per hidden input
            matched = [o.ok and len(o.values) == 1 and reprs_match(g, o.values[0]) for g, o in zip(gold, outs)]
            first_fail = next((o.reason for o in outs if not o.ok), None)
            return judged(answer, matched, first_fail, fractional=True)

        return CheckRun([Program(answer, entry=cfg.entry, calls=(inp,)) for inp in hidden], judge)
