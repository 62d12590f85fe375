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
4. the program runs on its inputs in TWO independently started processes (sandbox replicas 0 and 1,
   different hash seeds and address layouts), one after the other (replica 1 once every replica-0
   execution of the batch has finished: ``run_replicas``), within the limits; the kind turns each execution into
   outputs or a reason (``timeout``, ``memory``, ``runtime_error:<Type>``, ``crashed:<detail>``...;
   code_e accepts a raised error, whose type is its output), and different outputs give
   ``nondeterministic``; with several inputs the second execution calls ``f`` on them in reverse order,
   so outputs that depend on earlier calls are caught too. A failed execution is never mistaken for an
   empty output (an AZR defect);
5. the kind checks the outputs: every output repr is at most ``max_output_chars``
   (``output_too_large``; never truncated, a truncated output would make the task unsolvable) and, for
   code_o/code_i, reads back as a literal (``not_literal``), or the student could not write it.

All executions of a batch go to the sandbox in ONE ``run_many`` call so that all workers stay busy.
"""

from __future__ import annotations

from collections.abc import Sequence

from populora.sandbox.api import Program
from populora.tasks.config import TaskEnv
from populora.tasks.kinds.registry import get_kind
from populora.tasks.programs import program_reason
from populora.tasks.records import FORMAT, NONDETERMINISTIC, Proposal, Task, Verdict


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


def replica_calls(inputs: tuple[str, ...], k: int) -> tuple[str, ...]:
    """The calls of the ``k``-th execution: odd executions run the inputs in reverse order.

    With several inputs (code_f) in one process, an output that depends on earlier calls (module or
    class state) then differs between the two executions and is caught as nondeterministic, so every
    output is what ``f`` gives for its input alone, as when a student's program runs on the hidden
    inputs in a fresh process.
    """
    return inputs[::-1] if k % 2 else inputs


def in_input_order(values: Sequence[str], k: int) -> list[str]:
    """The values of the ``k``-th execution in the order of the inputs."""
    return list(values[::-1]) if k % 2 else list(values)


def judge_executions(proposal: Proposal, outcomes: Sequence, n_calls: int, env: TaskEnv
                     ) -> tuple[str | None, list[str]]:
    """(reason or None, the outputs) from the outcomes of the replicas' executions of one proposal.

    Outcome ``k`` ran the calls in reverse order when ``k`` is odd (see ``replica_calls``).
    """
    kind = get_kind(proposal.type)
    outputs = []
    for k, out in enumerate(outcomes):
        reason, values = kind.outputs_of(out, n_calls)
        if reason is not None:
            return reason, []
        outputs.append(in_input_order(values, k))
    if any(o != outputs[0] for o in outputs[1:]):
        return NONDETERMINISTIC, []
    return kind.output_reason(outputs[0], env), outputs[0]


def make_task(proposal: Proposal, inputs: tuple[str, ...], outputs: Sequence[str], env: TaskEnv) -> Task:
    """The task of a valid proposal (the kind makes it)."""
    return get_kind(proposal.type).make_task(proposal, inputs, outputs, env)


def replica_turns(n_programs: int, n_rep: int) -> list[list[int]]:
    """Indices of ``n_programs`` programs laid out proposal by proposal, ``n_rep`` executions
    each, grouped by execution: turn ``k`` holds every proposal's ``k``-th execution."""
    if n_rep <= 0 or n_programs % n_rep:
        raise ValueError(f"replica_turns: {n_programs} programs are not {n_rep} executions per proposal")
    return [list(range(k, n_programs, n_rep)) for k in range(n_rep)]


def run_replicas(sandbox, programs: Sequence, n_rep: int, in_turn: bool = True) -> list:
    """Outcomes of ``programs`` (``n_rep`` executions per proposal, in order), in input order.

    ``in_turn``: one ``run_many`` per turn (``replica_turns``), each starting once the previous
    one has returned, so two executions that are compared never overlap in time and cannot
    agree on a value through anything that lives only while they run (locks, watches, pipes,
    sockets). Within a turn all workers stay busy. Without ``in_turn``, one ``run_many``.
    """
    turns = replica_turns(len(programs), n_rep) if in_turn else [list(range(len(programs)))]
    outcomes: list = [None] * len(programs)
    for turn in turns:
        if not turn:
            continue
        got = sandbox.run_many([programs[i] for i in turn])
        if len(got) != len(turn):
            raise RuntimeError(f"validate_many: the sandbox returned {len(got)} outcomes for {len(turn)} programs")
        for i, outcome in zip(turn, got):
            outcomes[i] = outcome
    return outcomes


def validate_many(proposals: Sequence[Proposal], sandbox, env: TaskEnv | None = None) -> list[Verdict]:
    """Validate proposals under the task environment ``env`` (default: ``TaskEnv()``); one ``Verdict``
    per proposal, in order (the task when valid).

    ``sandbox`` is a ``populora.sandbox.Sandbox`` (anything with ``run_many(programs) -> outcomes``).
    """
    env = env or TaskEnv()
    verdicts: list[Verdict | None] = [None] * len(proposals)
    runs: list[tuple[int, tuple[str, ...]]] = []  # (proposal index, inputs) to execute
    programs: list[Program] = []
    for i, proposal in enumerate(proposals):
        reason, inputs = static_reason(proposal, env)
        if reason is not None:
            verdicts[i] = Verdict(False, reason)
            continue
        runs.append((i, inputs))
        for k, replica in enumerate(env.replicas):
            calls = replica_calls(inputs, k)
            programs.append(Program(proposal.program, entry=env.entry, calls=calls, replica=replica))
    n_rep = len(env.replicas)
    outcomes = run_replicas(sandbox, programs, n_rep, env.replicas_in_turn)
    for k, (i, inputs) in enumerate(runs):
        outs = outcomes[k * n_rep : (k + 1) * n_rep]
        seconds = max(o.seconds for o in outs)
        reason, outputs = judge_executions(proposals[i], outs, len(inputs), env)
        if reason is not None:
            verdicts[i] = Verdict(False, reason, seconds=seconds)
        else:
            values = tuple(outputs)
            task = make_task(proposals[i], inputs, values, env)
            verdicts[i] = Verdict(True, None, outputs=values, seconds=seconds, task=task)
    return [v for v in verdicts if v is not None]
