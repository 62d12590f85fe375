"""`populora bench swap`: what it costs vLLM to serve more members than it has LoRA slots.

Two engines of the same config (vLLM's CPU build here, CUDA on a GPU node), one after the other: one with
a slot for every member (``policy.vllm.max_loras`` = members), one with ``--slots`` slots and a host cache
of as many (``max_cpu_loras``), so that a generate call naming every member loads adapters into slots as
it goes and reads evicted ones again from their published files. Each engine first serves one warm-up
call; then ``--repeats`` identical calls (every member, ``--prompts`` prompts each, greedy,
``--new-tokens`` tokens), alternating with nothing else, are timed; the medians are compared. The extra
time of the swapping engine divided by the loads it must at least make per call (members - slots: each
member not in a slot at the start is loaded once) is the cost of one swap (an upper bound per load: a
call may load an adapter more than once). Both engines must give the same greedy tokens; the
benchmark checks it and says so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--members", type=int, default=8)
    p.add_argument("--slots", type=int, default=2, help="LoRA slots of the swapping engine (fewer than --members)")
    p.add_argument("--prompts", type=int, default=2, help="prompts per member in a call")
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rank", type=int, default=8, help="LoRA rank (vLLM serves 8, 16, 32, 64, ...)")
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")


PROMPTS = ["def fibonacci(n):", "x = [1, 2, 3]\nfor", "import os\nclass Stack:", "while True:"]


def _engine(args, slots: int, root: str):
    from populora.policy import make_backend

    dtype = "float32" if args.device == "cpu" else "bfloat16"
    cfg = {"engine": "vllm", "model": args.model, "device": args.device, "dtype": dtype, "max_prompt_tokens": 64,
           "lora": {"rank": args.rank, "alpha": 2 * args.rank, "b_std": 0.5},
           "vllm": {"enforce_eager": True, "max_loras": slots, "max_cpu_loras": slots, "adapter_dir": root}}
    be = make_backend(cfg, max_new_tokens=args.new_tokens)
    for i in range(args.members):
        be.add_adapter(f"m{i}", be.new_adapter_weights(seed=i))
    return be


def measure(args, slots: int) -> tuple[list[float], list[list[int]]]:
    """Seconds of each timed call and the greedy tokens of the last one, on an engine with ``slots`` slots."""
    from populora.policy.base import GenerationRequest, SamplingParams

    greedy = SamplingParams(temperature=0, max_new_tokens=args.new_tokens)
    requests = [GenerationRequest(PROMPTS[j % len(PROMPTS)], f"m{i}") for j in range(args.prompts)
                for i in range(args.members)]
    with tempfile.TemporaryDirectory(prefix="populora-swap-") as root:
        be = _engine(args, slots, root)
        try:
            be.generate(requests, greedy)  # warm-up: the engine starts, every adapter is published and loaded once
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                out = be.generate(requests, greedy)
                times.append(time.perf_counter() - t0)
            return times, [r.completions[0].token_ids for r in out]
        finally:
            be.close()


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.slots < args.members:
        print(f"populora bench swap: --slots must be in [1, --members), got {args.slots} for {args.members}",
              file=sys.stderr)
        return 2
    full, tokens_full = measure(args, args.members)
    swap, tokens_swap = measure(args, args.slots)
    a, b = statistics.median(full), statistics.median(swap)
    loads = args.members - args.slots
    print(f"model {args.model} on {args.device}, LoRA rank {args.rank}: one generate call of {args.members} members x "
          f"{args.prompts} prompts, greedy, {args.new_tokens} new tokens; median of {args.repeats} after a warm-up")
    print(f"{'engine':<44} {'seconds':>8}")
    print(f"{f'{args.members} slots (no swapping)':<44} {a:>8.3f}")
    print(f"{f'{args.slots} slots, host cache of {args.slots} (swapping)':<44} {b:>8.3f}")
    print(f"same greedy tokens: {'yes' if tokens_full == tokens_swap else 'NO'}")
    print(f"swap cost: {b - a:+.3f} s per call, {1000 * (b - a) / loads:+.1f} ms per load "
          f"({loads} loads a call at least), {b / a:.2f}x the call")
    return 0 if tokens_full == tokens_swap else 1
