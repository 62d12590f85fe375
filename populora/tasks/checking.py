"""Checking student answers against tasks (the verifier). Never raises on model text.

The task kind (``populora.tasks.kinds``) reads and judges each answer:

- ``code_o``: the predicted output is read with ``ast.literal_eval`` (never ``eval``: model text is not
  executed in the trainer process) and compared with the gold output under ``values_equal``
  (type-strict structural equality, NaN equal to NaN; see ``values.py``).
- ``code_i``: ``f(predicted_input)`` runs in the sandbox; correct when the returned value equals the
  gold output. Any input that produces the output is right.
- ``code_f``: the candidate program must pass the same static checks as a proposal (parses, defines
  ``f``, AST safety check) and then runs in the sandbox on the hidden inputs, each in a fresh child
  of its own, as validation computed their gold outputs (``tasks.calls: alone``, one semantics
  everywhere: ``determinism.py``); correct when every hidden output matches (binary, the default).
  With ``tasks.code_f.fractional`` ``score`` is the fraction matched (``correct`` stays "all
  matched").
- ``code_e``: the predicted error type name equals the gold one (``NoError`` when f returns).

All sandbox work of a batch goes into ONE ``run_many`` call.

``check_and_rerun`` also runs each task's own program again on its gold inputs, in the same batch,
under one more replica's hash seed, each input alone (``determinism.rerun_programs``): a
program that no longer gives its gold outputs was nondeterministic after all (its validation
executions agreed by chance, or it reads something that changes between runs). Any outcome the
program can bring about counts as changed: an error, a memory or CPU-time limit, an exit, a
signal, a stall; only a failure the sandbox proves is its own (``Outcome.infrastructure``) keeps
the verdict. Such a task cannot be judged; the solve stage gives its teacher the invalid reward
(``selfplay/stages.py``).

**Gold limits.** A task that records the sandbox limits its gold was computed under (``Task.limits``)
is judged only by a sandbox with the same ones: under other limits (a run resumed with another
``sandbox.memory_mb``, a ``tasks check`` with another ``--memory-mb``) every answer to it gets
``limits_changed:<field>`` (not correct, not wrong: the stage counts it for nothing) and its program
is not re-run. A task without the record (written before issue 37, or made by hand) is judged
under the checker's limits.
"""

from __future__ import annotations

from collections.abc import Sequence

import populora.tasks.determinism as determinism
from populora.tasks.config import TaskEnv
from populora.tasks.kinds.base import CheckRun, Judgement
from populora.tasks.kinds.registry import get_kind
from populora.tasks.parsing import parse_student_answer
from populora.tasks.records import FORMAT, Attempt, GoldLimits, Task, limits_changed
from populora.tasks.rewards import student_reward


def check_many(items: Sequence[tuple[Task, str]], sandbox, env: TaskEnv) -> list[Judgement]:
    """Judge ``(task, completion)`` pairs under the task environment ``env`` (its format rules, entry
    name and kind settings); one ``Judgement`` each, in order.

    ``sandbox`` (a ``populora.sandbox.Sandbox``) is needed only when an answer must run (code_i, code_f).
    """
    return check_and_rerun(items, (), sandbox, env)[0]


def limits_refusal(task: Task, own: GoldLimits | None) -> str | None:
    """``limits_changed:<field>`` when ``task``'s gold was computed under other sandbox limits than
    the checker's (``own``), else None (the same limits, or either unknown)."""
    if task.limits is None or own is None:
        return None
    field_name = task.limits.first_difference(own)
    return None if field_name is None else limits_changed(field_name)


def gold_calls(task: Task) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(inputs, outputs)`` the task was validated with (several for code_f, one otherwise)."""
    return (task.inputs, task.outputs) if task.inputs else ((task.input,), (task.output,))


def rerun_changed(task: Task, outcomes, order: list[int] | None = None) -> bool | None:
    """Whether one more execution of ``task``'s program on its gold inputs (``outcomes``: the
    outcomes of its ``determinism.rerun_programs``, whose calls ran in ``order``; or one outcome of
    calls in input order) gave other outputs than its gold ones, compared as validation compares
    its executions. ``None`` only when the sandbox
    proves the outcome is not the program's doing (``Outcome.infrastructure``): the task keeps its
    verdict. A time, memory or CPU limit, an exit, a signal or a forged result is the program's."""
    inputs, outputs = gold_calls(task)
    if not isinstance(outcomes, (list, tuple)):
        outcomes = [outcomes]
    if order is None and len(outcomes) == 1:
        order = list(range(len(inputs)))
    return determinism.rerun_changed(task.type, inputs, outputs, outcomes, order)


def check_and_rerun(
    items: Sequence[tuple[Task, str]], rerun: Sequence[Task], sandbox, env: TaskEnv, step: int | None = None
) -> tuple[list[Judgement], frozenset[str]]:
    """``check_many`` of ``items`` and, in the same sandbox batch, one more execution of every task of
    ``rerun`` on its gold inputs; returns the judgements and the ids of the tasks whose program no
    longer gives its gold outputs (``rerun_changed``). The re-run's seed is drawn from the
    sandbox's run seed and ``step`` (default: the newest ``Task.step`` of ``rerun``)."""
    results: list[Judgement | None] = [None] * len(items)
    runs: list[tuple[int, CheckRun, int]] = []  # (item index, run, first program)
    programs = []
    own = GoldLimits.of(getattr(sandbox, "limits", None))
    for i, (task, completion) in enumerate(items):
        parsed = parse_student_answer(completion, task.type, env)
        changed_limit = limits_refusal(task, own)
        if changed_limit is not None:
            results[i] = Judgement(parsed.answer, parsed.format_ok, False, 0.0, changed_limit)
            continue
        if not parsed.format_ok:
            results[i] = Judgement(None, False, False, 0.0, FORMAT)
            continue
        plan = get_kind(task.type).check(task, parsed.answer, env)
        if isinstance(plan, Judgement):
            results[i] = plan
        else:
            runs.append((i, plan, len(programs)))
            programs.extend(plan.programs)
    if step is None:
        step = max((t.step for t in rerun), default=0)
    spans = []  # (task, call order, first program, count) of the re-runs
    for t in rerun:
        if limits_refusal(t, own) is not None:
            continue  # under other limits its gold proves nothing: it is refused, not re-run
        progs, order = determinism.rerun_programs(t.program, gold_calls(t)[0], env, determinism.run_seed_of(sandbox),
                                                  step)
        spans.append((t, order, len(programs), len(progs)))
        programs.extend(progs)
    if programs and sandbox is None:
        raise ValueError("check_many: answers that must run need a sandbox")
    outcomes = sandbox.run_many(programs) if programs else []
    if len(outcomes) != len(programs):
        raise RuntimeError(
            f"check_many: the sandbox returned {len(outcomes)} outcomes for {len(programs)} programs"
        )
    for i, plan, start in runs:
        results[i] = plan.judge(outcomes[start : start + len(plan.programs)])
    changed = frozenset(t.id for t, order, start, n in spans if rerun_changed(t, outcomes[start:start + n], order))
    return [r for r in results if r is not None], changed


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
