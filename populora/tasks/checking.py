"""Checking student answers against tasks (the verifier). Never raises on model text.

The task kind (``populora.tasks.kinds``) reads and judges each answer:

- ``code_o``: the predicted output is read with ``ast.literal_eval`` (never ``eval``: model text is not
  executed in the trainer process) and compared with the gold output under ``values_equal``
  (type-strict structural equality, NaN equal to NaN; see ``values.py``).
- ``code_i``: ``f(predicted_input)`` runs in the sandbox; correct when the returned value equals the
  gold output. Any input that produces the output is right.
- ``code_f``: the candidate program must pass the same static checks as a proposal (parses, defines
  ``f``, AST safety check) and then runs in the sandbox on the hidden inputs; correct when every
  hidden output matches (binary, the default). With ``fractional=True`` each hidden input runs as its
  own execution and ``score`` is the fraction matched (``correct`` stays "all matched").
- ``code_e``: the predicted error type name equals the gold one (``NoError`` when f returns).

All sandbox work of a batch goes into ONE ``run_many`` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from populora.tasks.kinds import CheckRun, Judgement, get_kind
from populora.tasks.parsing import parse_student_answer
from populora.tasks.records import FORMAT, Attempt, Task
from populora.tasks.rewards import student_reward
from populora.tasks.validation import ValidationConfig


@dataclass(frozen=True)
class CheckConfig:
    """Knobs of answer checking."""

    fractional: bool = False  # code_f: score = fraction of hidden pairs matched
    require_fence: bool = False  # accept a bare <answer> payload when it holds no fenced block
    require_answer_tag: bool = True  # False: read a completion without <answer> tags whole (small models)
    require_think: bool = False  # AZR's format check: </think> then <answer> (the run default: on)
    validation: ValidationConfig = field(default_factory=ValidationConfig)  # entry name, AST check


def check_many(
    items: Sequence[tuple[Task, str]], sandbox=None, cfg: CheckConfig | None = None
) -> list[Judgement]:
    """Judge ``(task, completion)`` pairs; one ``Judgement`` each, in order.

    ``sandbox`` (a ``populora.sandbox.Sandbox``) is needed only when an answer must run (code_i, code_f).
    """
    from populora.tasks.validation import kind_config

    cfg = cfg or CheckConfig()
    kcfg = kind_config(cfg.validation)
    kcfg.fractional = cfg.fractional
    results: list[Judgement | None] = [None] * len(items)
    runs: list[tuple[int, CheckRun, int]] = []  # (item index, run, first program)
    programs = []
    for i, (task, completion) in enumerate(items):
        parsed = parse_student_answer(completion, task.type, cfg.require_fence, cfg.require_answer_tag,
                                      cfg.require_think)
        if not parsed.format_ok:
            results[i] = Judgement(None, False, False, 0.0, FORMAT)
            continue
        plan = get_kind(task.type).check(task, parsed.answer, kcfg)
        if isinstance(plan, Judgement):
            results[i] = plan
        else:
            runs.append((i, plan, len(programs)))
            programs.extend(plan.programs)
    if programs and sandbox is None:
        raise ValueError("check_many: answers that must run need a sandbox")
    outcomes = sandbox.run_many(programs) if programs else []
    if len(outcomes) != len(programs):
        raise RuntimeError(
            f"check_many: the sandbox returned {len(outcomes)} outcomes for {len(programs)} programs"
        )
    for i, plan, start in runs:
        results[i] = plan.judge(outcomes[start : start + len(plan.programs)])
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
