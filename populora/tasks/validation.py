"""Validation of teacher proposals: a proposal becomes a task only if every check passes.

For each proposal, in order (the first failure is the reason):

1. it was parsed (``format``), the program parses (``syntax_error``) and defines a top-level entry
   function ``f`` (``no_entry_function``; ``programs.py``); helpers, nested functions and classes are
   allowed, a second ``def`` is not a rejection (the AZR reference rejected it although its prompt
   allowed helpers);
2. the AST safety check passes (``banned:<name>``, see ``safety.py``);
3. the task kind checks the inputs (``populora.tasks.kinds``): every input is a non-empty argument
   list of Python literals (``bad_input``); code_o/code_i/code_e take exactly one input; code_f takes
   ``tasks.code_f.inputs`` distinct inputs (``duplicate_inputs``, ``too_few_inputs``; extra inputs beyond that
   number are dropped);
4. the determinism check (``determinism.py``): the program runs on its inputs in one execution
   per replica number of ``tasks.replicas`` (four by default), each on fresh fork servers with a
   hash seed drawn from (run seed, step, replica), one turn after the other (no two executions that
   are compared overlap in time), each input alone in a fresh child when there are several
   (code_f), within the limits; the kind turns each execution into outputs or a reason (``timeout``,
   ``memory``, ``runtime_error:<Type>``, ``refused:clock``, ``crashed:<detail>``...; code_e accepts a raised error, whose type is
   its output), and different outputs give ``nondeterministic``. A failed execution is never
   mistaken for an empty output (an AZR defect); a proposal whose verdict is made leaves the turns
   that follow;
5. the kind checks the outputs: every output repr is at most ``max_output_chars``
   (``output_too_large``; never truncated, a truncated output would make the task unsolvable) and, for
   code_o/code_i, reads back as a literal (``not_literal``), or the student could not write it.

A valid task records the sandbox limits its gold outputs were computed under (``Task.limits``, a
``GoldLimits``); the checker judges it only under the same ones (``checking.py``).

All executions of one turn go to the sandbox in ONE ``run_many`` call so that all workers stay busy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import populora.tasks.determinism as determinism
from populora.tasks.config import TaskEnv
from populora.tasks.kinds.registry import get_kind
from populora.tasks.programs import program_reason
from populora.tasks.records import FORMAT, GoldLimits, Proposal, Task, Verdict


def check_inputs(proposal: Proposal, env: TaskEnv) -> tuple[str | None, tuple[str, ...]]:
    """(reason or None, the inputs to run) for the proposal's inputs: the kind's rule."""
    return get_kind(proposal.type).check_inputs(proposal, env)


def static_reason(proposal: Proposal, env: TaskEnv) -> tuple[str | None, tuple[str, ...]]:
    """Everything decided before execution: (reason or None, inputs to run)."""
    if proposal.reason is not None:
        return proposal.reason, ()
    if not proposal.program.strip():
        return FORMAT, ()
    reason = program_reason(proposal.program, env.entry, env.safety)
    if reason is not None:
        return reason, ()
    return check_inputs(proposal, env)


def make_task(proposal: Proposal, inputs: tuple[str, ...], outputs: Sequence[str], env: TaskEnv) -> Task:
    """The task of a valid proposal (the kind makes it)."""
    return get_kind(proposal.type).make_task(proposal, inputs, outputs, env)


def validate_many(proposals: Sequence[Proposal], sandbox, env: TaskEnv | None = None, step: int | None = None
                  ) -> list[Verdict]:
    """Validate proposals under the task environment ``env`` (default: ``TaskEnv()``); one ``Verdict``
    per proposal, in order (the task when valid).

    ``sandbox`` is a ``populora.sandbox.Sandbox`` (anything with ``run_many(programs) -> outcomes``);
    its ``hash_seed`` is the run seed the replicas' seeds are drawn from, with ``step`` (default:
    the newest ``Proposal.step`` of the batch).
    """
    env = env or TaskEnv()
    verdicts: list[Verdict | None] = [None] * len(proposals)
    runs: list[tuple[int, tuple[str, ...]]] = []  # (proposal index, inputs) to execute
    for i, proposal in enumerate(proposals):
        reason, inputs = static_reason(proposal, env)
        if reason is not None:
            verdicts[i] = Verdict(False, reason)
        else:
            runs.append((i, inputs))
    if step is None:
        step = max((p.step for p in proposals), default=0)
    judged = determinism.run_executions(
        sandbox, [(proposals[i].type, proposals[i].program, inputs) for i, inputs in runs], env,
        determinism.run_seed_of(sandbox), step)
    limits = GoldLimits.of(getattr(sandbox, "limits", None))  # what the gold outputs were computed under
    for (i, inputs), (reason, outputs, seconds) in zip(runs, judged):
        if reason is None:
            reason = get_kind(proposals[i].type).output_reason(outputs, env)
        if reason is not None:
            verdicts[i] = Verdict(False, reason, seconds=seconds)
        else:
            values = tuple(outputs)
            task = dataclasses.replace(make_task(proposals[i], inputs, values, env), limits=limits)
            verdicts[i] = Verdict(True, None, outputs=values, seconds=seconds, task=task)
    return [v for v in verdicts if v is not None]
