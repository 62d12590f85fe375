"""`populora bench train`: per-adapter train-step throughput with 8 adapters on one base.

One train step of a member = ``completion_logprobs`` with gradients for its batch + a
policy-gradient-shaped loss + ``optimizer_step`` (backward, clip, AdamW). Two backends run side by
side: one holds the 8 adapters, the other a single adapter (the single-agent alternative). Their
steps are interleaved (member i of the population, then the single adapter, for each i) so both
see the same machine load; the ratio of tokens/s shows what hosting the population in one model
costs a member's update.

Then packing (``rl/packing.py``): one member's update on a variable-length batch (completion lengths
log-uniform over a 32x range, as self-play's run from a few hundred tokens to the longest allowed),
its gradients accumulated over micro-batches packed up to the plan's token budget vs
``train_micro_batch`` sequences in batch order, on the same backend, alternating. It times the
forward and backward passes (``selfplay.update.accumulate_gradients``, the code ``populora train``
runs; the optimizer step after it is the same for both) and compares the two gradients; it prints
``packed/unpacked speed-up: N.NNx, max gradient difference: E`` (of the last model).

Last, fused against sequential member updates (``rl.update_strategy``, ``rl/strategies.py``): 8 members
on one backend, one whole update of every member per arm (forward, backward, each member's clip and
AdamW step: ``strategy.update``, what ``populora train`` runs), alternating, from the same weights, at
the per-member batch, micro-batch and LoRA rank of one preset (``--fused-config``, tiny.yaml), on two
length distributions: the paper's regime as the packing comparison draws it (``paper``) and the
sequences a tiny self-play step really trains on (``selfplay``: one step of ``configs/tiny.yaml`` with
the same number of members, recorded). The gradients of the two arms are compared before any step
(float32, every adapter). The last line is ``fused/sequential speed-up: N.NNx, max gradient
difference: E`` for the paper's regime.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="tiny,smollm2-135m", help="comma-separated base models")
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--batch", default="tiny=4,smollm2-135m=2", help="sequences per train step (MODEL=N,... or N)")
    p.add_argument("--prompt-tokens", default="tiny=96,smollm2-135m=48", help="MODEL=N,... or N")
    p.add_argument("--completion-tokens", default="tiny=64,smollm2-135m=32", help="MODEL=N,... or N")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default)")
    p.add_argument("--device", default="auto")
    p.add_argument("--packing-models", default="tiny", help="models of the packed vs unpacked comparison")
    p.add_argument("--packing-batch", type=int, default=24, help="sequences of the variable-length batch")
    p.add_argument("--packing-micro-batch", type=int, default=4, help="policy.train_micro_batch of the comparison")
    p.add_argument("--packing-lengths", default="tiny=64+512,default=64+256",
                   help="MODEL=P+N: longest prompt and completion of the variable-length batch")
    p.add_argument("--repeats", type=int, default=3, help="timed updates per arm of the packing and fused comparisons")
    p.add_argument("--fused-model", default="tiny", help="model of the fused vs sequential comparison ('' = skip it)")
    p.add_argument("--fused-members", type=int, default=8, help="members trained on one rank")
    p.add_argument("--fused-config", default=str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"),
                   help="preset whose selfplay.sequences_per_adapter, policy.train_micro_batch and policy.lora.rank the "
                        "fused comparison uses on both distributions (the next three options override them)")
    p.add_argument("--fused-sequences", type=int, default=0, help="sequences per member in the paper's regime (0 = the preset's)")
    p.add_argument("--fused-micro-batch", type=int, default=0, help="policy.train_micro_batch (0 = the preset's)")
    p.add_argument("--fused-rank", type=int, default=0, help="LoRA rank (0 = the preset's)")
    p.add_argument("--fused-lengths", default="64+512", help="P+N: longest prompt and completion (paper regime)")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="policy.gradient_checkpointing in the fused comparison (needed for a 7B's long rows on a GPU)")
    p.add_argument("--selfplay-config", default=str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"),
                   help="preset whose first step's training batches are the second distribution ('' = skip it)")


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


def variable_batch(vocab: int, n: int, prompt_tokens: int, new_tokens: int, seed: int = 0) -> list:
    """``n`` student sequences of random tokens: prompts uniform in [P/4, P], completions
    log-uniform in [N/32, N] (ours: the spread of self-play completions, ~200 to ~8k tokens)."""
    import math
    import random

    from populora.selfplay.stages import Seq
    from populora.tasks.kinds import default_kind_names

    task_type = default_kind_names()[0]  # the kind only groups advantages; any one will do
    rng = random.Random(seed)
    seqs = []
    for i in range(n):
        p = rng.randint(max(1, prompt_tokens // 4), prompt_tokens)
        c = max(1, min(new_tokens, round(math.exp(rng.uniform(math.log(max(1, new_tokens / 32)), math.log(new_tokens))))))
        seqs.append(Seq(role="student", task_type=task_type, prompt_ids=[rng.randrange(10, vocab) for _ in range(p)],
                        completion_ids=[rng.randrange(10, vocab) for _ in range(c)],
                        logprobs=[-rng.random() for _ in range(c)], reward=float(rng.random() < 0.5),
                        prompt_group=f"g{i // 4}"))
    return seqs


def bench_packing(model: str, args: argparse.Namespace) -> dict:
    """Packed vs unpacked micro-batches of one update on one backend; see the module docstring."""
    import torch

    from populora.policy import make_backend
    from populora.rl.config import RLConfig
    from populora.rl.packing import TokenBudget, padded_tokens
    from populora.selfplay.update import MicroBatching, accumulate_gradients, advantages_of

    spec = {"model": model, "device": args.device, "cpu_threads": args.threads,
            "lora": {"rank": args.rank, "alpha": 2 * args.rank, "b_std": 0.02}}
    be = make_backend(spec)
    be.add_adapter("member", be.new_adapter_weights(seed=0))
    table = dict(item.split("=", 1) for item in args.packing_lengths.split(","))
    n_prompt, n_new = (int(x) for x in table.get(model, table.get("default", "64+256")).split("+"))
    batch = variable_batch(min(len(be.tokenizer), be.base.config.vocab_size), args.packing_batch, n_prompt, n_new)
    rl = RLConfig()
    adv = advantages_of(batch, rl)
    budget = TokenBudget.of(args.packing_micro_batch, n_prompt, n_new)
    arms = {"packed": MicroBatching(budget, args.packing_micro_batch, packed=True),
            "unpacked": MicroBatching(budget, args.packing_micro_batch, packed=False)}

    def update(arm: str) -> tuple[float, torch.Tensor]:
        if be.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        accumulate_gradients(be, "member", batch, adv, rl, arms[arm])
        if be.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        grad = torch.cat([p.grad.reshape(-1).float() for p in be.trainable_parameters("member")])
        be.discard_gradients("member")
        return seconds, grad

    update("packed"), update("unpacked")  # warm-up
    times = {"packed": [], "unpacked": []}
    grads = {}
    for _ in range(max(1, args.repeats)):
        for arm in ("packed", "unpacked"):
            seconds, grads[arm] = update(arm)
            times[arm].append(seconds)
    lengths = [(len(s.prompt_ids), len(s.completion_ids)) for s in batch]
    real = sum(p + c for p, c in lengths)
    out = {"model": model, "device": str(be.device), "sequences": len(batch), "real_tokens": real,
           "max_grad_diff": float((grads["packed"] - grads["unpacked"]).abs().max()),
           "max_grad": float(grads["unpacked"].abs().max())}
    for arm, mb in arms.items():
        groups = mb.split(batch)
        out[arm] = {"passes": len(groups), "padded_tokens": padded_tokens(lengths, groups),
                    "seconds": sorted(times[arm])[len(times[arm]) // 2]}  # the median update
    be.close()
    return out


def selfplay_batches(config: str, members: int) -> tuple[list[list], int, int]:
    """The batches the first step of a self-play run of ``config`` trains (``members`` split between
    teachers and students), with the preset's longest prompt and completion: the lengths (and tokens)
    such a run really produces. Rewards are redrawn (seeded, -1/0/1): the random tiny model's own are all
    equal (every proposal invalid, every answer badly formatted), which gives every advantage 0 and a zero
    gradient, and nothing to compare."""
    import random
    import tempfile
    from dataclasses import replace

    from populora.config import load_config
    from populora.plan.inputs import longest_completion
    from populora.selfplay.loop import SelfPlay

    teachers = members // 2
    cfg = load_config(config, [f"population.teachers={teachers}", f"population.students={members - teachers}",
                               "selfplay.steps=1"])
    recorded: list[list] = []
    with tempfile.TemporaryDirectory() as tmp:
        sp = SelfPlay(cfg, tmp)
        train = sp.ranks.train

        def recording(batches, *args, **kwargs):  # this step's batches, as the trainer receives them
            recorded.extend(list(b) for b in batches.values())
            return train(batches, *args, **kwargs)

        sp.ranks.train = recording
        try:
            sp.step(1)
        finally:
            sp.close()
    rng = random.Random(0)
    recorded = [[replace(s, reward=float(rng.choice((-1, 0, 1)))) for s in b] for b in recorded]
    return recorded, cfg.policy.max_prompt_tokens, longest_completion(cfg)


@dataclass(frozen=True)
class FusedSettings:
    """Per-member batch, micro-batch and LoRA rank of the fused comparison (from ``--fused-config`` unless
    given)."""

    sequences: int
    micro_batch: int
    rank: int


def fused_settings(args: argparse.Namespace) -> FusedSettings:
    if args.fused_sequences and args.fused_micro_batch and args.fused_rank:
        return FusedSettings(args.fused_sequences, args.fused_micro_batch, args.fused_rank)
    if not args.fused_config:
        raise ValueError("--fused-config '' needs --fused-sequences, --fused-micro-batch and --fused-rank")
    from populora.config import load_config

    cfg = load_config(args.fused_config)
    return FusedSettings(args.fused_sequences or cfg.selfplay.sequences_per_adapter,
                         args.fused_micro_batch or cfg.policy.train_micro_batch,
                         args.fused_rank or cfg.policy.lora.rank)


def bench_fused(model: str, distribution: str, batches: list[list], prompt_tokens: int, new_tokens: int,
                args: argparse.Namespace, settings: FusedSettings) -> dict:
    """Fused vs sequential updates of ``len(batches)`` members on one backend; see the module docstring."""
    import torch

    from populora.policy import make_backend
    from populora.rl.config import RLConfig
    from populora.rl.fused import MemberPart, fused_gradients
    from populora.rl.packing import MicroBatching, TokenBudget, padded_tokens
    from populora.rl.strategies import MemberBatch, strategy_for
    from populora.rl.update import accumulate_gradients, advantages_of

    rank = settings.rank
    spec = {"model": model, "device": args.device, "cpu_threads": args.threads,
            "gradient_checkpointing": args.gradient_checkpointing,
            "lora": {"rank": rank, "alpha": 2 * rank, "b_std": 0.02}}
    be = make_backend(spec)
    names = [f"m{i}" for i in range(len(batches))]
    for i, n in enumerate(names):
        be.add_adapter(n, be.new_adapter_weights(seed=i))
    start = {n: be.get_weights(n) for n in names}
    rl = RLConfig()
    mb = MicroBatching(TokenBudget.of(settings.micro_batch, prompt_tokens, new_tokens), settings.micro_batch)
    members = [MemberBatch(n, b) for n, b in zip(names, batches)]

    def sync():
        if be.device.type == "cuda":
            torch.cuda.synchronize()

    def grads() -> torch.Tensor:
        out = []
        for n in names:
            out += [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float()
                    for p in be.trainable_parameters(n)]
            be.discard_gradients(n)
        return torch.cat(out)

    # the gradients each arm steps with, from the same weights
    for n, b in zip(names, batches):
        accumulate_gradients(be, n, b, advantages_of(b, rl), rl, mb)
    g_seq = grads()
    fused_gradients(be, [MemberPart(n, b, advantages_of(b, rl)) for n, b in zip(names, batches)], rl, mb)
    g_fused = grads()

    def update(arm: str) -> float:
        for n in names:
            be.set_weights(n, start[n])
        sync()
        t0 = time.perf_counter()
        strategy_for(arm).update(be, members, rl, mb)
        sync()
        return time.perf_counter() - t0

    update("fused"), update("sequential")  # warm-up
    times = {"sequential": [], "fused": []}
    for _ in range(max(1, args.repeats)):
        for arm in ("sequential", "fused"):
            times[arm].append(update(arm))
    lengths = [[(len(s.prompt_ids), len(s.completion_ids)) for s in b] for b in batches]
    pooled = [x for ls in lengths for x in ls]
    seq_groups = [mb.split(b) for b in batches]
    fused_groups = mb.split([s for b in batches for s in b])
    out = {"model": model, "device": str(be.device), "distribution": distribution, "members": len(batches),
           "sequences": len(pooled), "real_tokens": sum(p + c for p, c in pooled),
           "max_grad_diff": float((g_fused - g_seq).abs().max()), "max_grad": float(g_seq.abs().max()),
           "sequential": {"passes": sum(len(g) for g in seq_groups),
                          "padded_tokens": sum(padded_tokens(ls, g) for ls, g in zip(lengths, seq_groups))},
           "fused": {"passes": len(fused_groups), "padded_tokens": padded_tokens(pooled, fused_groups)}}
    for arm in ("sequential", "fused"):
        out[arm]["seconds"] = sorted(times[arm])[len(times[arm]) // 2]  # the median update
    be.close()
    return out


def print_fused(results: list[dict], args: argparse.Namespace, settings: FusedSettings) -> None:
    print()
    print(f"fused vs sequential member updates: {args.fused_members} members on one backend, LoRA rank {settings.rank}, "
          f"one whole update each (forward, backward, clip, AdamW per member), budget {settings.micro_batch} x (longest "
          f"prompt + longest completion) tokens per pass; median of {args.repeats}")
    print("distribution  model          device  members  sequences  real tokens   arm         passes  padded tokens"
          "  s/update  real tok/s")
    for r in results:
        for arm in ("sequential", "fused"):
            a = r[arm]
            print(f"{r['distribution']:<13} {r['model']:<14} {r['device']:<7} {r['members']:>7} {r['sequences']:>10}"
                  f" {r['real_tokens']:>12}   {arm:<10} {a['passes']:>7} {a['padded_tokens']:>14} {a['seconds']:>9.3f}"
                  f" {r['real_tokens'] / a['seconds']:>11.1f}")
    for r in results[1:]:
        print(f"{r['distribution']}: fused/sequential speed-up {r['sequential']['seconds'] / r['fused']['seconds']:.2f}x, "
              f"max gradient difference {r['max_grad_diff']:.2e} (largest entry {r['max_grad']:.3g})")
    first = results[0]
    print(f"{first['distribution']}: largest gradient entry {first['max_grad']:.3g}")
    print(f"fused/sequential speed-up: {first['sequential']['seconds'] / first['fused']['seconds']:.2f}x, "
          f"max gradient difference: {first['max_grad_diff']:.2e}")


def run_fused(args: argparse.Namespace) -> None:
    """The fused comparison on the paper's regime, then on a tiny self-play step's sequences."""
    from transformers import AutoTokenizer

    from populora.policy.models import resolve_model
    from populora.policy.models.shapes import SHAPES
    from populora.policy.models.tiny import prepare_tiny

    model = args.fused_model
    if model in SHAPES or model == "tiny":  # random-init shapes pair with the tiny tokenizer
        vocab = len(AutoTokenizer.from_pretrained(prepare_tiny(0)))
    else:
        vocab = len(AutoTokenizer.from_pretrained(resolve_model(model)))
    settings = fused_settings(args)
    n_prompt, n_new = (int(x) for x in args.fused_lengths.split("+"))
    paper = [variable_batch(vocab, settings.sequences, n_prompt, n_new, seed=1000 + i)
             for i in range(args.fused_members)]
    results = [bench_fused(model, "paper", paper, n_prompt, n_new, args, settings)]
    if args.selfplay_config:
        batches, p, n = selfplay_batches(args.selfplay_config, args.fused_members)
        results.append(bench_fused(model, "selfplay", batches, p, n, args, settings))
    results.sort(key=lambda r: r["distribution"] != "paper")  # the paper's regime's line last
    print_fused(results, args, settings)


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
    packing = [bench_packing(m, args) for m in args.packing_models.split(",") if m]
    if packing:
        print_packing(packing, args)
    if args.fused_model:
        run_fused(args)
    return 0


def print_packing(packing: list[dict], args: argparse.Namespace) -> None:
    print()
    print(f"packing: one update's forward + backward passes on a variable-length batch, budget "
          f"{args.packing_micro_batch} x (longest prompt + longest completion) tokens per pass; median of {args.repeats}")
    print("model          device  sequences  real tokens   arm       passes  padded tokens  s/update  real tok/s")
    for r in packing:
        for arm in ("unpacked", "packed"):
            a = r[arm]
            print(f"{r['model']:<14} {r['device']:<7} {r['sequences']:>9} {r['real_tokens']:>12}   {arm:<8} {a['passes']:>7}"
                  f" {a['padded_tokens']:>14} {a['seconds']:>9.3f} {r['real_tokens'] / a['seconds']:>11.1f}")
    last = packing[-1]
    print(f"{last['model']}: largest gradient entry {last['max_grad']:.3g}")
    print(f"packed/unpacked speed-up: {last['unpacked']['seconds'] / last['packed']['seconds']:.2f}x, "
          f"max gradient difference: {last['max_grad_diff']:.2e}")
