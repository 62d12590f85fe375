"""`populora bench eval`: evaluation generation (one engine vs one engine per adapter) and scoring
(`populora score` vs EvalPlus's own `python -m evalplus.evaluate`).

Generation, side by side in one run, on the same adapters (freshly initialised, random B), the same HumanEval+
items and the same greedy budget:

- one engine: load the base once, register every adapter, generate all adapter x item requests in
  mixed-adapter batches (what ``populora eval`` does);
- one engine per adapter: for each adapter load the base, add the adapter, generate its requests,
  tear down (what lm-eval's and EvalPlus's model loaders do: one model per evaluation).

Both timings include engine start-up. Wall-clock time is what a user waits; the process CPU time
(all threads) is printed too because it is less sensitive to other load on a shared machine. Prints seconds, completions/s, the ratio, and how many
completions agree token for token between the two (greedy decoding: they should, up to numerical
differences of batched padding).

Scoring, side by side in one run: the canonical solutions of all 164 HumanEval+ problems as an
EvalPlus samples file (``task_id`` + ``solution``), scored by ``populora score humaneval_plus`` and by
``python -m evalplus.evaluate --dataset humaneval`` as separate processes (what a user runs), with
the same data file, the same worker count (EvalPlus's default, ``cpu_count // 2``, unless
``--parallel``), the same time and memory limits and a shared, pre-computed ground-truth cache, in
alternating rounds. Prints each round's wall time, the medians, their ratio, and both tools' pass
counts (they must agree).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--part", choices=("all", "generation", "scoring"), default="all")
    p.add_argument("--rounds", type=int, default=3, help="scoring: alternating rounds of each tool")
    p.add_argument("--parallel", type=int, help="scoring: workers for both tools (default EvalPlus's cpu_count // 2)")
    p.add_argument("--model", default="tiny", help="base model (default: tiny)")
    p.add_argument("--adapters", type=int, default=8, help="number of adapters")
    p.add_argument("--items", type=int, default=8, help="first N HumanEval+ problems")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--data-dir", help="benchmarks directory (default $POPULORA_BENCHMARKS_DIR or ../shared/benchmarks)")


def run(args: argparse.Namespace) -> int:
    status = 0
    if args.part in ("all", "generation"):
        status |= run_generation(args)
    if args.part in ("all", "scoring"):
        status |= run_scoring(args)
    return status


def run_generation(args: argparse.Namespace) -> int:
    import torch

    from eval.benchmarks import load_items
    from eval.engine import make_engine
    from eval.prompts import build_prompt
    from eval.runs import init_run
    from eval.settings import EvalSettings
    from populora.policy.base import GenerationRequest, SamplingParams
    from populora.policy.config import PolicyConfig

    torch.manual_seed(0)
    items = load_items("humaneval_plus", data_dir=args.data_dir)[: args.items]
    settings = EvalSettings(policy=PolicyConfig(model=args.model, max_batch_size=args.adapters * args.items))
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


def _timed(cmd: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU seconds (user + system of the command and all its children), result."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def run_scoring(args: argparse.Namespace) -> int:
    import json
    import os
    import statistics
    import sys
    from pathlib import Path

    from eval.evalplus import _dataset_copy, canonical_solutions
    from eval.settings import evalplus_default_parallel

    parallel = args.parallel or evalplus_default_parallel()
    canon = canonical_solutions("humaneval_plus", data_dir=args.data_dir)
    with tempfile.TemporaryDirectory(prefix="populora-bench-score-") as tmp:
        tmp = Path(tmp)
        cache = tmp / "cache"
        data = _dataset_copy("humaneval_plus", list(canon), cache / "evalplus", args.data_dir)
        env = dict(os.environ, HUMANEVAL_OVERRIDE_PATH=str(data), XDG_CACHE_HOME=str(cache / "evalplus" / "xdg"),
                   TOKENIZERS_PARALLELISM="false")
        samples = tmp / "samples.jsonl"
        samples.write_text("".join(json.dumps({"task_id": t, "solution": p}) + "\n" for t, p in canon.items()))
        ours = [sys.executable, "-m", "populora.cli", "score", "humaneval_plus", str(samples), "--out", str(tmp / "ours.jsonl"),
                "--parallel", str(parallel), "--cache-dir", str(cache / "evalplus")]
        if args.data_dir:
            ours += ["--data-dir", args.data_dir]

        def theirs(k: int) -> list[str]:
            d = tmp / f"evalplus-{k}"
            d.mkdir()
            (d / "samples.jsonl").write_text(samples.read_text())
            return [sys.executable, "-m", "evalplus.evaluate", "--dataset", "humaneval", "--samples", str(d / "samples.jsonl"),
                    "--parallel", str(parallel)]

        warm, _, proc = _timed(ours, env)  # computes EvalPlus's ground truth once, into the shared cache
        if proc.returncode != 0:
            print(proc.stderr[-2000:])
            return 1
        times: dict[str, list[float]] = {"populora score": [], "evalplus.evaluate": []}
        cpus: dict[str, list[float]] = {"populora score": [], "evalplus.evaluate": []}
        for k in range(args.rounds):
            for name in ("populora score", "evalplus.evaluate"):
                cmd = ours if name == "populora score" else theirs(k)
                t, c, proc = _timed(cmd, env)
                if proc.returncode != 0:
                    print(f"{name} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-2000:]}")
                    return 1
                times[name].append(t)
                cpus[name].append(c)
        agg = json.loads((tmp / "ours.jsonl").read_text().splitlines()[-1])["aggregate"]["metrics"]
        res = json.loads((tmp / f"evalplus-{args.rounds - 1}" / "samples_eval_results.json").read_text())["eval"]
        base = sum(r[0]["base_status"] == "pass" for r in res.values())
        plus = sum(r[0]["base_status"] == "pass" and r[0]["plus_status"] == "pass" for r in res.values())
    med = {k: statistics.median(v) for k, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in cpus.items()}
    print(f"scoring: {len(canon)} HumanEval+ canonical solutions, {parallel} worker(s) for both tools, "
          f"{args.rounds} alternating rounds (ground-truth cache warmed first: {warm:.1f} s)")
    for name, ts in times.items():
        print(f"  {name:18s}: wall " + ", ".join(f"{t:6.2f}" for t in ts) + f" s (median {med[name]:.2f} s); CPU "
              + ", ".join(f"{c:6.2f}" for c in cpus[name]) + f" s (median {cmed[name]:.2f} s)")
    print(f"  ratio (populora score / evalplus.evaluate, medians): {med['populora score'] / med['evalplus.evaluate']:.2f}x wall, "
          f"{cmed['populora score'] / cmed['evalplus.evaluate']:.2f}x CPU")
    print(f"  passed base/plus: populora {round(agg['HumanEval']['pass@1'] * len(canon))}/"
          f"{round(agg['HumanEval+']['pass@1'] * len(canon))}, evalplus {base}/{plus} of {len(canon)}")
    return 0
