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
10. valid tasks join the buffers.

The single-agent baseline is this same loop with one member (role ``agent``) that proposes and
solves (AZR with one LoRA); it has no ratings and no evolution.

All randomness of a step is drawn from generators seeded by ``(seed, step, purpose)``, so a run
resumed from a checkpoint repeats exactly what an uninterrupted run would have done.

On W ranks (``populora.distributed``) every rank runs this same loop and holds every member's adapter
weights: each generates, validates and checks its round-robin share of the step's requests, gathers
everyone's records, and computes matchmaking, rewards, ratings and evolution identically from them;
each member is trained where it lives (its optimizer state stays there), then its new weights are
broadcast to every rank. One rank is the case W = 1, not a separate path (see docs/distributed.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import time
from pathlib import Path

import numpy as np

from populora.config import Config
from populora.diagnostics.complexity import complexity_metrics
from populora.distributed import placement as place
from populora.distributed.comm import Comm, LocalComm
from populora.distributed.env import available_cpus, local_cuda_index, rank_cpu_budget
from populora.plan.inputs import longest_completion
from populora.policy import make_backend
from populora.policy.adapters import AdapterWeights
from populora.policy.base import GenerationRequest, SamplingParams
from populora.policy.engine import EngineContext, EngineFailure, engine_seed
from populora.population import evolution, matchmaking, ratings
from populora.population.members import LineageLog, Member, founder_record, founders
from populora.sandbox import Sandbox
from populora.selfplay import stages
from populora.selfplay.budget import Usage, budget_for
from populora.selfplay.train import MemberGroup, micro_batching, train_member
from populora.tasks.buffers import TaskBuffers
from populora.tasks.seeds import generate_seed_buffers
from populora.tasks.validation import ValidationConfig

log = logging.getLogger(__name__)

# purposes of the per-step random generators (never reorder: it would change every run)
RNG_MATCH, RNG_PROPOSE, RNG_SOLVE, RNG_SELECT, RNG_EVOLVE, RNG_GEN_T, RNG_GEN_S, RNG_SEEDS, RNG_GEN_SEEDS = range(9)


def step_seed(seed: int, step: int, purpose: int) -> int:
    """A 31-bit seed that depends only on (run seed, step, purpose)."""
    return int(np.random.default_rng([seed, step, purpose]).integers(0, 2**31 - 1))


def step_rng(seed: int, step: int, purpose: int) -> random.Random:
    return random.Random(step_seed(seed, step, purpose))


class SelfPlay:
    """State of a self-play run and its ``step``. Side effects: the backend and the sandbox."""

    def __init__(self, cfg: Config, run_dir: str | Path, comm: Comm | None = None):
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.comm = comm or LocalComm()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.validation = ValidationConfig(
            max_output_chars=cfg.tasks.max_output_chars,
            code_f_inputs=cfg.tasks.code_f_inputs,
            code_f_shown=cfg.tasks.code_f_shown,
        )
        # the run's sandbox section, with the task environment's output limit; each rank's sandbox pool
        # gets its share of the cores the job was given (affinity, not the machine's count)
        workers = cfg.sandbox.workers or rank_cpu_budget(available_cpus(), self.comm.local_world, os.environ)
        limits = dataclasses.replace(cfg.sandbox, max_output_chars=cfg.tasks.max_output_chars, workers=workers)
        self.sandbox = Sandbox(limits=limits, workers=workers)
        longest = longest_completion(cfg)
        self.micro_batching = micro_batching(cfg)  # the trainer's passes, packed to the memory plan's bound
        context = EngineContext(seed=engine_seed(cfg.seed, self.comm.rank), rank=self.comm.rank,
                                local_rank=self.comm.local_rank, local_world=self.comm.local_world)
        self.backend = make_backend(rank_policy(cfg.policy, self.comm), adamw=cfg.rl.adamw_kwargs(),
                                    max_new_tokens=longest, context=context)
        self.refused_calls = 0  # generate calls in a row whose every request was refused
        self.buffers: TaskBuffers | None = None  # seeded at the first step, or restored from a checkpoint
        self.lineage = LineageLog(self.run_dir / "lineage.jsonl")
        self.members: dict[str, Member] = {}  # in slot order (see populora.distributed.placement)
        self.placement: dict[str, tuple[int, ...]] = {}
        self.step_done = 0
        self.events: list[dict] = []
        self.last_metrics: dict = {}
        self.on_stage = lambda name: None  # progress display hook (set by the runner)
        founders_ = initial_members(cfg)
        self._place([m.id for m in founders_])
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
        cfg, seed = self.cfg, self.cfg.seed
        timings: dict[str, float] = {}
        usage = {mid: Usage() for mid in self.members}
        metrics: dict = {}
        collective_s0 = self.comm.seconds
        if self.buffers is None:
            metrics.update(self._seed())

        # 1. matchmaking (PFSP over TrueSkill); the baseline agent plays against itself
        self.on_stage("matchmaking")
        t = time.perf_counter()
        teachers = [m for m in self.members.values() if m.role in ("teacher", "agent")]
        students = [m for m in self.members.values() if m.role in ("student", "agent")]
        if self.baseline:
            pairs = {teachers[0].id: students[0].id}
        else:
            ratings_now = {m.id: m.rating for m in self.members.values()}
            pairs = dict(matchmaking.pair([m.id for m in teachers], [m.id for m in students], ratings_now,
                                          cfg.matchmaking, cfg.ratings, step_rng(seed, step, RNG_MATCH)))
        timings["time/matchmaking_s"] = time.perf_counter() - t

        # 2. propose: every teacher's proposals in ONE mixed-adapter generate call
        self.on_stage("propose")
        t = time.perf_counter()
        records = stages.proposal_jobs(teachers, self.buffers, cfg, lambda m: budget_for(cfg, m.role).proposals,
                                       step_rng(seed, step, RNG_PROPOSE))
        gens = self._generate([GenerationRequest(self._format(r.job.question) + self._prefill("teacher", r.job.task_type),
                                                 self.members[r.member_id].adapter, index=r.index) for r in records],
                              cfg.selfplay.teacher_sampling, 1, step_seed(seed, step, RNG_GEN_T), metrics, "teacher")
        records = stages.with_generations(records, gens)
        timings["time/generate_s"] = time.perf_counter() - t

        # 3. validate in the sandbox (parallel, two independent executions each)
        self.on_stage("validate")
        t = time.perf_counter()
        records = stages.parse_proposals(records, step, cfg.tasks.require_answer_tag,
                                         lambda task_type: self._prefill("teacher", task_type), cfg.tasks.require_think)
        records = self._split(records, lambda share: stages.validate(share, self.sandbox, self.validation, metrics),
                              metrics)
        timings["time/validate_s"] = time.perf_counter() - t

        # 4. solve: matched students attempt fresh valid tasks (+ buffer top-up), ONE generate call
        self.on_stage("solve")
        t = time.perf_counter()
        groups = stages.solve_plan(pairs, records, self.buffers, cfg,
                                   {m.id: budget_for(cfg, m.role).attempts for m in students},
                                   step_rng(seed, step, RNG_SOLVE))
        s_gens = self._generate([GenerationRequest(self._format(stages.student_question(g.task, cfg))
                                                   + self._prefill("student", g.task.type),
                                                   self.members[g.student_id].adapter, index=g.index) for g in groups],
                                cfg.selfplay.student_sampling, cfg.selfplay.rollouts,
                                step_seed(seed, step, RNG_GEN_S), metrics, "student")
        groups = stages.with_generations(groups, s_gens)
        timings["time/solve_s"] = time.perf_counter() - t

        # 5. check answers (sandboxed where execution is needed); solve rate rho per task
        self.on_stage("check")
        t = time.perf_counter()
        groups = self._split(groups, lambda share: stages.check(share, self.sandbox, metrics, cfg.tasks.require_answer_tag,
                                                                lambda task: self._prefill("student", task.type),
                                                                cfg.tasks.require_think),
                             metrics)
        rho = stages.solve_rates(groups)
        # tasks whose program gave other outputs when run again: invalid, and out of the buffers
        nondeterministic = stages.nondeterministic_tasks(groups)
        metrics["check/nondeterministic_tasks"] = len(nondeterministic)
        metrics["buffer/removed"] = self.buffers.discard(nondeterministic)
        timings["time/check_s"] = time.perf_counter() - t

        # 6. rewards: teachers from validity and rho; students' rewards are on their attempts
        records = stages.teacher_rewards(records, rho, pairs, cfg.tasks.teacher_reward, nondeterministic)

        # 7. ratings: each role rated on its own RL reward against its opponent (docs/population.md)
        self.on_stage("ratings")
        if not self.baseline:
            games = stages.rating_games(pairs, records, groups)
            new, results = ratings.play({m.id: m.rating for m in self.members.values()}, games, cfg.ratings)
            for mid, r in new.items():
                self.members[mid].rating = r
            metrics.update({f"match/{r.game.member}/{r.game.opponent}": ratings.OUTCOME_SCORE[r.outcome]
                            for r in results})

        # 8. train: one policy update per member on exactly its budget of sequences
        self.on_stage("train")
        t = time.perf_counter()
        batches = stages.training_batches(self.members, records, groups, cfg, usage, step_rng(seed, step, RNG_SELECT))
        for mid, stats in self._train(batches).items():
            usage[mid].optimizer_steps += stats.pop("optimizer_steps")
            metrics.update({f"train/{mid}/{k}": v for k, v in stats.items()})
        timings["time/train_s"] = time.perf_counter() - t

        # rates and ratings of this step's members, before evolution replaces any of them
        metrics.update(stages.step_metrics(self.members, records, groups))
        if not self.baseline:
            for m in self.members.values():
                metrics[f"member/{m.id}/mu"] = m.rating.mu
                metrics[f"member/{m.id}/sigma"] = m.rating.sigma

        # 9. every k steps, where children can still train min_age steps: PBT replacement of the
        #    weakest per role by evolved children
        self.on_stage("evolve")
        t = time.perf_counter()
        if not self.baseline and cfg.evolution.due(step, cfg.selfplay.steps):
            metrics["evolution/replaced"] = self._evolve(step)
            for m in self.members.values():  # the population that goes on (children included)
                metrics[f"population/{m.id}/mu"] = m.rating.mu
                metrics[f"population/{m.id}/sigma"] = m.rating.sigma
        timings["time/evolve_s"] = time.perf_counter() - t

        # 10. valid tasks join the buffers (deduplicated, capacity-bounded) and the run's task log
        self.on_stage("buffers")
        valid_tasks = [r.task for r in records if r.valid]
        metrics["buffer/added"] = sum(self.buffers.add(task) for task in valid_tasks)
        if self.comm.is_main:
            stages.append_tasks(self.run_dir / "tasks.jsonl", valid_tasks)
        metrics.update(complexity_metrics(valid_tasks, lambda tid: self.members[tid].role if tid in self.members
                                          else "teacher"))
        metrics.update({f"buffer/{tt}/size": len(self.buffers[tt]) for tt in cfg.tasks.types})

        for mid, u in usage.items():
            metrics.update(u.as_metrics(mid))
        timings["time/collectives_s"] = self.comm.seconds - collective_s0
        metrics.update(timings)
        if self.comm.is_main:
            stages.write_examples(self.run_dir / "examples.jsonl", step, records, groups)
        self.step_done = step
        self.last_metrics = metrics
        return metrics

    # -- pieces of the step with side effects ------------------------------------------------------
    def _format(self, question: str) -> str:
        from populora.tasks.prompts import format_chat, format_r1

        if self.cfg.tasks.prompt_style == "r1":
            return format_r1(question)
        return format_chat(question, self.backend.tokenizer)

    def _prefill(self, role: str, task_type: str) -> str:
        """The opened answer block appended to prompts when ``tasks.answer_prefill`` is on."""
        from populora.tasks.prompts import prefill

        return prefill(role, task_type) if self.cfg.tasks.answer_prefill else ""

    def _generate(self, requests, sc, n: int, seed: int, metrics: dict, role: str):
        """One mixed-adapter generate call per rank for its round-robin share of the requests (every
        rank holds every adapter, so the phases where only teachers or only students write keep every
        rank busy); results gathered in request order. An engine failure stops the run (see
        ``_generate_shared``)."""
        if not requests:
            return []
        sampling = SamplingParams(temperature=sc.temperature, top_p=sc.top_p, max_new_tokens=sc.max_new_tokens,
                                  n=n, seed=seed)
        return self._generate_shared(requests, sampling, metrics, role)

    def _generate_shared(self, requests, sampling: SamplingParams, metrics: dict, role: str):
        """``requests`` (each with its ``index``) dealt round robin over the ranks, results gathered.

        A failure of the engine on any rank (it did not start, its process died, its device failed)
        stops the run on every rank: the failing rank hands its error to the gather that every rank
        is in, and every rank raises ``EngineFailure`` with it, before anything of the step is
        trained or saved (the last checkpoint stays the one to resume from). Requests refused on
        their own (``GenerationResult.refused``) train nothing; ``selfplay.max_refused_calls`` calls in
        a row with nothing but refusals stop the run too.
        """
        share = place.mine(place.round_robin(len(requests), self.comm.world), self.comm.rank)
        local, error = [None] * len(share), None
        if share:
            try:
                local = self.backend.generate([requests[i] for i in share], sampling)
            except Exception as e:  # handed to every rank below: the run stops everywhere, not here alone
                log.debug("generation failed on rank %d", self.comm.rank, exc_info=True)
                error = f"{type(e).__name__}: {e}" if not isinstance(e, EngineFailure) else str(e)
        out = [None] * len(requests)
        errors = []
        for rank, (part_share, part, part_error) in enumerate(self.comm.gather((share, local, error))):
            for i, result in zip(part_share, part):
                out[i] = result
            if part_error is not None:
                errors.append((rank, part_error))
        if errors:
            rank, why = errors[0]
            raise EngineFailure(f"generation engine {self.cfg.policy.engine!r} failed on rank {rank} "
                                f"({role} requests): {_one_line(why)}")
        refused = sum(1 for r in out if r is not None and r.refused)  # counted per role in stages.step_metrics
        self.refused_calls = self.refused_calls + 1 if out and refused == len(out) else 0
        if self.refused_calls >= self.cfg.selfplay.max_refused_calls:
            raise EngineFailure(f"{self.refused_calls} generate calls in a row had every request refused "
                                f"(last: {out[0].refused}); stopping (selfplay.max_refused_calls)")
        return out

    def _split(self, records, stage, metrics: dict):
        """Run ``stage`` on this rank's round-robin share of ``records``; gather every rank's results
        (and the metrics the stage recorded) back into record order."""
        share = place.mine(place.round_robin(len(records), self.comm.world), self.comm.rank)
        local_metrics: dict = {}
        done = stage([records[i] for i in share]) if share else []
        if metrics is not None:
            local_metrics = {k: v for k, v in metrics.items() if k.startswith("errors/")}
        out = list(records)
        for part_share, part, part_metrics in self.comm.gather((share, done, local_metrics)):
            for i, r in zip(part_share, part):
                out[i] = r
            metrics.update(part_metrics)
        return out

    def _train(self, batches: dict) -> dict[str, dict]:
        """One policy update per member, where it lives; then every rank gets every member's statistics
        and new weights (broadcast from the member's leader rank)."""
        local: dict[str, dict] = {}
        for mid, batch in batches.items():
            ranks = self.placement[mid]
            if self.comm.rank not in ranks:
                continue
            group = MemberGroup(self.comm, ranks) if len(ranks) > 1 else None
            stats = train_member(self.backend, self.members[mid].adapter, batch, self.cfg.rl,
                                 self.micro_batching, group)
            if self.comm.rank == ranks[0]:
                local[mid] = stats
        merged: dict[str, dict] = {}
        for part in self.comm.gather(local):
            merged.update(part)
        if self.comm.world > 1:
            for mid in batches:
                self._sync_weights(mid)
        return {mid: merged[mid] for mid in batches}  # in the same order on every rank

    def _sync_weights(self, member_id: str) -> None:
        """Every rank takes the member's weights from its leader (after an update or a restore)."""
        adapter = self.members[member_id].adapter
        src = place.leader(self.placement, member_id)
        mine = self.backend.get_weights(adapter) if self.comm.rank == src else None
        weights = self.comm.broadcast_weights(mine, src)
        if self.comm.rank not in self.placement[member_id]:
            self.backend.set_weights(adapter, weights)

    def _place(self, slots: list[str]) -> None:
        self.placement = place.place(slots, self.comm.world)
        self.comm.prepare_groups(self.placement)

    def _seed(self) -> dict:
        """The buffers' first tasks, as the run config says (``tasks.seeds``): written by the base model
        as AZR does, or the hand-written set; returns the seeding metrics (``seeds/*``)."""
        cfg = self.cfg
        sc = cfg.selfplay.teacher_sampling
        sampling = SamplingParams(temperature=sc.temperature, top_p=sc.top_p, max_new_tokens=sc.max_new_tokens,
                                  seed=step_seed(cfg.seed, 0, RNG_GEN_SEEDS))
        errors: dict = {}

        class BaseModel:  # the base model's generation, shared over the ranks (adapter None: no LoRA)
            generate = staticmethod(lambda requests, sp: self._generate_shared(
                [GenerationRequest(r.prompt, r.adapter, i) for i, r in enumerate(requests)], sp, errors, "seed"))

        report = generate_seed_buffers(
            BaseModel(), self.sandbox, cfg.tasks.seeds, sampling, step_rng(cfg.seed, 0, RNG_SEEDS),
            references=cfg.tasks.references, wrap=self._format, prefill=lambda tt: self._prefill("teacher", tt),
            validation=self.validation, capacity=cfg.tasks.buffer_capacity)
        self.buffers = report.buffers
        return {**report.as_metrics(), **errors}

    def _hosts(self, member_id: str) -> bool:
        """Whether this rank trains the member (holds its optimizer state)."""
        return self.comm.rank in self.placement[member_id]

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
            ranks = self.placement.pop(old.id)
            self.backend.remove_adapter(old.adapter)
            self.backend.add_adapter(birth.child.adapter, birth.weights)  # fresh optimizer state
            self.members = {(birth.child.id if mid == old.id else mid): (birth.child if mid == old.id else m)
                            for mid, m in self.members.items()}
            self.placement = {mid: self.placement.get(mid, ranks) for mid in self.members}
            if self.comm.is_main:
                self.lineage.append([birth.record])
            self.events.append(birth.record)
        return len(births)

    # -- persistence -------------------------------------------------------------------------------
    def record_births(self) -> None:
        if self.comm.is_main:
            self.lineage.append([founder_record(m) for m in self.members.values()])

    def led_members(self) -> list[Member]:
        """The members this rank speaks for (writes their checkpoint and export files)."""
        return [m for m in self.members.values() if place.leader(self.placement, m.id) == self.comm.rank]

    def checkpoint_payload(self) -> tuple[dict, dict, dict]:
        """(adapters and optimizer states of the members this rank leads, the run state)."""
        led = self.led_members()
        adapters = {m.adapter: self.backend.get_weights(m.adapter) for m in led}
        opt = {m.adapter: self.backend.optimizer_state(m.adapter) for m in led}
        state = {
            "members": [m.to_dict() for m in self.members.values()],
            "buffers": self.buffers.to_json(),
            "events": self.events,
            "last_metrics": {k: v for k, v in self.last_metrics.items() if isinstance(v, (int, float, str))},
        }
        return adapters, opt, state

    def restore(self, ckpt) -> None:
        """Members in their saved slot order, placed on this run's ranks (the world size may differ from
        the run that saved it); every rank loads every adapter, and the optimizer states of the members
        it trains."""
        for name in list(self.backend.adapter_names()):
            self.backend.remove_adapter(name)
        self.members = {d["id"]: Member.from_dict(d) for d in ckpt.state["members"]}
        self._place(list(self.members))
        for m in self.members.values():
            self.backend.add_adapter(m.adapter, ckpt.adapters[m.adapter])
            if self._hosts(m.id):
                self.backend.load_optimizer_state(m.adapter, ckpt.optimizer_states[m.adapter])
        self.buffers = TaskBuffers.from_json(ckpt.state["buffers"])
        self.events = list(ckpt.state.get("events", []))
        self.last_metrics = dict(ckpt.state.get("last_metrics", {}))
        self.step_done = ckpt.step

    def export_final(self, run_dir: Path) -> None:
        """Final adapters as PEFT directories (each by the rank that leads it) + members.json (rank 0)."""
        for m in self.led_members():
            self.backend.get_weights(m.adapter).save_peft(run_dir / "adapters" / m.id,
                                                          base_model_name_or_path=self.cfg.policy.model)
        self.comm.barrier()
        if not self.comm.is_main:
            return
        out = []
        for m in self.members.values():
            # evaluation reads the single agent of a baseline run as the role "baseline"
            out.append({"id": m.id, "role": "baseline" if self.baseline else m.role, "adapter_dir": f"adapters/{m.id}",
                        "mu": None if self.baseline else m.rating.mu,
                        "sigma": None if self.baseline else m.rating.sigma,
                        "parents": list(m.parents), "operator": m.operator, "born_step": m.born_step})
        tmp = run_dir / "members.json.tmp"
        tmp.write_text(json.dumps(out, indent=2))
        tmp.replace(run_dir / "members.json")

    def summary(self, status: str) -> dict:
        lm = self.last_metrics
        return {
            "name": self.cfg.name,
            "status": status,
            "steps_done": self.step_done,
            "steps": self.cfg.selfplay.steps,
            "baseline": self.baseline,
            "model": self.cfg.policy.model,
            "members": [
                {"id": m.id, "role": m.role, "adapter": m.adapter, "born_step": m.born_step,
                 "mu": None if self.baseline else m.rating.mu,
                 "sigma": None if self.baseline else m.rating.sigma,
                 "score": None if self.baseline else ratings.conservative_score(m.rating, self.cfg.ratings)}
                for m in self.members.values()
            ],
            "last_step_rates": {k: (v if isinstance(v, float) and math.isfinite(v) else None)
                                for k, v in lm.items() if k.endswith(("valid_rate", "solve_rate"))},
            "evolution_events": len(self.events),
            "run_dir": str(self.run_dir),
        }

    def close(self) -> None:
        self.sandbox.close()
        self.backend.close()


def _one_line(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def rank_policy(policy, comm: Comm):
    """The policy config of this rank: with several ranks on a GPU node, rank i uses its own GPU."""
    if comm.world == 1 or policy.device in ("cpu",) or policy.device.startswith("cuda:"):
        return policy
    import torch

    if policy.device == "auto" and not torch.cuda.is_available():
        return policy
    # one visible GPU (narrow_visible_devices) is this rank's: cuda:0; several (not narrowed): its local rank's
    return policy.replace(device=f"cuda:{local_cuda_index(comm.local_rank, torch.cuda.device_count())}")


def initial_members(cfg: Config) -> list[Member]:
    """t0..t{T-1} and s0..s{S-1}; the baseline has one member ``a0`` in role ``agent``."""
    prior = ratings.prior(cfg.ratings)
    if cfg.population.baseline:
        return [Member(id="a0", role="agent", adapter="a0", rating=prior)]
    return founders(cfg.population.teachers, cfg.population.students, prior)
