"""Checking student answers against tasks (the verifier). Never raises on model text.

- ``code_o``: the predicted output is read with ``ast.literal_eval`` (never ``eval``: model text is not
  executed in the trainer process) and compared with the gold output under ``values_equal``
  (type-strict structural equality, NaN equal to NaN; see ``values.py``).
- ``code_i``: ``f(predicted_input)`` runs in the sandbox; correct when the returned value equals the
  gold output. Any input that produces the output is right.
- ``code_f``: the candidate program must pass the same static checks as a proposal (parses, defines
  ``f``, AST safety check) and then runs in the sandbox on the hidden inputs; correct when every
  hidden output matches (binary, the default). With ``fractional=True`` each hidden input runs as its
  own execution and ``score`` is the fraction matched (``correct`` stays "all matched").

All sandbox work of a batch goes into ONE ``run_many`` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from populora.tasks.parsing import parse_student_answer
from populora.tasks.records import CODE_F, CODE_I, CODE_O, FORMAT, WRONG, Attempt, Task
from populora.tasks.rewards import student_reward
from populora.tasks.validation import ValidationConfig, check_program_static
from populora.tasks.values import reprs_match


@dataclass(frozen=True)
class CheckConfig:
    """Knobs of answer checking."""

    fractional: bool = False  # code_f: score = fraction of hidden pairs matched
    require_fence: bool = False  # accept a bare <answer> payload when it holds no fenced block
    require_answer_tag: bool = True  # False: read a completion without <answer> tags whole (small models)
    validation: ValidationConfig = field(default_factory=ValidationConfig)  # entry name, AST check


@dataclass(frozen=True)
class Judgement:
    """The verdict on one answer: ``reason`` is None when correct."""

    answer: str | None
    format_ok: bool
    correct: bool
    score: float
    reason: str | None = None


def _judged(
    answer: str, matched: Sequence[bool], fail: str | None = None, fractional: bool = False
) -> Judgement:
    correct = bool(matched) and all(matched)
    score = (sum(matched) / len(matched) if matched else 0.0) if fractional else float(correct)
    return Judgement(answer, True, correct, score, None if correct else (fail or WRONG))


def check_many(
    items: Sequence[tuple[Task, str]], sandbox=None, cfg: CheckConfig | None = None
) -> list[Judgement]:
    """Judge ``(task, completion)`` pairs; one ``Judgement`` each, in order.

    ``sandbox`` (a ``populora.sandbox.Sandbox``) is needed only when a code_i or code_f answer is present.
    """
    from populora.sandbox.api import Program

    cfg = cfg or CheckConfig()
    vcfg = cfg.validation
    results: list[Judgement | None] = [None] * len(items)
    programs: list[Program] = []
    pending: list[tuple[int, str, int, int]] = []  # (item index, answer, first program, n programs)
    for i, (task, completion) in enumerate(items):
        parsed = parse_student_answer(completion, task.type, cfg.require_fence, cfg.require_answer_tag)
        if not parsed.format_ok:
            results[i] = Judgement(None, False, False, 0.0, FORMAT)
            continue
        answer = parsed.answer
        if task.type == CODE_O:
            results[i] = _judged(answer, [reprs_match(task.output, answer)])
        elif task.type == CODE_I:
            pending.append((i, answer, len(programs), 1))
            programs.append(Program(task.program, entry=vcfg.entry, calls=(answer,)))
        elif task.type == CODE_F:
            reason = check_program_static(answer, vcfg)
            if reason is not None:
                results[i] = Judgement(answer, True, False, 0.0, reason)
                continue
            hidden = [inp for inp, _ in task.hidden_pairs]
            if cfg.fractional:
                pending.append((i, answer, len(programs), len(hidden)))
                programs.extend(Program(answer, entry=vcfg.entry, calls=(inp,)) for inp in hidden)
            else:
                pending.append((i, answer, len(programs), 1))
                programs.append(Program(answer, entry=vcfg.entry, calls=tuple(hidden)))
        else:
            raise ValueError(f"unknown task type {task.type!r}")
    if programs and sandbox is None:
        raise ValueError("check_many: code_i/code_f answers need a sandbox")
    outcomes = sandbox.run_many(programs) if programs else []
    if len(outcomes) != len(programs):
        raise RuntimeError(
            f"check_many: the sandbox returned {len(outcomes)} outcomes for {len(programs)} programs"
        )
    for i, answer, start, n in pending:
        task = items[i][0]
        outs = outcomes[start : start + n]
        gold = [task.output] if task.type == CODE_I else [out for _, out in task.hidden_pairs]
        if n == 1:  # one execution with all calls: any failure fails the whole answer
            out = outs[0]
            if not out.ok or len(out.values) != len(gold):
                results[i] = Judgement(answer, True, False, 0.0, out.reason or out.status)
                continue
            results[i] = _judged(answer, [reprs_match(g, v) for g, v in zip(gold, out.values)])
        else:  # fractional code_f: one execution per hidden input
            matched = [
                o.ok and len(o.values) == 1 and reprs_match(g, o.values[0]) for g, o in zip(gold, outs)
            ]
            first_fail = next((o.reason for o in outs if not o.ok), None)
            results[i] = _judged(answer, matched, first_fail, fractional=True)
    return [r for r in results if r is not None]


def to_attempt(
    task: Task, student_id: str, completion: str, judgement: Judgement, token_ids: Sequence[int] = ()
) -> Attempt:
    """The ``Attempt`` record of a judged answer, with its student reward."""
    return Attempt(
        task_id=task.id,
        student_id=student_id,
        completion=completion,
        token_ids=tuple(token_ids),
        answer=judgement.answer,
        format_ok=judgement.format_ok,
        correct=judgement.correct,
        score=judgement.score,
        reward=student_reward(judgement.format_ok, judgement.correct),
        reason=judgement.reason,
    )
