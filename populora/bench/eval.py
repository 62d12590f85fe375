"""`populora bench eval`: evaluation generation for many adapters in one engine vs one engine per adapter.

Side by side in one run, on the same adapters (freshly initialised, random B), the same HumanEval+
items and the same greedy budget:

- one engine: load the base once, register every adapter, generate all adapter x item requests in
  mixed-adapter batches (what ``populora eval`` does);
- one engine per adapter: for each adapter load the base, add the adapter, generate its requests,
  tear down (what lm-eval's and EvalPlus's model loaders do: one model per evaluation).

Both timings include engine start-up. Wall-clock time is what a user waits; the process CPU time
(all threads) is printed too because it is less sensitive to other load on a shared machine. Prints seconds, completions/s, the ratio, and how many
completions agree token for token between the two (greedy decoding: they should, up to numerical
differences of batched padding).
"""

from __future__ import annotations

import argparse
import tempfile
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny", help="base model (default: tiny)")
    p.add_argument("--adapters", type=int, default=8, help="number of adapters")
    p.add_argument("--items", type=int, default=8, help="first N HumanEval+ problems")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--data-dir", help="benchmarks directory (default $POPULORA_BENCHMARKS_DIR or ../shared/benchmarks)")


def run(args: argparse.Namespace) -> int:
    import torch

    from eval.benchmarks import load_items
    from eval.pipeline import EvalSettings, make_engine
    from eval.prompts import build_prompt
    from eval.runs import init_run
    from populora.policy.base import GenerationRequest, SamplingParams

    torch.manual_seed(0)
    items = load_items("humaneval_plus", data_dir=args.data_dir)[: args.items]
    settings = EvalSettings(model=args.model, max_batch_size=args.adapters * args.items)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    with tempfile.TemporaryDirectory(prefix="populora-bench-eval-") as tmp:
        probe = make_engine(settings, [])
        shapes = probe.module_shapes()
        probe.close()
        del probe
        adapters = init_run(f"{tmp}/run", shapes, [(f"m{i}", "student") for i in range(args.adapters)], rank=args.rank)
        prompts = [build_prompt(it, "base") for it in items]

        t0, c0 = time.perf_counter(), time.process_time()
        engine = make_engine(settings, adapters)
        t_start_one = time.perf_counter() - t0
        reqs = [GenerationRequest(p, a.key) for p in prompts for a in adapters]  # item-major: mixed batches
        one = engine.generate(reqs, sampling)
        t_one, c_one = time.perf_counter() - t0, time.process_time() - c0
        engine.close()
        del engine
        one_text = {(r.adapter, r.prompt): res.completions[0].token_ids for r, res in zip(reqs, one)}

        t0, c0 = time.perf_counter(), time.process_time()
        t_starts = 0.0
        per_text = {}
        for a in adapters:
            s0 = time.perf_counter()
            eng = make_engine(settings, [a])
            t_starts += time.perf_counter() - s0
            ar = [GenerationRequest(p, a.key) for p in prompts]
            for r, res in zip(ar, eng.generate(ar, sampling)):
                per_text[(r.adapter, r.prompt)] = res.completions[0].token_ids
            eng.close()
            del eng
        t_per, c_per = time.perf_counter() - t0, time.process_time() - c0

    n = len(reqs)
    tokens = sum(len(v) for v in one_text.values())
    agree = sum(one_text[k] == per_text[k] for k in one_text)
    print(f"eval generation: {args.adapters} adapters x {len(items)} HumanEval+ problems, model {args.model}, "
          f"greedy, {args.max_new_tokens} new tokens max ({tokens} generated)")
    print(f"  one engine, mixed-adapter batches : {t_one:7.2f} s wall, {c_one:7.2f} s CPU  "
          f"({n / t_one:6.2f} completions/s; start-up {t_start_one:.2f} s)")
    print(f"  one engine start per adapter      : {t_per:7.2f} s wall, {c_per:7.2f} s CPU  "
          f"({n / t_per:6.2f} completions/s; start-ups {t_starts:.2f} s)")
    print(f"  ratio (per-adapter / one engine)  : {t_per / t_one:7.2f}x wall, {c_per / c_one:5.2f}x CPU")
    print(f"  completions identical token for token: {agree}/{n}")
    return 0
