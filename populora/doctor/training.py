"""The model and training stages: one training step of every member through the update strategy
``populora train`` runs (``rl.update_strategy``), with memory beside the plan.

The batch of a member is ``policy.train_micro_batch`` sequences of the preset's longest prompt
(``policy.max_prompt_tokens``) and longest completion (the larger ``max_new_tokens`` of the two
roles): the size the memory plan bounds. Token ids are random over the model's own vocabulary; the
behaviour log-probs are ``-ln(vocab)`` of that vocabulary (what a random-weights model gives every
token, about: the importance ratio starts near 1); rewards alternate 0/1 so the advantages are not
all zero. The update is the run's strategy (``populora.rl.strategies``) on an ``HFBackend`` with the
run's ``RLConfig``, exactly as the self-play loop calls it.

Order: a warm-up step (every member once, on one short sequence: CUDA kernels load, the allocator
grows, every member's AdamW state exists; timed and reported apart), then the timed step at full
size, then (CPU only) a profiled, untimed update of the first member for the step's memory.

Memory, per item of the plan that one process can measure:

- CUDA: ``torch.cuda.memory_allocated`` before/after a phase (resident items),
  ``torch.cuda.max_memory_allocated`` during the timed step above the level at its start (the
  training step), and beside it ``max_memory_reserved`` (the allocator's cached blocks: what
  actually runs out); the CUDA context is what the device has in use outside the allocator after the
  timed step (every kernel it needed is loaded by then), this one process;
- CPU: resident items are counted (bytes of the tensors' storages, each once); the training step's
  peak is the peak of live CPU allocations above the start level in ``torch.profiler``'s memory
  timeline (a private torch API: where it is missing the step is "not measured"). The profiled update
  is an extra one of the first member, after every member has stepped (its AdamW state exists, as in
  a run), and is not timed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from populora.doctor.model import random_model
from populora.doctor.records import Measure, MemberUpdate, StrategyTiming, TrainingResult


def update(backend, batches: dict[str, list], cfg, strategy: str | None = None) -> list[dict]:
    """One update of every member of ``batches`` ({adapter: sequences}) through the update strategy
    (``rl.update_strategy`` unless ``strategy`` names another), micro-batches packed to the run's token
    budget (``micro_batching(cfg)``), as the self-play loop's ranks call it."""
    from populora.rl.strategies import MemberBatch, strategy_for
    from populora.selfplay.update import micro_batching

    name = strategy or cfg.rl.update_strategy
    return strategy_for(name).update(backend, [MemberBatch(a, b) for a, b in batches.items()], cfg.rl,
                                     micro_batching(cfg))


def members(cfg) -> list[tuple[str, str]]:
    """``(adapter name, role)`` of every member of the preset (the baseline: one agent, both roles)."""
    pop = cfg.population
    if pop.baseline:
        return [("agent", "both")]
    return [(f"t{i}", "teacher") for i in range(pop.teachers)] + [(f"s{i}", "student") for i in range(pop.students)]


def trained_here(cfg, roster: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The members rank 0 of a run of ``run.ranks`` ranks trains (``populora.distributed.placement``): the
    doctor holds every member's adapter, as each rank does, and trains these (all of them on one rank)."""
    from populora.distributed.placement import hosted, place

    mine = set(hosted(place([name for name, _ in roster], cfg.run.ranks), 0))
    return [m for m in roster if m[0] in mine]


def sequence_lengths(cfg) -> tuple[int, int]:
    """``(prompt, completion)`` tokens of every training sequence: the longest the preset allows."""
    sp = cfg.selfplay
    return cfg.policy.max_prompt_tokens, max(sp.teacher_sampling.max_new_tokens, sp.student_sampling.max_new_tokens)


def member_batch(role: str, rows: int, prompt_tokens: int, completion_tokens: int, vocab: int, seed: int) -> list:
    """``rows`` random sequences of one member, as the records the trainer takes; behaviour
    log-probs ``-ln(vocab)``: ``vocab`` is the model's own (``config.vocab_size``)."""
    import torch

    from populora.selfplay.stages import Seq
    from populora.tasks.kinds import default_kind_names

    task_type = default_kind_names()[0]  # the kind only groups advantages; any one will do
    g = torch.Generator().manual_seed(seed)
    lp = -math.log(vocab)
    out = []
    prompts: dict[str, list[int]] = {}
    counts = {"teacher": 0, "student": 0}
    for i in range(rows):
        r = role if role != "both" else ("teacher", "student")[i % 2]
        k = counts[r]
        counts[r] += 1
        # a teacher's proposal has a prompt of its own; a student's attempts come in groups of two
        # rollouts of one prompt (the same prompt ids), one rewarded, one not, as per-prompt
        # estimators need
        group = f"{r[0]}{k if r == 'teacher' else k // 2}"
        if group not in prompts:
            prompts[group] = torch.randint(10, vocab, (prompt_tokens,), generator=g).tolist()
        out.append(Seq(
            role=r, task_type=task_type, prompt_ids=prompts[group],
            completion_ids=torch.randint(10, vocab, (completion_tokens,), generator=g).tolist(),
            logprobs=[lp] * completion_tokens, reward=float(k % 2), prompt_group=group,
        ))
    return out


def storage_bytes(tensors) -> int:
    """Bytes of the storages behind ``tensors``, each storage once."""
    seen: dict[int, int] = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def adapter_state_bytes(backend, adapter: str) -> int:
    """Counted bytes of one adapter: its live LoRA factors, the float32 masters when the compute dtype
    is lower, and its AdamW state (the snapshot ``optimizer_state`` returns has the same sizes)."""
    import torch

    live = backend.trainable_parameters(adapter)
    total = storage_bytes(live)
    if live and live[0].dtype != torch.float32:
        total += sum(p.numel() * 4 for p in live)

    def tensors(x):
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, dict):
            for v in x.values():
                yield from tensors(v)
        elif isinstance(x, list | tuple):
            for v in x:
                yield from tensors(v)

    return total + sum(t.numel() * t.element_size() for t in tensors(backend.optimizer_state(adapter).get("state", {})))


def cpu_peak_bytes(fn):
    """``(fn(), peak live CPU bytes above the start level, or None where torch lacks the timeline)``."""
    try:
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler._memory_profiler import Action, MemoryProfileTimeline
    except ImportError:
        return fn(), None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        out = fn()
    level = peak = 0
    for _, action, _, size in MemoryProfileTimeline(prof._memory_profile()).timeline:
        if action == Action.CREATE:
            level += size
        elif action == Action.DESTROY:
            level -= size
        peak = max(peak, level)
    return out, peak


def cuda_peaks(fn):
    """``(fn(), max_memory_allocated above memory_allocated at the start, max_memory_reserved)``
    during ``fn``: the allocated peak is what the plan's items count, the reserved one what runs out."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    return out, torch.cuda.max_memory_allocated() - start, torch.cuda.max_memory_reserved()


def cuda_outside_allocator_bytes() -> float:
    """Device memory in use that torch's allocator does not hold: this process's CUDA context with
    the kernel modules loaded so far (and whatever other processes hold on the device)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return float(total - free - torch.cuda.memory_reserved())


@dataclass
class Trainer:
    """The model stage's result, which the training and HF generation stages use: the random model
    inside an ``HFBackend`` with every member's adapter. ``release()`` frees it (idempotent)."""

    cfg: object
    device: str
    dtype: str
    backend: object | None
    source: str
    params: int
    vocab: int
    base_weights: Measure
    roster: list[tuple[str, str]]
    resident_start: float

    def release(self) -> None:
        import gc

        import torch

        if self.backend is not None:
            self.backend.close()
            self.backend = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def training_dtype(policy, device: str) -> str:
    """The preset's dtype; ``auto`` is bf16 on CUDA and float32 on CPU (as ``load_base``)."""
    return policy.dtype if policy.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")


def build_trainer(cfg, device: str) -> Trainer:
    """The model stage: preset ``cfg``'s architecture with random weights, an ``HFBackend`` on it and
    every member's adapter; base weights measured."""
    import torch

    from populora.policy.hf import HFBackend

    on_cuda = device == "cuda"
    dtype = training_dtype(cfg.policy, device)
    policy = cfg.policy.replace(device=device, dtype=dtype)
    before = torch.cuda.memory_allocated() if on_cuda else 0
    model, tokenizer, source = random_model(policy.model, device, dtype, seed=cfg.seed)
    if on_cuda:
        base = Measure("base_weights", float(torch.cuda.memory_allocated() - before),
                       "torch.cuda.memory_allocated after building the model minus before")
    else:
        base = Measure("base_weights", float(storage_bytes(list(model.parameters()) + list(model.buffers()))),
                       "counted: storage bytes of the model's parameters and buffers")
    params = sum(p.numel() for p in model.parameters())
    backend = HFBackend(policy, adamw=cfg.rl.adamw_kwargs(), model=model, tokenizer=tokenizer)
    trainer = Trainer(cfg, device, dtype, backend, source, params, int(model.config.vocab_size), base,
                      members(cfg), torch.cuda.memory_allocated() if on_cuda else 0.0)
    try:
        for i, (name, _) in enumerate(trainer.roster):
            backend.add_adapter(name, backend.new_adapter_weights(seed=cfg.seed + i))
    except BaseException:
        trainer.release()
        raise
    return trainer


WARMUP_TOKENS = (16, 16)  # ours: one short sequence per member: kernels load and AdamW state appears, in seconds


def step_flops(cfg, roster_size: int, rows: int, prompt_tokens: int, completion_tokens: int) -> float:
    """Model FLOPs of the timed step: every member on ``rows`` sequences (``mfu.lora_training_flops``)."""
    from populora.doctor.mfu import lora_training_flops
    from populora.plan.shapes import model_shape

    lora = cfg.policy.lora
    return lora_training_flops(model_shape(cfg.policy.model), lora.rank, tuple(lora.target_modules),
                               [(prompt_tokens, completion_tokens)] * (rows * roster_size))


def device_peak(device: str, dtype: str) -> float | None:
    """GPU 0's dense peak FLOP/s in ``dtype`` from ``mfu.PEAK_BF16`` (None on CPU or an unknown card)."""
    if device != "cuda":
        return None
    import torch

    from populora.doctor.mfu import peak_flops

    return peak_flops(torch.cuda.get_device_name(0), dtype)


def run_training(trainer: Trainer, strategies: bool = False) -> TrainingResult:
    """The training stage on the model stage's trainer (see the module docstring). An error inside is
    the result's ``error`` with what was measured before it; the trainer stays for generation.
    ``strategies``: afterwards, the same full batches through every other update strategy, timed beside
    the timed step's (fused and sequential: same batches, same warm-up; one more optimizer step each)."""
    import torch

    cfg, backend = trainer.cfg, trainer.backend
    roster = trained_here(cfg, trainer.roster)  # every member's adapter is resident; these train here
    on_cuda = trainer.device == "cuda"
    prompt_tokens, completion_tokens = sequence_lengths(cfg)
    rows = cfg.policy.train_micro_batch
    vocab = trainer.vocab
    strategy = cfg.rl.update_strategy
    memory: list[Measure] = [trainer.base_weights]
    updates: list[MemberUpdate] = []
    warm = None
    peak = reserved = step_s = None
    peak_method = ""
    compared: list[StrategyTiming] = []
    try:
        flops = step_flops(cfg, len(roster), rows, prompt_tokens, completion_tokens)
    except Exception:  # a shape the table does not know: the FLOPs are not counted, nothing else is lost
        flops = None
    peak_f = device_peak(trainer.device, trainer.dtype)

    def sync():
        if on_cuda:
            torch.cuda.synchronize()

    def batches(full: bool) -> dict[str, list]:
        p, c, n = (prompt_tokens, completion_tokens, rows) if full else (*WARMUP_TOKENS, 1)
        return {name: member_batch(role, n, p, c, vocab, seed=cfg.seed + i) for i, (name, role) in enumerate(roster)}

    try:
        warm_batches = batches(False)
        sync()
        t0 = time.perf_counter()
        update(backend, warm_batches, cfg, strategy)
        sync()
        warm_s = time.perf_counter() - t0
        warm = MemberUpdate("every member", "warm-up", len(roster), len(roster) * sum(WARMUP_TOKENS), warm_s,
                            None, None)
        if on_cuda:
            memory.append(Measure("adapters_optimizer", float(torch.cuda.memory_allocated() - trainer.resident_start),
                                  "torch.cuda.memory_allocated after adding every adapter and one (warm-up) update "
                                  "each, minus before adding them"))
        else:
            memory.append(Measure("adapters_optimizer", float(sum(adapter_state_bytes(backend, n) for n, _ in trainer.roster)),
                                  "counted: LoRA factors, float32 masters (if any) and AdamW state of every adapter"))
        full = batches(True)
        t0 = time.perf_counter()
        if on_cuda:
            stats, step, reserved = cuda_peaks(lambda: update(backend, full, cfg, strategy))
        else:
            stats = update(backend, full, cfg, strategy)
        seconds = time.perf_counter() - t0
        each = seconds if strategy == "sequential" and len(roster) == 1 else None
        for (name, role), st in zip(roster, stats):
            updates.append(MemberUpdate(name, role, rows, rows * (prompt_tokens + completion_tokens), each,
                                        float(st["loss/total"]), st.get("grad_norm")))
        step_s = seconds
        if on_cuda:
            memory.append(Measure("training_step", float(step), "torch.cuda.max_memory_allocated during the timed "
                                  f"step ({strategy} update of every member) above memory_allocated at its start"))
            memory.append(Measure("cuda_context", cuda_outside_allocator_bytes(),
                                  "device memory in use outside torch's caching allocator after the timed step "
                                  "(the CUDA context with every kernel the updates loaded; and whatever other "
                                  "processes held): this one process"))
            peak, peak_method = float(torch.cuda.max_memory_allocated()), "torch.cuda.max_memory_allocated of the timed step"
        else:
            name, role = roster[0]
            batch = {name: member_batch(role, rows, prompt_tokens, completion_tokens, vocab, seed=cfg.seed)}
            _, step = cpu_peak_bytes(lambda: update(backend, batch, cfg, "sequential"))
            memory.append(Measure("training_step", None if step is None else float(step),
                                  "peak of live CPU allocations above the start level (torch.profiler memory "
                                  "timeline) during a second, untimed update of the first member" if step is not None
                                  else "not measured: this torch has no profiler memory timeline"))
            memory.append(Measure("cuda_context", None, "not applicable on CPU (the plan counts none)"))
            import resource

            peak = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
            peak_method = "peak resident set size of the process so far (getrusage ru_maxrss)"
        if strategies:  # the timed step's strategy as timed above; every other one on the same batches
            from populora.rl.strategies import UPDATE_STRATEGIES

            tokens = len(roster) * rows * (prompt_tokens + completion_tokens)
            compared.append(StrategyTiming(strategy, step_s, tokens))
            for name in sorted(set(UPDATE_STRATEGIES) - {strategy}):
                sync()
                t0 = time.perf_counter()
                update(backend, full, cfg, name)
                sync()
                compared.append(StrategyTiming(name, time.perf_counter() - t0, tokens))
    except Exception as e:
        return TrainingResult(trainer.source, trainer.params, trainer.dtype, trainer.device, prompt_tokens,
                              completion_tokens, rows, cfg.policy.gradient_checkpointing, tuple(updates), tuple(memory),
                              error=f"{type(e).__name__}: {first_line(e)}", warmup=warm, strategy=strategy,
                              behaviour_logprob=-math.log(vocab), step_seconds=step_s, flops=flops, peak_flops=peak_f,
                              strategies=tuple(compared))
    return TrainingResult(trainer.source, trainer.params, trainer.dtype, trainer.device, prompt_tokens,
                          completion_tokens, rows, cfg.policy.gradient_checkpointing, tuple(updates), tuple(memory),
                          peak, peak_method, warmup=warm, peak_reserved_bytes=reserved, strategy=strategy,
                          step_seconds=step_s, behaviour_logprob=-math.log(vocab), flops=flops, peak_flops=peak_f,
                          strategies=tuple(compared))


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""
