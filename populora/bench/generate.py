"""`populora bench generate`: a mixed-adapter batch against its alternatives, on the HF and vLLM engines.

Per base model and engine, 8 adapters (random B, so they really differ) and the same 16 prompts in
every arm (2 per adapter in the mixed batch), greedy decoding, arms alternating within a repeat so
all see the same machine load (in reverse order every other repeat; the best of ``--repeats``, 3 by
default, is reported):

- ``mixed``: one ``generate`` call, each request for its own adapter (2 per adapter);
- ``one_adapter``: the same prompts, all for ONE adapter, one call (the multi-LoRA goal, S-LoRA /
  Punica: a mixed batch within 1.1x of this, i.e. mixed/one_adapter >= 0.91);
- ``base``: the same prompts for the bare base model (adapter None), one call;
- ``per_adapter``: the mixed requests, one call per adapter (the loop over adapters);
- HF only, ``mixed_dynamic_kv``: the mixed call again with transformers' ``DynamicCache`` instead of
  the preallocated KV cache (``policy.kv_cache``): the ``preallocated/dynamic`` ratio, and the same
  tokens (a mismatch is a warning and exit status 1).

A warm-up call (every prompt, each for its mixed adapter, and one for the base; 2 new tokens) runs
first and is reported apart: every adapter has run and the prefill has had the arms' size.

``mixed`` and ``per_adapter`` are the same requests, so they must give the same tokens (checked:
a mismatch is a warning and exit status 1); the vLLM arms are compared token for token with the HF
arms of the same requests (a mismatch is a warning). vLLM's prefix cache is emptied before every
timed arm, so each arm prefills its prompts as HF does. vLLM runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless the environment sets it): it starts faster, and it
computes with this process's torch threads (``--threads``), as HF does. It replaces
``torch.set_num_threads`` with a no-op, which is put back when the engine is closed. Its log level
is WARNING (``VLLM_LOGGING_LEVEL``, unless set) so that its INFO lines do not bury the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
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
ARMS = ("mixed", "one_adapter", "base", "per_adapter")
KV_ARM = "mixed_dynamic_kv"  # HF: the mixed requests with transformers' DynamicCache (policy.kv_cache=dynamic)
VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "WARNING"}  # defaults set here
GOAL = 1 / 1.1  # S-LoRA / Punica: a mixed batch within 1.1x of a one-adapter batch


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="tiny,smollm2-135m", help="comma-separated base models")
    p.add_argument("--engines", default="auto", help="comma-separated engines (policy.engine values: hf, vllm, ...); "
                                                     "auto = hf, and vllm when it is installed")
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--prompts-per-adapter", type=int, default=2)
    p.add_argument("--new-tokens", default="tiny=64,smollm2-135m=16", help="MODEL=N,... or one N for all")
    p.add_argument("--rank", type=int, default=16, help="LoRA rank (one vLLM serves: 8, 16, 32, 64, ...)")
    # ours: 3, the best of which is reported: on a shared machine one run of an arm can be 2x another
    # (docs/benchmarks/generate.md), and the ratios compare arms a few percent apart
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per arm (best is reported; default 3)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default)")
    p.add_argument("--device", default="auto")


def engines(spec: str) -> list[str]:
    """``auto`` -> ``hf`` plus ``vllm`` when vLLM is importable; else the names given."""
    if spec == "auto":
        return ["hf"] + (["vllm"] if importlib.util.find_spec("vllm") is not None else [])
    return [e for e in spec.split(",") if e]


def _prompts(tokenizer, count: int) -> list[str]:
    out = []
    for i in range(count):
        q = f"Write a Python function that {CODE_REQUESTS[i % len(CODE_REQUESTS)]}."
        chat = tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        out.append(chat + "```python")
    return out


def _policy_config(model: str, engine: str, args: argparse.Namespace) -> dict:
    import torch

    cfg = {"engine": engine, "model": model, "device": args.device, "cpu_threads": args.threads,
           "max_batch_size": 256, "max_prompt_tokens": 256,
           "lora": {"rank": args.rank, "alpha": 2 * args.rank, "b_std": 0.02}}
    if engine == "vllm":
        for key, value in VLLM_ENV.items():  # module docstring
            os.environ.setdefault(key, value)
        on_cpu = args.device == "cpu" or not torch.cuda.is_available()
        cfg["vllm"] = {"enforce_eager": on_cpu}  # no torch.compile on CPU: starts in seconds
    return cfg


def bench_model(model: str, engine: str, args: argparse.Namespace) -> dict:
    """Times every arm on one (model, engine) backend; returns tokens/s and the token ids per arm."""
    import torch

    from populora.policy import make_backend
    from populora.policy.base import GenerationRequest, SamplingParams

    sampling = SamplingParams(temperature=0, max_new_tokens=per_model(args.new_tokens, model))
    set_num_threads = torch.set_num_threads  # an in-process vLLM on CPU replaces it with a no-op
    be = make_backend(_policy_config(model, engine, args), max_new_tokens=sampling.max_new_tokens)
    try:
        names = [f"member_{i}" for i in range(args.adapters)]
        for i, n in enumerate(names):
            be.add_adapter(n, be.new_adapter_weights(seed=i))
        prompts = _prompts(be.tokenizer, args.adapters * args.prompts_per_adapter)
        mixed = [GenerationRequest(p, names[i % args.adapters]) for i, p in enumerate(prompts)]
        batches = {"mixed": mixed, "one_adapter": [GenerationRequest(p, names[0]) for p in prompts],
                   "base": [GenerationRequest(p, None) for p in prompts]}

        kv_arm = engine == "hf" and be.trainer.config.kv_cache != "dynamic"
        arm_names = ARMS + ((KV_ARM,) if kv_arm else ())

        def call(arm):
            if arm == KV_ARM:  # the mixed requests through transformers' DynamicCache
                kind, be.trainer.config.kv_cache = be.trainer.config.kv_cache, "dynamic"
                try:
                    return be.generate(mixed, sampling)
                finally:
                    be.trainer.config.kv_cache = kind
            if arm != "per_adapter":
                return be.generate(batches[arm], sampling)
            out = [None] * len(mixed)
            for n in names:
                rows = [i for i, r in enumerate(mixed) if r.adapter == n]
                for i, res in zip(rows, be.generate([mixed[i] for i in rows], sampling)):
                    out[i] = res
            return out

        def fresh():  # every arm computes its prompts (vLLM would reuse their KV blocks)
            be.engine.reset_prefix_cache()
            if torch.cuda.is_available():
                torch.cuda.synchronize()

        # warm-up: every prompt of the arms (each for its mixed adapter) and the base, 2 tokens: each
        # adapter runs once, the prefill has the arms' size (starts vLLM's engine)
        t0 = time.perf_counter()
        be.generate([*mixed, GenerationRequest(prompts[0], None)], SamplingParams(temperature=0, max_new_tokens=2))
        warmup = time.perf_counter() - t0
        arms = {arm: {"seconds": math.inf} for arm in arm_names}
        cpu = {arm: math.inf for arm in arm_names}  # the fewest CPU seconds of this process per arm
        for repeat in range(args.repeats):  # arms alternate, so all see the same machine load; every
            # other repeat runs them in reverse, so that no arm always comes first (or after the longest)
            for arm in arm_names if repeat % 2 == 0 else arm_names[::-1]:
                fresh()
                t0, c0 = time.perf_counter(), time.process_time()
                results = call(arm)
                fresh()
                dt = time.perf_counter() - t0
                cpu[arm] = min(cpu[arm], time.process_time() - c0)
                if dt < arms[arm]["seconds"]:
                    ids = [list(c.token_ids) for r in results for c in r.completions]
                    tokens = sum(map(len, ids))
                    arms[arm] = {"seconds": dt, "tokens": tokens, "tokens_per_s": tokens / dt, "ids": ids}
        zero_base = bool(getattr(be.engine, "base_via_zero_adapter", False))
        in_process = not be.engine.process_ids()  # it computes with this process's threads
    finally:
        be.close()
        torch.set_num_threads = set_num_threads  # so that later backends (and `bench all`) set theirs
    tps = {arm: arms[arm]["tokens_per_s"] for arm in arm_names}
    kv = {"kv_cache": be.trainer.config.kv_cache, "preallocated/dynamic": tps["mixed"] / tps[KV_ARM]} if kv_arm else {}
    return {**kv,
        "model": model, "engine": engine, "device": str(be.device), "adapters": args.adapters,
        "requests": len(mixed), "new_tokens": sampling.max_new_tokens, "warmup_s": warmup,
        "threads": str(torch.get_num_threads()) if in_process else "own", "base_via_zero_adapter": zero_base,
        **arms, "mixed/one_adapter": tps["mixed"] / tps["one_adapter"], "mixed/base": tps["mixed"] / tps["base"],
        "mixed/per_adapter": tps["mixed"] / tps["per_adapter"],
        # the same ratio by this process's CPU seconds (useful where the engine computes in this process)
        "cpu_seconds": cpu, "mixed/one_adapter (cpu)": (arms["mixed"]["tokens"] / cpu["mixed"])
        / (arms["one_adapter"]["tokens"] / cpu["one_adapter"]) if in_process and cpu["mixed"] > 0 else None,
    }


def same_tokens(a: list[list[int]], b: list[list[int]]) -> int:
    """How many requests produced identical token ids in two runs of the same requests."""
    return sum(x == y for x, y in zip(a, b))


def run(args: argparse.Namespace) -> int:
    from populora.policy.engine import engine_names

    names, known = engines(args.engines), engine_names()
    unknown = [e for e in names if e not in known]
    if unknown or not names:
        print(f"error: --engines takes engines of {known}, got {args.engines!r}")
        return 2
    if "vllm" in names:
        where = {k: "from the environment" if k in os.environ else "set by the benchmark" for k in VLLM_ENV}
        print("note: vllm settings:", ", ".join(f"{k}={os.environ.get(k, v)} ({where[k]})" for k, v in VLLM_ENV.items()))
    print("model          engine  device  threads  requests  new_tok  warmup_s  mixed tok/s  one_adapter tok/s"
          "  base tok/s  per_adapter tok/s  mixed/one_adapter  mixed/base  mixed/per_adapter")
    status, rows = 0, {}
    for model in [m for m in args.models.split(",") if m]:
        for engine in names:
            r = rows[model, engine] = bench_model(model, engine, args)
            print(
                f"{model:<14} {engine:<7} {r['device']:<7} {r['threads']:>7} {r['requests']:>9} {r['new_tokens']:>8}"
                f" {r['warmup_s']:>9.1f} {r['mixed']['tokens_per_s']:>12.1f} {r['one_adapter']['tokens_per_s']:>18.1f}"
                f" {r['base']['tokens_per_s']:>11.1f} {r['per_adapter']['tokens_per_s']:>18.1f}"
                f" {r['mixed/one_adapter']:>17.2f}x {r['mixed/base']:>10.2f}x {r['mixed/per_adapter']:>17.2f}x",
                flush=True,
            )
            if r["mixed"]["ids"] != r["per_adapter"]["ids"]:
                print(f"warning: {model} {engine}: mixed and per_adapter generated different tokens "
                      f"({same_tokens(r['mixed']['ids'], r['per_adapter']['ids'])}/{r['requests']} requests equal)")
                status = 1
    kv_rows = [(key, r) for key, r in rows.items() if KV_ARM in r]
    if kv_rows:
        print("\nmodel          engine  kv_cache      mixed tok/s  dynamic-cache tok/s  preallocated/dynamic  same tokens")
    for (model, engine), r in kv_rows:
        same = same_tokens(r["mixed"]["ids"], r[KV_ARM]["ids"])
        print(f"{model:<14} {engine:<7} {r['kv_cache']:<12} {r['mixed']['tokens_per_s']:>12.1f}"
              f" {r[KV_ARM]['tokens_per_s']:>20.1f} {r['preallocated/dynamic']:>20.2f}x {same:>8}/{r['requests']}")
        if same != r["requests"]:
            print(f"warning: {model} {engine}: the preallocated and the dynamic KV cache generated different tokens")
            status = 1
    zero_base = [m for (m, _), r in rows.items() if r["base_via_zero_adapter"]]
    if zero_base:
        print(f"note: vllm's base arm ({', '.join(zero_base)}) runs through an all-zero adapter on CPU "
              "(the engine's workaround for vLLM's CPU LoRA ops), so it pays the LoRA work too")
    pairs = [m for m in dict.fromkeys(m for m, _ in rows) if (m, "hf") in rows and (m, "vllm") in rows]
    if pairs:
        print("\nmodel          arm          hf tok/s  vllm tok/s  vllm/hf  same greedy tokens as hf")
    for model in pairs:
        hf, vl = rows[model, "hf"], rows[model, "vllm"]
        for arm in ARMS:
            same = same_tokens(hf[arm]["ids"], vl[arm]["ids"])
            print(f"{model:<14} {arm:<12} {hf[arm]['tokens_per_s']:>8.1f} {vl[arm]['tokens_per_s']:>11.1f}"
                  f" {vl[arm]['tokens_per_s'] / hf[arm]['tokens_per_s']:>7.2f}x {same:>10}/{hf['requests']} requests")
            if same != hf["requests"]:
                print(f"warning: {model} {arm}: vllm and hf generated different greedy tokens for "
                      f"{hf['requests'] - same} of {hf['requests']} requests")
    for (model, engine), r in rows.items():
        verdict = "meets" if r["mixed/one_adapter"] >= GOAL else "misses"
        print(f"{model} {engine}: mixed/one_adapter {r['mixed/one_adapter']:.3f}x {verdict} the multi-LoRA goal "
              f"(>= 1/1.1 = {GOAL:.3f}x: a mixed batch within 1.1x of a one-adapter batch)")
    cpu_rows = [(key, r) for key, r in rows.items() if r["mixed/one_adapter (cpu)"] is not None]
    for (model, engine), r in cpu_rows:
        print(f"{model} {engine}: mixed/one_adapter by this process's CPU seconds {r['mixed/one_adapter (cpu)']:.3f}x "
              f"(mixed {r['cpu_seconds']['mixed']:.2f} s, one_adapter {r['cpu_seconds']['one_adapter']:.2f} s of CPU; "
              "wall time also counts waiting for a core on a shared machine)")
    return status
