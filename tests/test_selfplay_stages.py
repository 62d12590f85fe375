"""The pure stages of a step on small hand-made records (no model, no sandbox process: milliseconds)."""

from __future__ import annotations

import random

import pytest

from populora.config import load_config
from populora.policy.base import Completion, GenerationResult
from populora.population.members import Member
from populora.population.ratings import Rating
from populora.selfplay import stages
from populora.selfplay.records import SANDBOX_ERROR, ProposalJob, ProposalRecord, SolveGroup
from populora.tasks.buffers import TaskBuffers
from populora.tasks.records import Attempt, Task, Verdict

CFG = load_config(None, ["selfplay.sequences_per_adapter=6", "selfplay.rollouts=3", "tasks.types=[code_o,code_i]",
                         "population.teachers=1", "population.students=1"])
ENV = CFG.tasks.replace(require_think=False)  # answers in <answer> tags, no reasoning required
R0 = Rating(25.0, 8.3)
MEMBERS = {"t0": Member("t0", "teacher", "t0", R0), "s0": Member("s0", "student", "s0", R0)}


def gen(text: str = "x", n: int = 1, tokens: tuple[int, ...] = (7, 8)) -> GenerationResult:
    return GenerationResult([1, 2, 3], [Completion(list(tokens), text, [-0.1] * len(tokens), "stop") for _ in range(n)])


def task(i: int, tt: str = "code_o") -> Task:
    return Task(id=f"{tt}-{i}", type=tt, program=f"def f(x):\n    return x + {i}", input="1", output=repr(1 + i))


def record(i: int, valid: bool = True, reason: str | None = None, g=True, tt: str = "code_o") -> ProposalRecord:
    verdict = Verdict(True, None, task=task(i, tt)) if valid else Verdict(False, reason or "syntax_error")
    return ProposalRecord(i, ProposalJob("t0", tt, "q"), gen() if g else None, None, verdict)


def attempt(score: float, fmt: bool = True, reason: str | None = None) -> Attempt:
    reward = {1.0: 1.0, 0.0: -0.5}[score] if fmt else -1.0
    return Attempt("t", "s0", "c", (7,), "a", fmt, score == 1.0, score, reward if reason != SANDBOX_ERROR else 0.0,
                   reason)


def test_parse_proposals_reads_the_completion_and_marks_failed_generation():
    text = "<answer>\n```python\ndef f(x):\n    return x\n```\n```input\n3\n```\n</answer>"
    recs = [ProposalRecord(0, ProposalJob("t0", "code_o", "q"), gen(text)),
            ProposalRecord(1, ProposalJob("t0", "code_o", "q"), None)]
    out = stages.parse_proposals(recs, 4, ENV)
    assert out[0].proposal.program.startswith("def f(x)") and out[0].proposal.inputs == ("3",)
    assert out[0].proposal.step == 4 and out[0].proposal.reason is None
    assert out[1].proposal.reason == stages.GENERATION_ERROR
    assert recs[0].proposal is None  # records are immutable: stages return new ones


def test_solve_plan_attempts_every_fresh_task_then_tops_up_from_the_buffer():
    buffers = TaskBuffers(capacity=16)
    for i in range(10, 14):
        buffers.add(task(i))
    recs = [record(0), record(1, valid=False), record(2)]
    groups = stages.solve_plan({"t0": "s0"}, recs, buffers, CFG, {"s0": 12}, random.Random(0))
    assert [g.index for g in groups] == [0, 1, 2, 3]
    assert [(g.task.id, g.fresh) for g in groups[:2]] == [("code_o-0", True), ("code_o-2", True)]
    assert all(not g.fresh for g in groups[2:]) and len({g.task.id for g in groups}) == 4


def test_solve_rate_ignores_attempts_the_verifier_lost():
    g = SolveGroup(0, "s0", task(0), True, gen(n=3), (attempt(1.0), attempt(0.0), attempt(0.0, reason=SANDBOX_ERROR)))
    assert g.rho == 0.5 and len(g.scored) == 2
    lost = SolveGroup(1, "s0", task(1), True, gen(n=1), (attempt(0.0, reason=SANDBOX_ERROR),))
    assert lost.rho is None and stages.solve_rates([g, lost]) == {("s0", "code_o-0"): 0.5}


def test_teacher_rewards_from_validity_and_rho():
    recs = [record(0), record(1), record(2, valid=False), record(3, valid=False, reason=SANDBOX_ERROR),
            record(4, g=False), record(5)]
    rho = {("s0", "code_o-0"): 0.25, ("s0", "code_o-1"): 1.0}  # task 5: its attempts were all lost
    out = stages.teacher_rewards(recs, rho, {"t0": "s0"}, "populora")
    assert [r.reward for r in out] == [0.75, 0.0, -1.0, None, None, None]
    assert stages.teacher_rewards(recs[1:2], rho, {"t0": "s0"}, "azr")[0].reward == -0.5


def test_training_batches_match_the_budget_and_skip_what_carries_no_signal():
    recs = stages.teacher_rewards([record(0), record(1, valid=False), record(2, valid=False, reason=SANDBOX_ERROR)],
                                  {("s0", "code_o-0"): 0.5}, {"t0": "s0"}, "populora")
    # student budget: 6 sequences = 2 groups of 3; three fresh groups -> a seeded subset of two
    groups = [SolveGroup(i, "s0", task(i), True, gen(n=3), (attempt(1.0), attempt(0.0), attempt(0.0)))
              for i in range(3)]
    groups.append(SolveGroup(3, "s0", task(9), False, gen(n=3), (attempt(1.0),) * 3))
    batches, usage = stages.training_batches(MEMBERS, recs, groups, CFG, random.Random(0))
    assert [s.prompt_group for s in batches["t0"]] == ["p0", "p1"]  # the sandbox_error proposal is dropped
    assert [s.reward for s in batches["t0"]] == [0.5, -1.0]
    assert len(batches["s0"]) == 6 and usage["s0"].sequences == 6 and usage["s0"].rollouts == 12
    assert {s.prompt_group for s in batches["s0"]} <= {"s0", "s1", "s2"}  # fresh groups before top-ups
    again = stages.training_batches(MEMBERS, recs, groups, CFG, random.Random(0))
    assert again == (batches, usage)  # the subset is drawn from the step's seeded generator


def test_training_batches_drop_attempts_lost_to_the_verifier():
    groups = [SolveGroup(0, "s0", task(0), True, gen(n=3),
                         (attempt(1.0), attempt(0.0, reason=SANDBOX_ERROR), attempt(0.0))),
              SolveGroup(1, "s0", task(1), False, gen(n=3), (attempt(0.0, fmt=False),) * 3)]
    batches, usage = stages.training_batches(MEMBERS, [], groups, CFG, random.Random(0))
    assert [s.reward for s in batches["s0"]] == [1.0, -0.5, -1.0, -1.0, -1.0]


def test_check_without_a_working_verifier_marks_infrastructure_errors():
    class Broken:
        def run_many(self, programs):
            raise OSError("down")

    groups = [SolveGroup(0, "s0", task(0, "code_i"), True, gen("<answer>\n```input\n1\n```\n</answer>", n=2))]
    out, error = stages.check(groups, Broken(), ENV)
    assert error.as_metrics() == {"errors/check": 1, "errors/check_reason": "OSError: down"}
    assert [a.reason for a in out[0].attempts] == [SANDBOX_ERROR, SANDBOX_ERROR] and out[0].rho is None
    m = stages.step_rates(MEMBERS, [], out)
    assert m["student/infra_errors"] == 2 and "member/s0/solve_rate" not in m


def test_check_code_o_needs_no_sandbox_and_scores_each_rollout():
    t = task(0)  # f(1) == 1
    groups = [SolveGroup(0, "s0", t, True, GenerationResult([1], [
        Completion([7], "<answer>\n```output\n1\n```\n</answer>", [-0.1], "stop"),
        Completion([7], "<answer>\n```output\n2\n```\n</answer>", [-0.1], "stop"),
        Completion([7], "no answer", [-0.1], "stop")]))]
    out = stages.check(groups, None, ENV)[0]
    assert [(a.correct, a.format_ok, a.reward) for a in out[0].attempts] == [
        (True, True, 1.0), (False, True, -0.5), (False, False, -1.0)]
    assert out[0].rho == pytest.approx(1 / 3)


def test_completions_the_engine_aborted_count_for_nothing():
    aborted = GenerationResult([1], [Completion([7], "<answer>\n```output\n1\n```\n</answer>", [-0.1], "abort"),
                                     Completion([7], "<answer>\n```output\n1\n```\n</answer>", [-0.1], "stop")])
    out = stages.check([SolveGroup(0, "s0", task(0), True, aborted)], None, ENV)[0]
    assert [a.reason for a in out[0].attempts] == [stages.GENERATION_ERROR, None] and out[0].rho == 1.0
    rec = stages.parse_proposals([ProposalRecord(0, ProposalJob("t0", "code_o", "q"), aborted)], 1, ENV)
    assert rec[0].proposal.reason == stages.GENERATION_ERROR
    refused = GenerationResult([1] * 9000, [], refused="prompt_too_long:9000")
    m = stages.step_rates(MEMBERS, [], [SolveGroup(0, "s0", task(0), True, refused)])
    assert m["student/refused"] == 1


class _Rerun:
    """A sandbox whose executions of a task's own program return ``value`` (a time bomb: validated
    with one output, it gives another at the check)."""

    def __init__(self, value: str):
        self.value, self.programs = value, []

    def run_many(self, programs):
        from populora.sandbox import Outcome

        self.programs += programs
        return [Outcome("ok", None, [self.value] * len(p.calls)) for p in programs]


def test_a_task_whose_program_changes_its_answer_at_the_check_is_invalid():
    t = task(0)  # validated: f(1) == 1
    right = "<answer>\n```output\n1\n```\n</answer>"
    groups = [SolveGroup(0, "s0", t, True, gen(right, n=2)), SolveGroup(1, "s0", t, False, gen(right, n=1))]
    same = stages.check(groups, _Rerun("1"), ENV)[0]
    assert [a.correct for g in same for a in g.attempts] == [True, True, True]
    assert stages.nondeterministic_tasks(same) == frozenset()

    sandbox = _Rerun("2")  # the program now returns 2 for its gold input
    out = stages.check(groups, sandbox, ENV)[0]
    assert len(sandbox.programs) == 1 and sandbox.programs[0].calls == ("1",)  # once per task, on its gold input
    assert {a.reason for g in out for a in g.attempts} == {stages.TASK_NONDETERMINISTIC}
    assert out[0].rho is None and stages.solve_rates(out) == {}
    assert stages.nondeterministic_tasks(out) == {"code_o-0"}
    rewarded = stages.teacher_rewards([record(0)], {}, {"t0": "s0"}, "populora", stages.nondeterministic_tasks(out))
    assert rewarded[0].reward == -1.0 and not rewarded[0].valid and rewarded[0].verdict.reason == "nondeterministic"
    batches, _ = stages.training_batches(MEMBERS, rewarded, out, CFG, random.Random(0))
    assert "s0" not in batches  # no student sequence on a task without a right answer
    bufs = TaskBuffers()
    bufs.add(t)
    assert bufs.discard({"code_o-0"}) == 1 and t not in bufs["code_o"] and bufs.discard({"code_o-0"}) == 0


def test_a_rerun_outcome_the_program_can_choose_is_a_change():
    """issue 32: a limit, an exit or a signal at the re-run is the program's doing (it can stall or
    exhaust a limit at will); only a failure the sandbox proves is its own keeps the verdict."""
    from populora.sandbox import Outcome
    from populora.tasks import checking

    t = task(0)
    for chosen in (Outcome("timeout", "timeout"), Outcome("memory", "memory"), Outcome("crashed", "crashed:SystemExit"),
                   Outcome("crashed", "crashed:SIGKILL"), Outcome("crashed", "crashed:exit_121")):
        assert checking.rerun_changed(t, chosen) is True, chosen
    assert checking.rerun_changed(t, Outcome("crashed", "crashed:server_died", infrastructure=True)) is None
    assert checking.rerun_changed(t, Outcome("timeout", "timeout", infrastructure=True)) is None  # starved
    assert checking.rerun_changed(t, Outcome("error", "runtime_error:ValueError")) is True
    assert checking.rerun_changed(t, Outcome("ok", None, ["1"])) is False
    f = Task(id="f", type="code_f", program="def f(x):\n    return x", inputs=("1", "2", "3"), outputs=("1", "2", "3"),
             n_shown=1)
    assert checking.rerun_changed(f, Outcome("ok", None, ["1", "2", "3"])) is False
    assert checking.rerun_changed(f, Outcome("ok", None, ["1", "2", "4"])) is True


def test_a_task_whose_gold_was_computed_under_other_limits_is_refused_and_counts_for_nothing():
    """issue 37: a task records the sandbox limits of its gold; a checker with other limits (a run
    resumed with another sandbox.memory_mb) refuses its answers (limits_changed:<field>), runs
    nothing for it, and the stage counts them for nothing; a task without the record (written
    before issue 37) is judged as before."""
    from dataclasses import replace

    from populora.sandbox import SandboxLimits
    from populora.tasks.records import GoldLimits

    sandbox = _Rerun("1")
    sandbox.limits = SandboxLimits(memory_mb=512)
    right = "<answer>\n```output\n1\n```\n</answer>"
    ours = replace(task(0), limits=GoldLimits.of(SandboxLimits(memory_mb=512)))
    other = replace(task(0), id="code_o-9", limits=GoldLimits.of(SandboxLimits(memory_mb=256)))
    legacy = replace(task(0), id="code_o-8")
    groups = [SolveGroup(i, "s0", t, False, gen(right, n=2)) for i, t in enumerate((ours, other, legacy))]
    out = stages.check(groups, sandbox, ENV)[0]
    assert [[a.reason for a in g.attempts] for g in out] == [[None] * 2, ["limits_changed:memory_mb"] * 2, [None] * 2]
    assert [p.calls for p in sandbox.programs] == [("1",), ("1",)]  # the refused task is not re-run
    assert out[1].rho is None and not out[1].scored and stages.solve_rates(out) == {("s0", "code_o-0"): 1.0,
                                                                                    ("s0", "code_o-8"): 1.0}
    assert stages.refused_tasks(out) == {"code_o-9"} and stages.nondeterministic_tasks(out) == frozenset()
    batches, _ = stages.training_batches(MEMBERS, [], out, CFG, random.Random(0))
    assert all(s.reward == 1.0 for s in batches["s0"])  # no sequence of the refused task
