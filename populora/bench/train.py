"""`populora bench train`: per-adapter train-step throughput with 8 adapters on one base.

One train step of a member = ``completion_logprobs`` with gradients for its batch + a
policy-gradient-shaped loss + ``optimizer_step`` (backward, clip, AdamW). Two backends run side by
side: one holds the 8 adapters, the other a single adapter (the single-agent alternative). Their
steps are interleaved (member i of the population, then the single adapter, for each i) so both
see the same machine load; the ratio of tokens/s shows what hosting the population in one model
costs a member's update.
"""

from __future__ import annotations

import argparse
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="tiny,smollm2-135m", help="comma-separated base models")
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--batch", default="tiny=4,smollm2-135m=2", help="sequences per train step (MODEL=N,... or N)")
    p.add_argument("--prompt-tokens", default="tiny=96,smollm2-135m=48", help="MODEL=N,... or N")
    p.add_argument("--completion-tokens", default="tiny=64,smollm2-135m=32", help="MODEL=N,... or N")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default)")
    p.add_argument("--device", default="auto")


def per_model(spec: str, model: str, default: int = 32) -> int:
    """``"tiny=4,smollm2-135m=2"`` -> the value for ``model`` (``default=N`` or ``default``)."""
    if "=" not in spec:
        return int(spec)
    table = dict(item.split("=", 1) for item in spec.split(","))
    return int(table.get(model, table.get("default", default)))


def _step(be, name, prompts, comps, advantages):
    tl = be.completion_logprobs(name, prompts, comps, with_grad=True)
    loss = -((tl.logprobs * advantages[:, None]) * tl.mask).sum() / tl.mask.sum()
    be.optimizer_step(name, loss, max_grad_norm=1.0)


def bench_model(model: str, args: argparse.Namespace) -> dict:
    import torch

    from populora.policy import make_backend

    spec = {"model": model, "device": args.device, "cpu_threads": args.threads,
            "lora": {"rank": args.rank, "alpha": 2 * args.rank, "b_std": 0.02}}
    population, single = make_backend(spec), make_backend(spec)
    names = [f"member_{i}" for i in range(args.adapters)]
    for i, n in enumerate(names):
        population.add_adapter(n, population.new_adapter_weights(seed=i))
    single.add_adapter("agent", single.new_adapter_weights(seed=0))
    batch = per_model(args.batch, model)
    n_prompt, n_comp = per_model(args.prompt_tokens, model), per_model(args.completion_tokens, model)
    gen = torch.Generator().manual_seed(0)
    vocab = min(len(population.tokenizer), population.base.config.vocab_size)
    prompts = torch.randint(10, vocab, (batch, n_prompt), generator=gen).tolist()
    comps = torch.randint(10, vocab, (batch, n_comp), generator=gen).tolist()
    advantages = torch.randn(batch, generator=gen).to(population.device)
    tokens = batch * (n_prompt + n_comp)

    def timed(be, name):
        if be.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        _step(be, name, prompts, comps, advantages)
        if be.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    timed(population, names[0]), timed(single, "agent")  # warm-up
    pop_s = single_s = 0.0
    for n in names:
        pop_s += timed(population, n)
        single_s += timed(single, "agent")
    pop_s, single_s = pop_s / len(names), single_s / len(names)
    peak = torch.cuda.max_memory_allocated() / 2**30 if population.device.type == "cuda" else None
    device = str(population.device)
    population.close(), single.close()
    return {"model": model, "device": device, "shape": f"{batch} x ({n_prompt} + {n_comp})", "tokens_per_step": tokens, "population_s": pop_s,
            "single_s": single_s, "peak_gib": peak, "threads": torch.get_num_threads()}


def run(args: argparse.Namespace) -> int:
    print(f"{args.adapters} adapters, LoRA rank {args.rank} on all seven projections; a step = forward with gradients"
          " + backward + AdamW on batch x (prompt + completion) tokens; tok/s counts all of them")
    print("model          device  batch x (prompt + completion)  s/step (8 resident)  tok/s (8 resident)"
          "  s/step (1 resident)  tok/s (1 resident)  ratio")
    for model in [m for m in args.models.split(",") if m]:
        r = bench_model(model, args)
        tp, ts = r["tokens_per_step"] / r["population_s"], r["tokens_per_step"] / r["single_s"]
        print(f"{r['model']:<14} {r['device']:<7} {r['shape']:>29} {r['population_s']:>20.3f} {tp:>19.1f} {r['single_s']:>20.3f}"
              f" {ts:>19.1f} {tp / ts:>6.2f}x" + (f"  peak {r['peak_gib']:.1f} GiB" if r["peak_gib"] else ""))
    return 0
