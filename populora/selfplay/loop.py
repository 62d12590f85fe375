"""The PopuLoRA self-play step, top to bottom.

What the algorithm is, honestly: asymmetric self-play between a population of LoRA *teachers*
(proposers) and LoRA *students* (solvers) on one frozen base model, trained with a critic-free
REINFORCE++-style policy gradient and no KL. One step:

1. matchmaking: every teacher gets one student by PFSP over TrueSkill ratings;
2. propose: every teacher writes its proposals (each task type, each prompt showing K references
   from that type's buffer; ``code_f``: a buffer program to write inputs and a message for): one
   mixed-adapter ``generate`` call for all teachers;
3. validate: parse, AST safety check, two independent sandboxed executions (parallel);
4. solve: the matched student attempts every fresh valid task of its teacher(s) with n sampled
   rollouts, plus buffer tasks to fill its budget: one mixed-adapter ``generate`` call;
5. check answers (sandboxed where execution is needed), solve rate rho per task;
6. rewards: teacher ``-1`` invalid, ``0`` if rho in {0, 1}, else ``1 - rho``; student ``+1`` /
   ``-0.5`` / ``-1``;
7. ratings: one TrueSkill game per (teacher, student) pair;
8. train: one policy update per member on exactly its own budget of sequences (compute matching,
   see ``budget.py``); only that member's adapter changes;
9. every k steps: the weakest of each role are replaced by children of the strongest, made by LoRA
   weight-space operators;
10. publish: the generation engine gets every changed adapter, and (every ``policy.publish_check_every``
    steps) must score a few fixed token sequences as the trainer does, or the run stops;
11. valid tasks join the buffers.

The single-agent baseline is this same loop with one member (role ``agent``) that proposes and
solves (AZR with one LoRA); it has no ratings and no evolution.

All randomness of a step is drawn from generators seeded by ``(seed, step, purpose)``, so a run
resumed from a checkpoint repeats exactly what an uninterrupted run would have done.

Where the pieces are: the stages are pure functions of typed records (``stages.py``, ``records.py``);
``ranks.py`` deals the work over the ranks; ``metrics.py`` turns what the stages measured into the
step's metrics row; ``state.py`` saves and restores a run (checkpoints, final adapters, summary);
``populora.run_dir`` owns the run directory's files.

On W ranks (``populora.distributed``) every rank runs this same loop and holds every member's adapter
weights: each generates, validates and checks its round-robin share of the step's requests, gathers
everyone's records, and computes matchmaking, rewards, ratings and evolution identically from them;
each member is trained where it lives (its optimizer state stays there), then its new weights are
broadcast to every rank. One rank is the case W = 1, not a separate path (see docs/distributed.md).
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path

import numpy as np

from populora.config import Config
from populora.cpus import available_cpus, rank_cpu_budget
from populora.distributed.comm import Comm, LocalComm
from populora.plan.inputs import longest_completion
from populora.policy import make_backend
from populora.policy.adapters import AdapterWeights
from populora.policy.base import GenerationRequest, SamplingParams
from populora.policy.engine import EngineContext, engine_seed
from populora.population import evolution, matchmaking, ratings
from populora.population.members import Member, founder_record, founders
from populora.run_dir import RunDir
from populora.sandbox import Sandbox
from populora.selfplay import stages
from populora.selfplay.budget import budget_for
from populora.selfplay.metrics import StepMetrics, Stopwatch
from populora.selfplay.ranks import Ranks, rank_policy
from populora.selfplay.update import micro_batching
from populora.tasks import prompts
from populora.tasks.buffers import TaskBuffers
from populora.tasks.complexity import complexity_metrics
from populora.tasks.seeds import generate_seed_buffers

# purposes of the per-step random generators (never reorder: it would change every run)
RNG_MATCH, RNG_PROPOSE, RNG_SOLVE, RNG_SELECT, RNG_EVOLVE, RNG_GEN_T, RNG_GEN_S, RNG_SEEDS, RNG_GEN_SEEDS = range(9)


def step_seed(seed: int, step: int, purpose: int) -> int:
    """A 31-bit seed that depends only on (run seed, step, purpose)."""
    return int(np.random.default_rng([seed, step, purpose]).integers(0, 2**31 - 1))


def step_rng(seed: int, step: int, purpose: int) -> random.Random:
    return random.Random(step_seed(seed, step, purpose))


class SelfPlay:
    """The state of a self-play run (members, buffers) and its ``step``. Side effects: the backend,
    the sandbox and the ranks' collectives; rank 0 appends the step's tasks, examples and births to
    the run directory."""

    def __init__(self, cfg: Config, run_dir: str | Path, comm: Comm | None = None):
        self.cfg, self.env = cfg, cfg.tasks
        self.run = RunDir(run_dir)
        self.run_dir = self.run.path
        self.comm = comm or LocalComm()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # the run's sandbox section; each rank's sandbox pool gets its share of the cores the job was
        # given (affinity, not the machine's count)
        workers = cfg.sandbox.workers or rank_cpu_budget(available_cpus(), self.comm.local_world, os.environ)
        # the run seed is the determinism check's: replicas' hash seeds come from (seed, step, replica)
        self.sandbox = Sandbox(limits=replace(cfg.sandbox, workers=workers), workers=workers, hash_seed=cfg.seed)
        self.micro_batching = micro_batching(cfg)  # the trainer's passes, packed to the memory plan's bound
        context = EngineContext(seed=engine_seed(cfg.seed, self.comm.rank), rank=self.comm.rank,
                                local_rank=self.comm.local_rank, local_world=self.comm.local_world)
        self.backend = make_backend(rank_policy(cfg.policy, self.comm), adamw=cfg.rl.adamw_kwargs(),
                                    max_new_tokens=longest_completion(cfg), context=context)
        self.ranks = Ranks(self.comm, self.backend, cfg.policy.engine, cfg.selfplay.max_refused_calls)
        self.buffers: TaskBuffers | None = None  # seeded at the first step, or restored from a checkpoint
        self.members: dict[str, Member] = {}  # in slot order (see populora.distributed.placement)
        self.step_done = 0
        self.events: list[dict] = []
        self.last_metrics: dict = {}
        self.on_stage = lambda name: None  # progress display hook (set by the runner)
        founders_ = initial_members(cfg)
        self.ranks.place([m.id for m in founders_])
        shapes = self.backend.module_shapes()
        lo = cfg.policy.lora
        for i, member in enumerate(founders_):
            self.members[member.id] = member
            self.backend.add_adapter(member.adapter, AdapterWeights.init(
                shapes, lo.rank, lo.alpha, b_init=lo.init, b_std=lo.b_std, seed=cfg.seed * 1000 + i))

    @property
    def baseline(self) -> bool:
        return self.cfg.population.baseline

    # -- the step ---------------------------------------------------------------------------------
    def step(self, step: int) -> dict:
        """One self-play step; returns its metrics row (stable names)."""
        cfg, env, seed = self.cfg, self.env, self.cfg.seed
        m, watch = StepMetrics(), Stopwatch(self.on_stage)
        collective_s0 = self.comm.seconds
        if self.buffers is None:
            m.seeding = self._seed()

        # 1. matchmaking (PFSP over TrueSkill); the baseline agent plays against itself
        with watch.phase("matchmaking"):
            teachers = [mem for mem in self.members.values() if mem.role in ("teacher", "agent")]
            students = [mem for mem in self.members.values() if mem.role in ("student", "agent")]
            pairs = self._pairs(teachers, students, step)

        # 2. propose: every teacher's proposals in ONE mixed-adapter generate call
        with watch.phase("propose", "generate"):
            records = stages.proposal_jobs(teachers, self.buffers, env, lambda mem: budget_for(cfg, mem.role).proposals,
                                           step_rng(seed, step, RNG_PROPOSE))
            gens = self.ranks.generate(
                [self._request(r.job.question, "teacher", r.job.task_type, r.member_id, r.index) for r in records],
                self._sampling(cfg.selfplay.teacher_sampling, 1, step_seed(seed, step, RNG_GEN_T)), "teacher")
            records = stages.with_generations(records, gens)

        # 3. validate in the sandbox (parallel, two independent executions each)
        with watch.phase("validate"):
            records = stages.parse_proposals(records, step, env)
            records, errors = self.ranks.split(records, lambda share: stages.validate(share, self.sandbox, env))
            m.errors += errors

        # 4. solve: matched students attempt fresh valid tasks (+ buffer top-up), ONE generate call
        with watch.phase("solve"):
            groups = stages.solve_plan(pairs, records, self.buffers, cfg,
                                       {mem.id: budget_for(cfg, mem.role).attempts for mem in students},
                                       step_rng(seed, step, RNG_SOLVE))
            gens = self.ranks.generate(
                [self._request(stages.student_question(g.task, env), "student", g.task.type, g.student_id, g.index)
                 for g in groups],
                self._sampling(cfg.selfplay.student_sampling, cfg.selfplay.rollouts, step_seed(seed, step, RNG_GEN_S)),
                "student")
            groups = stages.with_generations(groups, gens)

        # 5. check answers (sandboxed where execution is needed); solve rate rho per task; tasks whose
        #    program gave other outputs when run again are invalid, and leave the buffers
        with watch.phase("check"):
            groups, errors = self.ranks.split(groups, lambda share: stages.check(share, self.sandbox, env))
            m.errors += errors
            rho = stages.solve_rates(groups)
            nondeterministic = stages.nondeterministic_tasks(groups)
            m.counts["check/nondeterministic_tasks"] = len(nondeterministic)
            refused = stages.refused_tasks(groups)  # gold computed under other sandbox limits
            m.counts["check/limits_changed_tasks"] = len(refused)
            m.counts["buffer/removed"] = self.buffers.discard(nondeterministic | refused)

        # 6. rewards: teachers from validity and rho; students' rewards are on their attempts
        records = stages.teacher_rewards(records, rho, pairs, env.teacher_reward, nondeterministic)

        # 7. ratings: each role rated on its own RL reward against its opponent (docs/population.md)
        with watch.phase("ratings", timing=""):
            if not self.baseline:
                m.games = self._rate(pairs, records, groups)

        # 8. train: one policy update per member on exactly its budget of sequences
        with watch.phase("train"):
            batches, m.usage = stages.training_batches(self.members, records, groups, cfg,
                                                       step_rng(seed, step, RNG_SELECT))
            updated = self.ranks.train(batches, {mid: self.members[mid].adapter for mid in batches}, cfg.rl,
                                       self.micro_batching)
            for mid, stats in updated.items():
                stats = dict(stats)
                m.usage[mid].optimizer_steps += stats.pop("optimizer_steps")
                m.training[mid] = stats

        # rates and ratings of this step's members, before evolution replaces any of them
        m.rates = stages.step_rates(self.members, records, groups)
        if not self.baseline:
            m.ratings = {mid: (mem.rating.mu, mem.rating.sigma) for mid, mem in self.members.items()}

        # 9. every k steps, where children can still train min_age steps: PBT replacement of the
        #    weakest per role by evolved children
        with watch.phase("evolve"):
            if not self.baseline and cfg.evolution.due(step, cfg.selfplay.steps):
                m.counts["evolution/replaced"] = self._evolve(step)
                m.population = {mid: (mem.rating.mu, mem.rating.sigma) for mid, mem in self.members.items()}

        # 10. publish: from here on the engine serves this step's weights, checked against the trainer's
        with watch.phase("publish"):
            m.counts.update(self.ranks.publish())
        with watch.phase("check_served"):
            m.counts.update(self.ranks.check_served(step))

        # 11. valid tasks join the buffers (deduplicated, capacity-bounded) and the run's task log
        with watch.phase("buffers", timing=""):
            valid = [r.task for r in records if r.valid]
            m.counts["buffer/added"] = sum(self.buffers.add(task) for task in valid)
            m.counts.update(complexity_metrics(valid, lambda tid: self.members[tid].role if tid in self.members
                                               else "teacher"))
            m.counts.update({f"buffer/{tt}/size": len(self.buffers[tt]) for tt in env.types})
            if self.comm.is_main:
                self.run.append_tasks(valid)
                self.run.append_examples(stages.example_rows(step, records, groups))

        m.timings = {**watch.seconds, "collectives": self.comm.seconds - collective_s0}
        row = m.row()
        self.step_done, self.last_metrics = step, row
        return row

    # -- pieces of the step ------------------------------------------------------------------------
    def _pairs(self, teachers: list[Member], students: list[Member], step: int) -> dict[str, str]:
        """Teacher id -> student id for this step (the baseline agent plays against itself)."""
        if self.baseline:
            return {teachers[0].id: students[0].id}
        ratings_now = {mem.id: mem.rating for mem in self.members.values()}
        return dict(matchmaking.pair([t.id for t in teachers], [s.id for s in students], ratings_now,
                                     self.cfg.matchmaking, self.cfg.ratings, step_rng(self.cfg.seed, step, RNG_MATCH)))

    def _request(self, question: str, role: str, task_type: str, member_id: str, index: int) -> GenerationRequest:
        """The wrapped prompt of a question (with the role's answer prefill) for the member's adapter."""
        prompt = prompts.wrap(question, self.env, self.backend.tokenizer) + prompts.prefill(role, task_type, self.env)
        return GenerationRequest(prompt, self.members[member_id].adapter, index=index)

    @staticmethod
    def _sampling(sc, n: int, seed: int) -> SamplingParams:
        return SamplingParams(temperature=sc.temperature, top_p=sc.top_p, max_new_tokens=sc.max_new_tokens, n=n,
                              seed=seed)

    def _rate(self, pairs, records, groups) -> dict[str, float]:
        """Play the step's rated games; every member takes its new rating. The games' outcome scores."""
        games = stages.rating_games(pairs, records, groups)
        new, results = ratings.play({mem.id: mem.rating for mem in self.members.values()}, games, self.cfg.ratings)
        for mid, r in new.items():
            self.members[mid].rating = r
        return {f"match/{r.game.member}/{r.game.opponent}": ratings.OUTCOME_SCORE[r.outcome] for r in results}

    def _seed(self) -> dict:
        """The buffers' first tasks, as the task environment says (``tasks.seeds``): written by the base
        model as AZR does, or the hand-written set; returns the seeding metrics (``seeds/*``)."""
        cfg = self.cfg
        sampling = self._sampling(cfg.selfplay.teacher_sampling, 1, step_seed(cfg.seed, 0, RNG_GEN_SEEDS))
        ranks = self.ranks

        class BaseModel:  # the base model's generation, shared over the ranks (adapter None: no LoRA)
            generate = staticmethod(lambda requests, sp: ranks.generate(
                [GenerationRequest(r.prompt, r.adapter, i) for i, r in enumerate(requests)], sp, "seed"))

        report = generate_seed_buffers(BaseModel(), self.sandbox, self.env, sampling, step_rng(cfg.seed, 0, RNG_SEEDS),
                                       wrap=lambda question: prompts.wrap(question, self.env, self.backend.tokenizer))
        self.buffers = report.buffers
        return report.as_metrics()

    def _evolve(self, step: int) -> int:
        """Replace the weakest of each role by children; returns how many were replaced.

        Every rank makes the same decisions and children (same ratings, same seeded generator, the same
        parents' weights: every rank holds them); a child takes its predecessor's slot and ranks.
        """
        births = evolution.pbt_step(list(self.members.values()), step, self.cfg.selfplay.steps, self.cfg.evolution,
                                    self.cfg.ratings, step_rng(self.cfg.seed, step, RNG_EVOLVE),
                                    get_weights=self.backend.get_weights)
        for birth in births:
            old = birth.replaced
            self.backend.remove_adapter(old.adapter)
            self.backend.add_adapter(birth.child.adapter, birth.weights)  # fresh optimizer state
            self.members = {(birth.child.id if mid == old.id else mid): (birth.child if mid == old.id else mem)
                            for mid, mem in self.members.items()}
            self.ranks.replace_member(old.id, birth.child.id, list(self.members))
            if self.comm.is_main:
                self.run.append_lineage([birth.record])
            self.events.append(birth.record)
        return len(births)

    def record_births(self) -> None:
        """The founders' birth records (rank 0), at the start of a run."""
        if self.comm.is_main:
            self.run.append_lineage([founder_record(mem) for mem in self.members.values()])

    def close(self) -> None:
        self.sandbox.close()
        self.backend.close()


def initial_members(cfg: Config) -> list[Member]:
    """t0..t{T-1} and s0..s{S-1}; the baseline has one member ``a0`` in role ``agent``."""
    prior = ratings.prior(cfg.ratings)
    if cfg.population.baseline:
        return [Member(id="a0", role="agent", adapter="a0", rating=prior)]
    return founders(cfg.population.teachers, cfg.population.students, prior)
