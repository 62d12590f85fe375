"""The stages of one self-play step as small functions on typed records (see ``loop.py`` for the order
and ``records.py`` for the records).

Everything here is deterministic given its inputs and the random generator passed in; the only side
effects are the sandbox calls in ``validate`` and ``check``. A stage whose infrastructure fails
returns a ``StageError`` value beside its records (the loop merges it into the step's metrics);
nothing here writes files or shared state.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from populora.config import Config
from populora.policy.base import GenerationResult
from populora.population import ratings
from populora.selfplay.budget import Usage, budget_for, per_type
from populora.selfplay.metrics import mean
from populora.selfplay.records import (
    GENERATION_ERROR,
    SANDBOX_ERROR,
    TASK_NONDETERMINISTIC,
    ProposalJob,
    ProposalRecord,
    Seq,
    SolveGroup,
    StageError,
    is_refused,
    is_unjudged,
)
from populora.tasks import checking, parsing, prompts, rewards, validation
from populora.tasks.config import TaskEnv
from populora.tasks.kinds.registry import get_kind
from populora.tasks.records import NONDETERMINISTIC, Attempt, Proposal, Task, Verdict, reason_kind

log = logging.getLogger(__name__)

__all__ = ["GENERATION_ERROR", "SANDBOX_ERROR", "TASK_NONDETERMINISTIC", "ProposalJob", "ProposalRecord", "Seq",
           "SolveGroup", "StageError"]


# -- 2. propose --------------------------------------------------------------------------------------
def proposal_jobs(teachers, buffers, env: TaskEnv, n_proposals: Callable, rng) -> list[ProposalRecord]:
    """Every teacher's prompts: ``n_proposals(member)`` split evenly over the task types. A kind whose
    teacher is given a program (code_f) gets one from the buffers; the others get K references."""
    out: list[ProposalRecord] = []
    for member in teachers:
        for task_type, count in per_type(n_proposals(member), env.types).items():
            kind = get_kind(task_type)
            for _ in range(count):
                refs = buffers.references(task_type, env.references, rng)
                program = buffers.sample_program(rng) if kind.given_program else None
                question = prompts.teacher_prompt(task_type, refs, env, program=program)
                out.append(ProposalRecord(len(out), ProposalJob(member.id, task_type, question, program)))
    return out


def with_generations(records: Sequence, gens: Sequence[GenerationResult | None]) -> list:
    """Attach one generation (or None when it failed) to each record, in order."""
    if len(gens) != len(records):
        raise ValueError(f"with_generations: {len(gens)} generations for {len(records)} records")
    return [replace(r, generation=g) for r, g in zip(records, gens)]


def parse_proposals(records: Sequence[ProposalRecord], step: int, env: TaskEnv) -> list[ProposalRecord]:
    """Parse each teacher completion under ``env``'s format rules; the answer prefill written into the
    prompt (``prompts.prefill``) is read as the start of the completion."""
    out = []
    for r in records:
        job, gen = r.job, r.generation
        if gen is None or not gen.completions or gen.completions[0].finish_reason == "abort":
            p = Proposal(type=job.task_type, program=job.program or "", teacher_id=job.member_id, step=step,
                         reason=GENERATION_ERROR)
        else:
            p = parsing.parse_proposal(prompts.prefill("teacher", job.task_type, env) + gen.completions[0].text,
                                       job.task_type, env, program=job.program, teacher_id=job.member_id, step=step)
        out.append(replace(r, proposal=p))
    return out


# -- 3. validate -------------------------------------------------------------------------------------
def validate(records: Sequence[ProposalRecord], sandbox, env: TaskEnv
             ) -> tuple[list[ProposalRecord], StageError | None]:
    """All proposals in one parallel sandbox batch; a sandbox failure is an infrastructure error
    (``sandbox_error``: no reward, no training, and a ``StageError``), never a crash."""
    error = None
    try:
        verdicts = validation.validate_many([r.proposal for r in records], sandbox, env)
    except Exception as e:
        log.exception("validation failed for %d proposals", len(records))
        error = StageError.of("validate", e)
        verdicts = [Verdict(valid=False, reason=SANDBOX_ERROR) for _ in records]
    return [replace(r, verdict=v) for r, v in zip(records, verdicts)], error


# -- 4. solve ----------------------------------------------------------------------------------------
def solve_plan(pairs: Mapping[str, str], records: Sequence[ProposalRecord], buffers, cfg: Config,
               attempt_budget: Mapping[str, int], rng) -> list[SolveGroup]:
    """One ``SolveGroup`` per task a student attempts (n rollouts each).

    Every fresh valid task of a student's matched teacher(s) is attempted (the teacher's reward needs
    its solve rate). If that gives fewer than ``budget / n`` tasks, buffer tasks are added so that the
    student can train on exactly its budget (see ``budget.py``).
    """
    n = cfg.selfplay.rollouts
    fresh: dict[str, dict[str, Task]] = defaultdict(dict)
    for r in records:
        if r.valid and r.member_id in pairs:
            fresh[pairs[r.member_id]].setdefault(r.task.id, r.task)
    plan: list[tuple[str, Task, bool]] = []
    for sid in sorted(attempt_budget):
        groups = attempt_budget[sid] // n
        tasks = list(fresh.get(sid, {}).values())
        plan += [(sid, task, True) for task in tasks]
        seen = {task.id for task in tasks}
        plan += [(sid, task, False) for task in top_up(buffers, groups - len(tasks), seen, cfg.tasks.types, rng)]
    return [SolveGroup(i, sid, task, f) for i, (sid, task, f) in enumerate(plan)]


def top_up(buffers, count: int, exclude: set[str], types: list[str], rng) -> list[Task]:
    """``count`` distinct buffer tasks not in ``exclude``, cycling over the task types."""
    if count <= 0:
        return []
    pools = {tt: [t for t in buffers[tt] if t.id not in exclude] for tt in types}
    for pool in pools.values():
        rng.shuffle(pool)
    out: list[Task] = []
    while len(out) < count and any(pools.values()):
        for tt in types:
            if pools[tt] and len(out) < count:
                out.append(pools[tt].pop())
    if len(out) < count:  # tiny buffers: repeat tasks rather than train on fewer sequences
        everything = [t for tt in types for t in buffers[tt]]
        out += [rng.choice(everything) for _ in range(count - len(out))]
    return out


def student_question(task: Task, env: TaskEnv) -> str:
    """The student's question for ``task`` (unwrapped)."""
    return prompts.student_prompt(task, env)


# -- 5. check ----------------------------------------------------------------------------------------
def check(groups: Sequence[SolveGroup], sandbox, env: TaskEnv) -> tuple[list[SolveGroup], StageError | None]:
    """Parse and check every rollout in one sandbox batch under ``env``. Never raises on model text.

    The answer prefill written into the student's prompt (``prompts.prefill``) is read as the start of
    the completion. When the verifier itself fails, every attempt of the batch is marked
    ``sandbox_error`` (an infrastructure error: excluded from rho and from training, and a
    ``StageError``), not scored as the student's fault. In the same batch every task's own program
    runs once more on its gold inputs; the attempts at a task whose program no longer gives its gold
    outputs are marked ``task_nondeterministic`` (they count for nothing, and ``teacher_rewards``
    makes the task invalid). An attempt at a task whose gold was computed under other sandbox limits
    keeps the checker's ``limits_changed:<field>`` and counts for nothing too (``refused_tasks``).
    """
    flat = [(g, c) for g in groups for c in (g.generation.completions if g.generation is not None else [])]
    to_judge = [k for k, (_, c) in enumerate(flat) if c.finish_reason != "abort"]  # the engine lost the rest
    # (no sandbox, as in unit tests of answers that need none: no re-run)
    rerun = list({flat[k][0].task.id: flat[k][0].task for k in to_judge}.values()) if sandbox is not None else []
    changed: frozenset[str] = frozenset()
    error = None
    try:
        judged_some, changed = checking.check_and_rerun(
            [(flat[k][0].task, prompts.prefill("student", flat[k][0].task.type, env) + flat[k][1].text)
             for k in to_judge], rerun, sandbox, env)
    except Exception as e:
        log.exception("checking failed for %d attempts", len(flat))
        error = StageError.of("check", e)
        judged_some = [None] * len(to_judge)
    judged: list = [GENERATION_ERROR] * len(flat)
    for k, j in zip(to_judge, judged_some):
        judged[k] = j
    attempts: dict[int, list[Attempt]] = defaultdict(list)
    for (g, c), j in zip(flat, judged):
        if j is GENERATION_ERROR or j is None or g.task.id in changed:  # counts for nothing (is_unjudged)
            lost = GENERATION_ERROR if j is GENERATION_ERROR else SANDBOX_ERROR if j is None else TASK_NONDETERMINISTIC
            att = Attempt(g.task.id, g.student_id, c.text, tuple(c.token_ids), reason=lost)
        else:
            att = checking.to_attempt(g.task, g.student_id, c.text, j, c.token_ids)
        attempts[g.index].append(att)
    return [replace(g, attempts=tuple(attempts.get(g.index, ()))) for g in groups], error


def solve_rates(groups: Sequence[SolveGroup]) -> dict[tuple[str, str], float]:
    """rho per (student, task id): the fraction of its judged rollouts that were correct."""
    return {(g.student_id, g.task.id): g.rho for g in groups if g.rho is not None}


# -- 6. rewards --------------------------------------------------------------------------------------
def nondeterministic_tasks(groups: Sequence[SolveGroup]) -> frozenset[str]:
    """Ids of the tasks whose program gave other outputs when run again at the check (see ``check``)."""
    return frozenset(g.task.id for g in groups if any(a.reason == TASK_NONDETERMINISTIC for a in g.attempts))


def refused_tasks(groups: Sequence[SolveGroup]) -> frozenset[str]:
    """Ids of the tasks the checker refused because their gold was computed under other sandbox
    limits than this run's (a run resumed with other limits: ``tasks/checking.py``); they cannot be
    judged here, so they leave the buffers."""
    return frozenset(g.task.id for g in groups if any(is_refused(a) for a in g.attempts))


def teacher_rewards(records: Sequence[ProposalRecord], rho: Mapping[tuple[str, str], float],
                    pairs: Mapping[str, str], variant: str,
                    nondeterministic: frozenset[str] = frozenset()) -> list[ProposalRecord]:
    """Each proposal's reward. None (no reward, not trained on) when there is no completion or when
    the verifier failed, or for a valid task whose student attempts could not be judged. A valid task
    found ``nondeterministic`` at the check becomes invalid (verdict ``nondeterministic``, the invalid
    reward, and it never joins the buffers): validation was fooled, not the students."""
    out = []
    for r in records:
        if r.valid and r.task.id in nondeterministic:
            r = replace(r, verdict=replace(r.verdict, valid=False, reason=NONDETERMINISTIC, task=None))
        reason = r.verdict.reason if r.verdict is not None else None
        if r.generation is None or not r.generation.completions or reason == SANDBOX_ERROR:
            reward = None
        elif not r.valid:
            reward = rewards.teacher_reward(False, None, variant)
        else:
            s = rho.get((pairs[r.member_id], r.task.id))
            reward = None if s is None else rewards.teacher_reward(True, s, variant)
        out.append(replace(r, reward=reward))
    return out


# -- 7. ratings --------------------------------------------------------------------------------------
def rating_games(pairs: Mapping[str, str], records: Sequence[ProposalRecord],
                 groups: Sequence[SolveGroup]) -> list[ratings.Game]:
    """The step's rated games: each teacher on the rewards of its proposals that carry a signal, each
    student on its rewards for the attempts at its matched teacher's fresh valid tasks (infrastructure
    losses left out). See ``populora.population.ratings``."""
    t_rewards: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.reward is not None and r.member_id in pairs:
            t_rewards[r.member_id].append(r.reward)
    s_rewards: dict[tuple[str, str], list[float]] = defaultdict(list)
    for g in groups:
        teacher = g.task.teacher_id
        if g.fresh and pairs.get(teacher) == g.student_id:
            s_rewards[(g.student_id, teacher)] += [a.reward for a in g.scored]
    return ratings.step_games(pairs, t_rewards, s_rewards)


# -- 8. training batches -----------------------------------------------------------------------------
def training_batches(members: Mapping, records: Sequence[ProposalRecord], groups: Sequence[SolveGroup],
                     cfg: Config, rng) -> tuple[dict[str, list[Seq]], dict[str, Usage]]:
    """Each member's sequences for this step: exactly its budget (compute matching), less what the
    infrastructure lost (failed generations, verifier errors); and what each member used (its
    ``Usage``: proposals, rollouts, sequences and tokens; optimizer steps are the trainer's)."""
    batches: dict[str, list[Seq]] = {mid: [] for mid in members}
    usage = {mid: Usage() for mid in members}
    for r in records:
        u = usage[r.member_id]
        u.proposals += 1
        gen = r.generation
        if gen is None or not gen.completions or r.reward is None:
            continue
        c = gen.completions[0]
        batches[r.member_id].append(Seq("teacher", r.job.task_type, gen.prompt_token_ids, c.token_ids, c.logprobs,
                                        r.reward, f"p{r.index}"))
        u.prompt_tokens += len(gen.prompt_token_ids)
        u.completion_tokens += len(c.token_ids)
    n = cfg.selfplay.rollouts
    by_student: dict[str, list[SolveGroup]] = defaultdict(list)
    for g in groups:
        by_student[g.student_id].append(g)
        usage[g.student_id].rollouts += len(g.attempts)
    for sid, own in by_student.items():
        n_groups = budget_for(cfg, members[sid].role).attempts // n
        fresh = [g for g in own if g.fresh]
        if len(fresh) > n_groups:
            chosen = [fresh[i] for i in sorted(rng.sample(range(len(fresh)), n_groups))]
        else:
            chosen = fresh + [g for g in own if not g.fresh][: n_groups - len(fresh)]
        for g in chosen:
            if g.generation is None:
                continue
            for c, att in zip(g.generation.completions, g.attempts):
                if is_unjudged(att):
                    continue
                batches[sid].append(Seq("student", g.task.type, g.generation.prompt_token_ids, c.token_ids,
                                        c.logprobs, att.reward, f"s{g.index}"))
                usage[sid].attempts += 1
                usage[sid].prompt_tokens += len(g.generation.prompt_token_ids)
                usage[sid].completion_tokens += len(c.token_ids)
    for mid, seqs in batches.items():
        usage[mid].sequences = len(seqs)
    return {mid: seqs for mid, seqs in batches.items() if seqs}, usage


# -- rates and examples ------------------------------------------------------------------------------
def step_rates(members: Mapping, records: Sequence[ProposalRecord], groups: Sequence[SolveGroup]) -> dict:
    """Per-step rates under stable names (teacher/<type>/..., student/<type>/..., member/<id>/...)."""
    m: dict = {}
    by_type: dict[str, list[ProposalRecord]] = defaultdict(list)
    reasons: Counter = Counter()
    for r in records:
        by_type[r.job.task_type].append(r)
        if not r.valid:
            reasons[reason_kind(r.verdict.reason if r.verdict else None) or "other"] += 1
    for tt, rs in by_type.items():
        m[f"teacher/{tt}/valid_rate"] = mean(float(r.valid) for r in rs)
        m[f"teacher/{tt}/reward_mean"] = mean(r.reward for r in rs if r.reward is not None)
    for k, c in reasons.items():
        m[f"teacher/reject/{k}"] = c
    member_rewards: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.reward is not None:
            member_rewards[r.member_id].append(r.reward)
    for g in groups:
        member_rewards[g.student_id] += [a.reward for a in g.scored]
    for mid in members:
        own = [r.valid for r in records if r.member_id == mid]
        if own:
            m[f"member/{mid}/valid_rate"] = mean(float(x) for x in own)
        if member_rewards.get(mid):
            m[f"member/{mid}/reward_mean"] = mean(member_rewards[mid])
    s_type: dict[str, list[Attempt]] = defaultdict(list)
    s_member: dict[str, list[Attempt]] = defaultdict(list)
    for g in groups:
        s_type[g.task.type] += g.scored
        s_member[g.student_id] += g.scored
    for tt, atts in s_type.items():
        if not atts:
            continue
        m[f"student/{tt}/solve_rate"] = mean(a.score for a in atts)
        m[f"student/{tt}/format_rate"] = mean(float(a.format_ok) for a in atts)
        m[f"student/{tt}/reward_mean"] = mean(a.reward for a in atts)
    for sid, atts in s_member.items():
        if atts:
            m[f"member/{sid}/solve_rate"] = mean(a.score for a in atts)
    m["student/fresh_solve_rate"] = mean(g.rho for g in groups if g.fresh and g.rho is not None)
    m["student/infra_errors"] = sum(len(g.attempts) - len(g.scored) for g in groups)
    m["student/refused"] = sum(1 for g in groups if g.generation is not None and g.generation.refused)
    m["teacher/refused"] = sum(1 for r in records if r.generation is not None and r.generation.refused)
    m["teacher/infra_errors"] = sum(1 for r in records if r.verdict is not None and r.verdict.reason == SANDBOX_ERROR)
    m["teacher/valid_tasks"] = sum(1 for r in records if r.valid)
    m["teacher/proposals"] = len(records)
    return m


def example_rows(step: int, records: Sequence[ProposalRecord], groups: Sequence[SolveGroup],
                 keep: int = 3) -> list[dict]:
    """A few proposals of the step with their verdicts and the students' results, for humans
    (``examples.jsonl``): the first ``keep`` valid ones and the first invalid one."""
    solved: dict[str, list[bool]] = defaultdict(list)
    for g in groups:
        solved[g.task.id] += [a.correct for a in g.scored]
    rows, n_valid, n_invalid = [], 0, 0
    for r in records:
        if r.valid and n_valid < keep:
            n_valid += 1
            t = r.task
            rows.append({"step": step, "teacher": r.member_id, "type": t.type, "valid": True, "program": t.program,
                         "input": t.input or list(t.inputs), "output": t.output or list(t.outputs),
                         "message": t.message, "student_correct": sum(solved.get(t.id, [])),
                         "student_attempts": len(solved.get(t.id, []))})
        elif not r.valid and n_invalid < 1:
            n_invalid += 1
            rows.append({"step": step, "teacher": r.member_id, "type": r.job.task_type, "valid": False,
                         "reason": r.verdict.reason if r.verdict else None})
    return rows
