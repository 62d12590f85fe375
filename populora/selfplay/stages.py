"""The stages of one self-play step as small functions (see ``loop.py`` for the order).

Everything here is deterministic given its inputs and the random generator passed in; the only
side effects are the sandbox calls in ``validate`` and ``check`` and ``write_examples``.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from populora.config import Config
from populora.population import ratings
from populora.selfplay.budget import Usage, budget_for, per_type
from populora.selfplay.metrics import mean
from populora.tasks import checking, parsing, prompts, rewards, validation
from populora.tasks.records import CODE_F, Attempt, Proposal, Task, Verdict, reason_kind

log = logging.getLogger(__name__)

SANDBOX_ERROR = "sandbox_error"
GENERATION_ERROR = "generation_error"
OUTCOME_SCORE = {ratings.STUDENT_WINS: 1.0, ratings.DRAW: 0.5, ratings.TEACHER_WINS: 0.0}  # student's score


@dataclass(frozen=True)
class ProposalJob:
    """One teacher prompt: who writes, which task type, the question, and the code_f program."""

    member_id: str
    task_type: str
    question: str
    program: str | None = None


@dataclass
class Seq:
    """One trainable sequence of one adapter."""

    role: str  # teacher | student (the baseline agent has both kinds)
    task_type: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    reward: float
    prompt_group: str  # sequences answering the same prompt share it (per-prompt baselines)


# -- 2. propose --------------------------------------------------------------------------------------
def proposal_jobs(teachers, buffers, cfg: Config, n_proposals, rng) -> list[ProposalJob]:
    """Every teacher's prompts: ``n_proposals(member)`` split evenly over the task types."""
    t = cfg.tasks
    jobs = []
    for member in teachers:
        for task_type, count in per_type(n_proposals(member), t.types).items():
            for _ in range(count):
                refs = buffers.references(task_type, t.references, rng)
                program = buffers.sample_program(rng) if task_type == CODE_F else None
                question = prompts.teacher_prompt(
                    task_type, refs, program=program, n_inputs=t.code_f_inputs, n_shown=t.code_f_shown,
                    max_output_chars=t.max_output_chars,
                )
                jobs.append(ProposalJob(member.id, task_type, question, program))
    return jobs


def parse_proposal(job: ProposalJob, gen, step: int, require_answer_tag: bool = True, prefill: str = "") -> Proposal:
    """Parse a teacher completion; ``prefill`` is the part of the answer written into the prompt."""
    if gen is None or not gen.completions:
        return Proposal(type=job.task_type, program=job.program or "", teacher_id=job.member_id, step=step,
                        reason=GENERATION_ERROR)
    return parsing.parse_proposal(prefill + gen.completions[0].text, job.task_type, program=job.program,
                                  teacher_id=job.member_id, step=step, require_answer_tag=require_answer_tag)


# -- 3. validate -------------------------------------------------------------------------------------
def validate(proposals: list[Proposal], sandbox, vcfg, metrics: dict) -> list[Verdict]:
    """All proposals in one parallel sandbox batch; a sandbox failure rejects the batch, never crashes."""
    try:
        return validation.validate_many(proposals, sandbox, vcfg)
    except Exception as e:
        log.exception("validation failed for %d proposals", len(proposals))
        metrics["errors/validate"] = 1
        metrics["errors/validate_reason"] = f"{type(e).__name__}: {str(e)[:200]}"
        return [Verdict(valid=False, reason=SANDBOX_ERROR) for _ in proposals]


# -- 4. solve ----------------------------------------------------------------------------------------
def solve_plan(pairs, jobs, verdicts, buffers, cfg: Config, attempt_budget: dict[str, int], rng) -> list[tuple]:
    """``[(student_id, task, fresh)]``: one entry per task a student attempts (n rollouts each).

    Every fresh valid task of a student's matched teacher(s) is attempted (the teacher's reward
    needs its solve rate). If that gives fewer than ``budget / n`` tasks, buffer tasks are added so
    that the student can train on exactly its budget (see ``budget.py``).
    """
    n = cfg.selfplay.rollouts
    fresh: dict[str, dict[str, Task]] = defaultdict(dict)
    for job, v in zip(jobs, verdicts):
        if v.valid and v.task is not None and job.member_id in pairs:
            fresh[pairs[job.member_id]].setdefault(v.task.id, v.task)
    plan = []
    for sid in sorted(attempt_budget):
        groups = attempt_budget[sid] // n
        tasks = list(fresh.get(sid, {}).values())
        plan += [(sid, task, True) for task in tasks]
        seen = {task.id for task in tasks}
        plan += [(sid, task, False) for task in top_up(buffers, groups - len(tasks), seen, cfg.tasks.types, rng)]
    return plan


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


def student_question(task: Task) -> str:
    return prompts.student_prompt(task)


# -- 5. check ----------------------------------------------------------------------------------------
def check(plan, gens, sandbox, metrics: dict, require_answer_tag: bool = True,
          prefill=lambda task: "") -> list[list[Attempt]]:
    """Parse and check every rollout in one sandbox batch. Never raises on model text.

    ``prefill(task)`` is the part of the answer that was written into the student's prompt.
    """
    flat: list[tuple[int, Task, str, object]] = []
    for i, ((sid, task, _), gen) in enumerate(zip(plan, gens)):
        for c in (gen.completions if gen is not None else []):
            flat.append((i, task, sid, c))
    try:
        judged = checking.check_many([(task, prefill(task) + c.text) for _, task, _, c in flat], sandbox,
                                     checking.CheckConfig(require_answer_tag=require_answer_tag))
    except Exception as e:
        log.exception("checking failed for %d attempts", len(flat))
        metrics["errors/check"] = 1
        metrics["errors/check_reason"] = f"{type(e).__name__}: {str(e)[:200]}"
        judged = [None] * len(flat)
    out: list[list[Attempt]] = [[] for _ in plan]
    for (i, task, sid, c), j in zip(flat, judged):
        att = Attempt(task.id, sid, c.text, tuple(c.token_ids))
        if j is None:
            att.reason = SANDBOX_ERROR
        else:
            att.answer, att.format_ok, att.correct, att.score, att.reason = (
                j.answer, j.format_ok, j.correct, j.score, j.reason)
        att.reward = rewards.student_reward(att.format_ok, att.correct)
        out[i].append(att)
    return out


def solve_rates(plan, attempts) -> dict[tuple[str, str], float]:
    """rho per (student, task): the fraction of its rollouts that were correct."""
    rho = {}
    for (sid, task, _), atts in zip(plan, attempts):
        if atts:
            rho[(sid, task.id)] = mean(a.score for a in atts)
    return rho


# -- 6. rewards --------------------------------------------------------------------------------------
def teacher_rewards(jobs, verdicts, rho, pairs, cfg: Config) -> list[float]:
    out = []
    for job, v in zip(jobs, verdicts):
        if not v.valid or v.task is None:
            out.append(rewards.teacher_reward(False, None, cfg.tasks.teacher_reward))
        else:
            r = rho.get((pairs[job.member_id], v.task.id))
            # a valid task the student could not attempt (its generation failed) carries no signal
            out.append(0.0 if r is None else rewards.teacher_reward(True, r, cfg.tasks.teacher_reward))
    return out


# -- 7. ratings --------------------------------------------------------------------------------------
def match_results(pairs, jobs, verdicts, rho, cfg: Config) -> tuple[list[tuple[str, str]], list[str]]:
    """One game per (teacher, student) pair, decided by the student's mean solve rate."""
    games, outcomes = [], []
    for tid, sid in sorted(pairs.items()):
        rhos = [rho[(sid, v.task.id)] for j, v in zip(jobs, verdicts)
                if j.member_id == tid and v.valid and v.task is not None and (sid, v.task.id) in rho]
        games.append((tid, sid))
        outcomes.append(ratings.match_outcome(mean(rhos) if rhos else None, len(rhos), cfg.ratings.margin))
    return games, outcomes


# -- 8. training batches -----------------------------------------------------------------------------
def training_batches(members, jobs, gens, t_rewards, plan, s_gens, attempts, cfg: Config, usage: dict[str, Usage],
                     rng) -> dict[str, list[Seq]]:
    """Each member's sequences for this step: exactly its budget (compute matching)."""
    batches: dict[str, list[Seq]] = {mid: [] for mid in members}
    for i, (job, gen, r) in enumerate(zip(jobs, gens, t_rewards)):
        u = usage[job.member_id]
        u.proposals += 1
        if gen is None or not gen.completions:
            continue
        c = gen.completions[0]
        batches[job.member_id].append(Seq("teacher", job.task_type, gen.prompt_token_ids, c.token_ids, c.logprobs,
                                          r, f"p{i}"))
        u.prompt_tokens += len(gen.prompt_token_ids)
        u.completion_tokens += len(c.token_ids)
    n = cfg.selfplay.rollouts
    by_student: dict[str, list[int]] = defaultdict(list)
    for i, (sid, _, _) in enumerate(plan):
        by_student[sid].append(i)
        usage[sid].rollouts += len(attempts[i])
    for sid, idx in by_student.items():
        groups = budget_for(cfg, members[sid].role).attempts // n
        fresh = [i for i in idx if plan[i][2]]
        if len(fresh) > groups:
            chosen = sorted(rng.sample(fresh, groups))
        else:
            chosen = fresh + [i for i in idx if not plan[i][2]][: groups - len(fresh)]
        for i in chosen:
            gen = s_gens[i]
            if gen is None:
                continue
            for c, att in zip(gen.completions, attempts[i]):
                batches[sid].append(Seq("student", plan[i][1].type, gen.prompt_token_ids, c.token_ids, c.logprobs,
                                        att.reward, f"s{i}"))
                usage[sid].attempts += 1
                usage[sid].prompt_tokens += len(gen.prompt_token_ids)
                usage[sid].completion_tokens += len(c.token_ids)
    for mid, seqs in batches.items():
        usage[mid].sequences = len(seqs)
    return {mid: seqs for mid, seqs in batches.items() if seqs}


# -- metrics and examples ----------------------------------------------------------------------------
def step_metrics(members, jobs, verdicts, plan, attempts, rho, t_rewards) -> dict:
    """Per-step rates under stable names (teacher/<type>/..., student/<type>/..., member/<id>/...)."""
    m: dict = {}
    by_type: dict[str, list] = defaultdict(list)
    reasons: Counter = Counter()
    for job, v, r in zip(jobs, verdicts, t_rewards):
        by_type[job.task_type].append((v.valid, r))
        if not v.valid:
            reasons[reason_kind(v.reason) or "unknown"] += 1
    for tt, vals in by_type.items():
        m[f"teacher/{tt}/valid_rate"] = mean(float(ok) for ok, _ in vals)
        m[f"teacher/{tt}/reward_mean"] = mean(r for _, r in vals)
    for k, c in reasons.items():
        m[f"teacher/reject/{k}"] = c
    member_rewards: dict[str, list[float]] = defaultdict(list)
    for j, r in zip(jobs, t_rewards):
        member_rewards[j.member_id].append(r)
    for (sid, _, _), atts in zip(plan, attempts):
        member_rewards[sid] += [a.reward for a in atts]
    for mid in members:
        own = [v.valid for j, v in zip(jobs, verdicts) if j.member_id == mid]
        if own:
            m[f"member/{mid}/valid_rate"] = mean(float(x) for x in own)
        if member_rewards.get(mid):
            m[f"member/{mid}/reward_mean"] = mean(member_rewards[mid])
    s_type: dict[str, list[Attempt]] = defaultdict(list)
    s_member: dict[str, list[Attempt]] = defaultdict(list)
    for (sid, task, _), atts in zip(plan, attempts):
        s_type[task.type] += atts
        s_member[sid] += atts
    for tt, atts in s_type.items():
        m[f"student/{tt}/solve_rate"] = mean(a.score for a in atts)
        m[f"student/{tt}/format_rate"] = mean(float(a.format_ok) for a in atts)
        m[f"student/{tt}/reward_mean"] = mean(a.reward for a in atts)
    for sid, atts in s_member.items():
        m[f"member/{sid}/solve_rate"] = mean(a.score for a in atts)
    fresh_rho = [rho[(sid, t.id)] for sid, t, fresh in plan if fresh and (sid, t.id) in rho]
    m["student/fresh_solve_rate"] = mean(fresh_rho)
    m["teacher/valid_tasks"] = sum(1 for v in verdicts if v.valid)
    m["teacher/proposals"] = len(verdicts)
    return m


def append_tasks(path: Path, tasks: list[Task]) -> None:
    """Every valid task of the run, one JSON line each (the diagnostics read program complexity here)."""
    with open(path, "a") as f:
        for t in tasks:
            f.write(json.dumps(t.to_json()) + "\n")


def write_examples(path: Path, step: int, jobs, verdicts, plan, attempts, keep: int = 3) -> None:
    """A few proposals per step with their verdicts and the students' results, for humans."""
    solved: dict[str, list[bool]] = defaultdict(list)
    for (_, task, _), atts in zip(plan, attempts):
        solved[task.id] += [a.correct for a in atts]
    rows, n_valid, n_invalid = [], 0, 0
    for job, v in zip(jobs, verdicts):
        if v.valid and v.task is not None and n_valid < keep:
            n_valid += 1
            t = v.task
            rows.append({"step": step, "teacher": job.member_id, "type": t.type, "valid": True, "program": t.program,
                         "input": t.input or list(t.inputs), "output": t.output or list(t.outputs),
                         "message": t.message, "student_correct": sum(solved.get(t.id, [])),
                         "student_attempts": len(solved.get(t.id, []))})
        elif not v.valid and n_invalid < 1:
            n_invalid += 1
            rows.append({"step": step, "teacher": job.member_id, "type": job.task_type, "valid": False,
                         "reason": v.reason})
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
