"""`populora bench generate`: one mixed-adapter batch vs one generate call per adapter.

8 adapters (random B, so they really differ), the same prompts per adapter in both arms, greedy
decoding: both arms produce exactly the same tokens (the tests prove per-row equality), so the
work is equal and the ratio of tokens/s is the speed-up of batching the population together.
"""

from __future__ import annotations

import argparse
import time

from populora.bench.train import per_model

CODE_REQUESTS = [
    "reverses a string", "returns the largest element of a list", "counts the vowels in a string",
    "checks whether a number is prime", "sums the digits of an integer", "removes duplicates from a list",
    "returns the n-th Fibonacci number", "flattens a list of lists", "computes the factorial of n",
    "merges two sorted lists", "returns the most common character of a string", "checks if a string is a palindrome",
    "returns the squares of a list of numbers", "transposes a matrix", "counts the words in a sentence",
    "returns the running sum of a list",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="tiny,smollm2-135m", help="comma-separated base models")
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--prompts-per-adapter", type=int, default=2)
    p.add_argument("--new-tokens", default="tiny=64,smollm2-135m=16", help="MODEL=N,... or one N for all")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--repeats", type=int, default=1, help="timed repeats per arm (best is reported)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default)")
    p.add_argument("--device", default="auto")


def _prompts(tokenizer, count: int) -> list[str]:
    out = []
    for i in range(count):
        q = f"Write a Python function that {CODE_REQUESTS[i % len(CODE_REQUESTS)]}."
        chat = tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        out.append(chat + "```python")
    return out


def bench_model(model: str, args: argparse.Namespace) -> dict:
    import torch

    from populora.policy import make_backend
    from populora.policy.base import GenerationRequest, SamplingParams

    be = make_backend({"model": model, "device": args.device, "cpu_threads": args.threads,
                       "max_batch_size": 256, "lora": {"rank": args.rank, "alpha": 2 * args.rank, "b_std": 0.02}})
    names = [f"member_{i}" for i in range(args.adapters)]
    for i, n in enumerate(names):
        be.add_adapter(n, be.new_adapter_weights(seed=i))
    prompts = _prompts(be.tokenizer, args.adapters * args.prompts_per_adapter)
    requests = [GenerationRequest(p, names[i % args.adapters]) for i, p in enumerate(prompts)]
    sampling = SamplingParams(temperature=0, max_new_tokens=per_model(args.new_tokens, model))

    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def mixed():
        return be.generate(requests, sampling)

    def per_adapter():
        out = []
        for n in names:
            out += be.generate([r for r in requests if r.adapter == n], sampling)
        return out

    be.generate(requests[:2], SamplingParams(temperature=0, max_new_tokens=2))  # warm-up
    arms = {"mixed": {"seconds": float("inf")}, "per_adapter": {"seconds": float("inf")}}
    for _ in range(args.repeats):  # arms alternate, so both see the same machine load
        for arm, fn in (("mixed", mixed), ("per_adapter", per_adapter)):
            sync()
            t0 = time.perf_counter()
            results = fn()
            sync()
            dt = time.perf_counter() - t0
            if dt < arms[arm]["seconds"]:
                tokens = sum(len(c.token_ids) for r in results for c in r.completions)
                arms[arm] = {"seconds": dt, "tokens": tokens, "tokens_per_s": tokens / dt}
    be.close()
    return {
        "model": model, "device": str(be.device), "adapters": args.adapters, "requests": len(requests),
        "new_tokens": sampling.max_new_tokens, "threads": torch.get_num_threads(), **arms,
        "ratio": arms["mixed"]["tokens_per_s"] / arms["per_adapter"]["tokens_per_s"],
    }


def run(args: argparse.Namespace) -> int:
    print("model          device  adapters  requests  tokens  mixed tok/s  per-adapter tok/s  ratio")
    status = 0
    for model in [m for m in args.models.split(",") if m]:
        r = bench_model(model, args)
        if r["mixed"]["tokens"] != r["per_adapter"]["tokens"]:
            print(f"warning: {model}: arms generated different token counts", r["mixed"]["tokens"], r["per_adapter"]["tokens"])
            status = 1
        print(
            f"{r['model']:<14} {r['device']:<7} {r['adapters']:>8} {r['requests']:>9} {r['mixed']['tokens']:>7}"
            f" {r['mixed']['tokens_per_s']:>12.1f} {r['per_adapter']['tokens_per_s']:>18.1f} {r['ratio']:>6.2f}x"
        )
    return status
