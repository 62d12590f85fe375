"""The determinism check: a proposal's outputs must be a function of its program and inputs alone.

The fourth of the sandbox's layers (``docs/sandbox.md``, "Determinism"). A valid proposal's program
runs on its inputs in ``len(tasks.replicas)`` executions that cannot talk to each other, and every
execution must give the same outputs; the check stage runs it once more (``rerun_programs``) and
compares again (``rerun_changed``). What makes a difference visible:

* **hash seeds drawn per step.** Execution ``k`` of step ``s`` runs on fork servers whose
  ``PYTHONHASHSEED`` is ``replica_seed(run seed, s, tasks.replicas[k])``; the check's re-run uses
  one more replica number (``rerun_replica``). No pair of seeds is fixed for a run, yet the same
  run seed and step give the same seeds: runs stay reproducible and resumable bit for bit. Each
  seed's servers are fresh processes of that step, so addresses (``id()``) differ too. With four
  independent seeds a set of three strings comes out in one order in all four with probability
  about 1/6**3 (0.5%): ``list(set(words))`` is rejected at least 99% of the time
  (``tests/test_tasks_determinism.py`` measures it), and the re-run divides what is left by 6;
* **each input alone, everywhere** (``tasks.calls: alone``): a program given several inputs (code_f)
  runs each of them in a fresh child of its own, in every execution, in the check's re-run
  (``rerun_programs``) and in the checker of students' answers (``kinds/code_f.py``). So a task's
  output is what ``f`` gives for that input alone, with the whole of every limit, which is what the
  student is told and how the student's program is judged: a program whose output depends on its
  call history has one meaning everywhere (issue 37: issue 32's layout ran the first execution
  alone and the others in one child in a drawn order, while the checker ran a student's program on
  the hidden inputs in one child, so a program that changed its output on the fifth call in the
  checker's order passed validation and then failed its own task). The replicas then vary what a
  task must not depend on, the hash seed and the process (addresses), not the order of the calls:
  children of one execution share nothing;
* **turns** (``tasks.replicas_in_turn``): the executions run one turn after the other (turn ``k``
  holds every proposal's ``k``-th execution), so two executions that are compared never overlap in
  time; a proposal that already failed or disagreed leaves the next turns (``tasks.early_stop``).

``tasks.replica_seeds: fixed``, ``calls: together``, ``early_stop: false`` and two replicas give the
layout before issue 32, and ``calls: first_alone`` issue 32's, kept to measure what each measure
costs (``populora bench executor``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Sequence

from populora.sandbox.api import OK, Outcome, Program
from populora.tasks.kinds.registry import get_kind
from populora.tasks.records import NONDETERMINISTIC

MAX_HASH_SEED = 4_294_967_295  # PYTHONHASHSEED's largest value; 0 would switch randomisation off


def replica_seed(run_seed: int, step: int, replica: int) -> int:
    """The ``PYTHONHASHSEED`` of replica ``replica`` at step ``step`` of the run with ``run_seed``:
    in [1, 2**32 - 1], a pure function of the three (SHA-256 of their text), independent across
    replicas and steps."""
    digest = hashlib.sha256(f"populora-replica-seed:{int(run_seed)}:{int(step)}:{int(replica)}".encode()).digest()
    return 1 + int.from_bytes(digest[:8], "big") % MAX_HASH_SEED


def rerun_replica(replicas: Sequence[int]) -> int:
    """The replica number of the check stage's re-run: one the executions did not use."""
    return max(replicas) + 1


def run_seed_of(sandbox) -> int:
    """The run seed the seeds are drawn from: the sandbox's ``hash_seed`` (the run's seed)."""
    return int(getattr(sandbox, "hash_seed", 0) or 0)


def call_order(n: int, k: int, seed: int | None, env) -> list[int]:
    """The order in which the ``k``-th execution calls ``f`` on ``n`` inputs in one child (input
    indices), in the layouts kept to measure (``tasks.calls: alone`` makes no such calls).

    ``first_alone`` (issue 32): an order drawn from the execution's seed (or its replica number under
    fixed seeds). ``together`` (before issue 32): odd executions run the inputs in reverse order."""
    order = list(range(n))
    if env.calls == "first_alone":
        random.Random(f"populora-call-order:{seed}:{k}").shuffle(order)
        return order
    return order[::-1] if k % 2 else order


def runs_alone(env, n_inputs: int, k: int) -> bool:
    """Whether the ``k``-th execution of a program on ``n_inputs`` inputs runs each input in a fresh
    child of its own: always under ``tasks.calls: alone``; only the first execution under
    ``first_alone``; never under ``together`` (one input is one child in every layout)."""
    return n_inputs > 1 and (env.calls == "alone" or (env.calls == "first_alone" and k == 0))


def execution_programs(program: str, inputs: tuple[str, ...], k: int, replica: int, seed: int | None,
                       env) -> tuple[list[Program], list[int] | None]:
    """The programs of the ``k``-th execution of ``program`` on ``inputs`` under replica number
    ``replica`` (with ``seed``, or the replica's fixed seed when None), and the order of the calls
    when one program makes them all (None: one program per input, ``runs_alone``: ``f`` on its input
    with no state from any other call)."""
    common = {"entry": env.entry, "replica": replica, "hash_seed": seed}
    if runs_alone(env, len(inputs), k):
        return [Program(program, calls=(text,), **common) for text in inputs], None
    order = call_order(len(inputs), k, seed, env)
    return [Program(program, calls=tuple(inputs[i] for i in order), **common)], order


def merged(outcomes: Sequence[Outcome], order: list[int] | None = None) -> Outcome:
    """One outcome, values in input order, for the programs of one execution: one program that
    called ``f`` on the inputs in ``order``, or one program per input (``order`` None): the first
    failure (in input order), else every value."""
    if order is not None:
        out = outcomes[0]
        if not out.ok or len(out.values) != len(order):
            return out
        values = [""] * len(order)
        for position, index in enumerate(order):
            values[index] = out.values[position]
        return dataclasses.replace(out, values=values)
    for out in outcomes:
        if out.status != OK:
            return out
    values = [v for out in outcomes for v in out.values]
    return Outcome(OK, values=values, seconds=sum(o.seconds for o in outcomes))


def seeds_for(env, run_seed: int, step: int) -> list[int | None]:
    """The hash seed of each execution (None: the replica's fixed seed)."""
    if env.replica_seeds == "fixed":
        return [None] * len(env.replicas)
    return [replica_seed(run_seed, step, r) for r in env.replicas]


def run_executions(sandbox, runs: Sequence[tuple[str, str, tuple[str, ...]]], env, run_seed: int, step: int
                   ) -> list[tuple[str | None, list[str], float]]:
    """Execute every ``(kind, program, inputs)`` of ``runs`` in the replicas and compare; one
    ``(reason or None, outputs, seconds)`` per run. Outputs are in input order; ``seconds`` is the
    longest execution's. With ``env.replicas_in_turn`` one ``run_many`` per turn; with
    ``env.early_stop`` a run that failed or disagreed leaves the next turns."""
    seeds = seeds_for(env, run_seed, step)
    n_rep = len(env.replicas)
    result: list[tuple[str | None, list[str], float] | None] = [None] * len(runs)
    first: list[list[str] | None] = [None] * len(runs)
    seconds = [0.0] * len(runs)
    pending = list(range(len(runs)))
    turns = [[k] for k in range(n_rep)] if env.replicas_in_turn else [list(range(n_rep))]
    for turn in turns:
        if not pending:
            break
        programs: list[Program] = []
        spans: list[tuple[int, list[int] | None, int, int]] = []  # (run, call order, first program, count)
        for r in pending:
            _, program, inputs = runs[r]
            for k in turn:
                progs, order = execution_programs(program, inputs, k, env.replicas[k], seeds[k], env)
                spans.append((r, order, len(programs), len(progs)))
                programs.extend(progs)
        outcomes = sandbox.run_many(programs)
        if len(outcomes) != len(programs):
            raise RuntimeError(f"validate_many: the sandbox returned {len(outcomes)} outcomes for {len(programs)} programs")
        for r, order, start, count in spans:
            if result[r] is not None:
                continue
            kind_name, _, inputs = runs[r]
            out = merged(outcomes[start:start + count], order)
            seconds[r] = max(seconds[r], out.seconds)
            reason, values = get_kind(kind_name).outputs_of(out, len(inputs))
            if reason is not None:
                result[r] = (reason, [], seconds[r])
            elif first[r] is None:
                first[r] = values
            elif values != first[r]:
                result[r] = (NONDETERMINISTIC, [], seconds[r])
        if env.early_stop:
            pending = [r for r in pending if result[r] is None]
    return [res if res is not None else (None, first[r] or [], seconds[r]) for r, res in enumerate(result)]


def rerun_programs(program: str, inputs: tuple[str, ...], env, run_seed: int, step: int
                   ) -> tuple[list[Program], list[int] | None]:
    """The check stage's re-run of a task's program on its gold inputs: under one more replica's
    seed (``rerun_replica``), run as an execution after the first (``execution_programs``: each
    input alone under ``tasks.calls: alone``); and the order of its calls (None: each alone)."""
    replica = rerun_replica(env.replicas)
    seed = None if env.replica_seeds == "fixed" else replica_seed(run_seed, step, replica)
    return execution_programs(program, inputs, len(env.replicas), replica, seed, env)


def rerun_changed(kind_name: str, inputs: tuple[str, ...], outputs: tuple[str, ...], outcomes: Sequence[Outcome],
                  order: list[int] | None) -> bool | None:
    """Whether the re-run (``outcomes`` of ``rerun_programs``, whose calls ran in ``order``) no
    longer gives the gold ``outputs``.

    Any outcome the program can bring about counts: an error, a memory or CPU-time limit, an exit,
    a signal, a stall past the wall-clock limit, a forged result. Only an outcome the sandbox proves
    is not the program's doing (``Outcome.infrastructure``: a dead or failing fork server, a child
    that could not be confined, a program starved of CPU by the host) gives None: the task keeps
    its verdict, untested."""
    if any(o.infrastructure for o in outcomes):
        return None
    out = merged(outcomes, order)
    reason, values = get_kind(kind_name).outputs_of(out, len(inputs))
    return reason is not None or tuple(values) != tuple(outputs)
