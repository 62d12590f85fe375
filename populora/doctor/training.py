"""One training micro-batch per member through the trainer code ``populora train`` runs, with memory.

The batch of a member is ``policy.train_micro_batch`` sequences of the preset's longest prompt
(``policy.max_prompt_tokens``) and longest completion (the larger ``max_new_tokens`` of the two
roles): the size the memory plan bounds. Token ids are random; the behaviour log-probs are
``-ln(vocab)`` (what a random-weights model gives every token, about); rewards alternate 0/1 so the
advantages are not all zero. The update is ``populora.selfplay.update.train_member`` on an
``HFBackend`` with the run's ``RLConfig`` (``update``), exactly as the self-play loop calls it.

Memory, per item of the plan that one process can measure:

- CUDA: ``torch.cuda.memory_allocated`` before/after a phase (resident items) and
  ``torch.cuda.max_memory_allocated`` above the level at its start (the training step);
- CPU: resident items are counted (bytes of the tensors' storages, each once); the training step's
  peak is the peak of live CPU allocations above the start level in ``torch.profiler``'s memory
  timeline (a private torch API: where it is missing the step is "not measured"). The profiled update
  is an extra one of the first member, after every member has stepped once (its AdamW state exists,
  as in a run), and is not timed.
"""

from __future__ import annotations

import math
import time

from populora.doctor.model import random_model
from populora.doctor.records import Measure, MemberUpdate, TrainingResult


def update(backend, adapter: str, batch, cfg) -> dict:
    """``train_member`` as ``selfplay/loop.py`` calls it for one member: micro-batches packed to the
    run's token budget (``micro_batching(cfg)``)."""
    from populora.selfplay.update import micro_batching, train_member

    return train_member(backend, adapter, batch, cfg.rl, micro_batching(cfg))


def members(cfg) -> list[tuple[str, str]]:
    """``(adapter name, role)`` of every member of the preset (the baseline: one agent, both roles)."""
    pop = cfg.population
    if pop.baseline:
        return [("agent", "both")]
    return [(f"t{i}", "teacher") for i in range(pop.teachers)] + [(f"s{i}", "student") for i in range(pop.students)]


def sequence_lengths(cfg) -> tuple[int, int]:
    """``(prompt, completion)`` tokens of every training sequence: the longest the preset allows."""
    sp = cfg.selfplay
    return cfg.policy.max_prompt_tokens, max(sp.teacher_sampling.max_new_tokens, sp.student_sampling.max_new_tokens)


def member_batch(role: str, rows: int, prompt_tokens: int, completion_tokens: int, vocab: int, seed: int) -> list:
    """``rows`` random sequences of one member, as the records ``train_member`` takes."""
    import torch

    from populora.selfplay.stages import Seq
    from populora.tasks.kinds import default_kind_names

    task_type = default_kind_names()[0]  # the kind only groups advantages; any one will do
    g = torch.Generator().manual_seed(seed)
    lp = -math.log(vocab)
    out = []
    for i in range(rows):
        r = role if role != "both" else ("teacher", "student")[i % 2]
        out.append(Seq(
            role=r, task_type=task_type,
            prompt_ids=torch.randint(10, vocab, (prompt_tokens,), generator=g).tolist(),
            completion_ids=torch.randint(10, vocab, (completion_tokens,), generator=g).tolist(),
            logprobs=[lp] * completion_tokens, reward=float(i % 2),
            prompt_group=f"p{i}" if r == "teacher" else f"p{i // 2}",
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


def cuda_peak_bytes(fn):
    """``(fn(), torch.cuda.max_memory_allocated during fn above memory_allocated at its start)``."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    return out, torch.cuda.max_memory_allocated() - start


def cuda_context_bytes() -> float:
    """Device memory in use that torch's allocator does not hold: this process's CUDA context (and
    whatever other processes hold on the device), right after CUDA starts."""
    import torch

    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    return float(total - free - torch.cuda.memory_reserved())


def run_training(cfg, device: str):
    """The training stage of preset ``cfg`` on ``device``; returns ``(TrainingResult, backend)`` (the
    caller generates with the backend, then closes it)."""
    import torch

    from populora.plan.memory import cuda_contexts
    from populora.policy.engine import engine_class
    from populora.policy.hf import HFBackend

    on_cuda = device == "cuda"
    policy = cfg.policy.replace(device=device)
    dtype = policy.dtype if policy.dtype != "auto" else ("bfloat16" if on_cuda else "float32")
    policy = policy.replace(dtype=dtype)
    memory: list[Measure] = []
    if on_cuda:
        ctx = cuda_context_bytes()
        before = torch.cuda.memory_allocated()
    model, tokenizer, source = random_model(policy.model, device, dtype, seed=cfg.seed)
    if on_cuda:
        memory.append(Measure("base_weights", float(torch.cuda.memory_allocated() - before),
                              "torch.cuda.memory_allocated after building the model minus before"))
    else:
        memory.append(Measure("base_weights", float(storage_bytes(list(model.parameters()) + list(model.buffers()))),
                              "counted: storage bytes of the model's parameters and buffers"))
    params = sum(p.numel() for p in model.parameters())
    backend = HFBackend(policy, adamw=cfg.rl.adamw_kwargs(), model=model, tokenizer=tokenizer)
    prompt_tokens, completion_tokens = sequence_lengths(cfg)
    rows = policy.train_micro_batch
    vocab = min(len(tokenizer), model.config.vocab_size)
    roster = members(cfg)
    resident_start = torch.cuda.memory_allocated() if on_cuda else 0
    updates = []
    try:
        for i, (name, _) in enumerate(roster):
            backend.add_adapter(name, backend.new_adapter_weights(seed=cfg.seed + i))
        for i, (name, role) in enumerate(roster):
            batch = member_batch(role, rows, prompt_tokens, completion_tokens, vocab, seed=cfg.seed + i)
            if on_cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            stats = update(backend, name, batch, cfg)
            if on_cuda:
                torch.cuda.synchronize()
            updates.append(MemberUpdate(name, role, rows, rows * (prompt_tokens + completion_tokens),
                                        time.perf_counter() - t0, float(stats["loss/total"]),
                                        float(stats.get("grad_norm", float("nan")))))
        if on_cuda:
            memory.append(Measure("adapters_optimizer", float(torch.cuda.memory_allocated() - resident_start),
                                  "torch.cuda.memory_allocated after adding every adapter and one update each, "
                                  "minus before adding them"))
        else:
            memory.append(Measure("adapters_optimizer", float(sum(adapter_state_bytes(backend, n) for n, _ in roster)),
                                  "counted: LoRA factors, float32 masters (if any) and AdamW state of every adapter"))
        name, role = roster[0]
        batch = member_batch(role, rows, prompt_tokens, completion_tokens, vocab, seed=cfg.seed)
        if on_cuda:
            _, step = cuda_peak_bytes(lambda: update(backend, name, batch, cfg))
            memory.append(Measure("training_step", float(step), "torch.cuda.max_memory_allocated during a second "
                                  "update of the first member, above memory_allocated at its start"))
            contexts = cuda_contexts(engine_class(policy.engine))  # the trainer's + the engine's own
            per_process = (f" x {contexts} processes (the trainer + the {policy.engine} engine's), as the plan counts"
                           if contexts > 1 else "")
            memory.append(Measure("cuda_context", ctx * contexts,
                                  "device memory in use outside torch's allocator right after CUDA started "
                                  f"(this process's context, and anything other processes held){per_process}"))
            peak, peak_method = float(torch.cuda.max_memory_allocated()), "torch.cuda.max_memory_allocated of the measured update"
        else:
            _, step = cpu_peak_bytes(lambda: update(backend, name, batch, cfg))
            memory.append(Measure("training_step", None if step is None else float(step),
                                  "peak of live CPU allocations above the start level (torch.profiler memory "
                                  "timeline) during a second, untimed update of the first member" if step is not None
                                  else "not measured: this torch has no profiler memory timeline"))
            memory.append(Measure("cuda_context", None, "not applicable on CPU (the plan counts none)"))
            import resource

            peak = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
            peak_method = "peak resident set size of the process so far (getrusage ru_maxrss)"
    except Exception as e:
        backend.close()
        return TrainingResult(source, params, dtype, device, prompt_tokens, completion_tokens, rows,
                              policy.gradient_checkpointing, tuple(updates), tuple(memory),
                              error=f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"), None
    result = TrainingResult(source, params, dtype, device, prompt_tokens, completion_tokens, rows,
                            policy.gradient_checkpointing, tuple(updates), tuple(memory), peak, peak_method)
    return result, backend
