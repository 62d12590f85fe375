"""`populora bench eval`: evaluation generation (one engine vs one engine per adapter), sampled
evaluation (N samples per item in one pass vs N greedy passes) and scoring (`populora score` vs
EvalPlus's own `python -m evalplus.evaluate`).

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

Sampling, side by side in one run, on one engine (started once, before timing; its
``max_batch_size`` holds every row of the sampled pass, the same engine serves both arms), the same
adapters, HumanEval+ items and token budget, through ``populora eval``'s own code
(``eval.runner.pipeline.evaluate_runs`` with the engine passed in, every pending request in one call):

- sampled: one evaluation with ``--samples N`` (temperature 0.6, top-p 0.95): every adapter's N
  samples of every item generated in the same batches, then merged and scored in one scorer call;
- N greedy passes: N evaluations with one greedy sample each (what N samples cost without sampling
  in one pass: N generation passes and N scorer calls).

Both arms generate the same number of completions of at most the same length. Printed per arm: the
generation seconds (wall and process CPU), the whole evaluation's (generation, merge, scoring), the
tokens generated, the distinct programs the scorer ran (each distinct program of an item runs once
per evaluation: how much the scoring saves depends on how often samples repeat, which is the model's
doing), and the ratios (N greedy passes / sampled), alternating the arms' order by round.

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
    p.add_argument("--part", choices=("all", "generation", "sampling", "scoring"), default="all")
    p.add_argument("--samples", type=int, default=8, help="sampling: samples per item (N), and the number of greedy passes")
    p.add_argument("--backend", default="hf", help="sampling: the generation engine (policy.engine: hf, vllm, ...)")
    p.add_argument("--no-score", action="store_true", help="sampling: time the generation only (no scorer call)")
    p.add_argument("--unseeded", action="store_true",
                   help="sampling: leave an engine's per-request seeds off (vLLM: its batched sampler; vLLM 0.32's CPU "
                        "build fails on seeded requests whose prompt is prefilled in chunks)")
    p.add_argument("--rounds", type=int, default=3, help="scoring: alternating rounds of each tool")
    p.add_argument("--parallel", type=int, help="scoring: workers for both tools (default EvalPlus's cpu_count // 2)")
    p.add_argument("--model", default="tiny", help="base model (default: tiny)")
    p.add_argument("--adapters", type=int, default=8, help="number of adapters")
    p.add_argument("--items", type=int, default=8, help="first N HumanEval+ problems")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--data-dir", help="a directory with your own copy of the benchmark files (default: $POPULORA_BENCHMARKS_DIR, else the shipped eval/data)")


def run(args: argparse.Namespace) -> int:
    status = 0
    if args.part in ("all", "generation"):
        status |= run_generation(args)
    if args.part in ("all", "sampling"):
        status |= run_sampling(args)
    if args.part in ("all", "scoring"):
        status |= run_scoring(args)
    return status


def run_generation(args: argparse.Namespace) -> int:
    import torch

    from eval.benchmarks import load_items
    from eval.benchmarks.prompts import build_prompt
    from eval.runner.engine import make_engine
    from eval.runner.runs import init_run
    from eval.runner.settings import EvalSettings
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


def run_sampling(args: argparse.Namespace) -> int:
    """Sampled evaluation (N samples per item in one pass) vs N greedy passes (module docstring)."""
    import statistics
    from pathlib import Path

    import torch

    from eval.runner.decoding import Decoding
    from eval.runner.engine import make_engine
    from eval.runner.generate import read_records
    from eval.runner.pipeline import evaluate_runs
    from eval.runner.runs import init_run
    from eval.runner.settings import EvalSettings
    from populora.policy.config import PolicyConfig

    torch.manual_seed(0)
    n = args.samples
    rows = (args.adapters + 1) * args.items * n  # + the base model
    import os

    if args.backend == "vllm":  # vLLM's CPU build starts faster in this process (as `populora bench generate`)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    policy = PolicyConfig(model=args.model, max_batch_size=rows, engine=args.backend)
    sampled = Decoding.resolve(n)

    def settings(decoding: Decoding) -> EvalSettings:
        return EvalSettings(policy=policy, decoding=decoding, benchmarks=["humaneval_plus"], limit=args.items,
                            max_new_tokens={"humaneval_plus": args.max_new_tokens}, chunk_size=0, data_dir=args.data_dir,
                            check_base=False)

    from eval.benchmarks import load_items
    from eval.benchmarks.evalplus import prepare_program, solution_source

    items = {it.item_id: it for it in load_items("humaneval_plus", data_dir=args.data_dir)}

    def program(rec: dict) -> str:
        item = items[rec["item_id"]]
        source = solution_source(item, rec["prompt"], rec["completion"], rec["template"])
        return prepare_program(source, item.meta["entry_point"])[0]

    times: dict[str, list[tuple[float, float, float, float]]] = {"sampled": [], "greedy": []}
    tokens: dict[str, int] = {}
    distinct: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="populora-bench-sampling-") as tmp:
        tmp = Path(tmp)
        probe = make_engine(settings(Decoding()), [])
        shapes = probe.module_shapes()
        probe.close()
        del probe
        adapters = init_run(tmp / "run", shapes, [(f"m{i}", "student") for i in range(args.adapters)], rank=args.rank)
        engine = make_engine(settings(Decoding() if args.unseeded else sampled), adapters)  # greedy: no seed switch
        try:
            quiet = lambda m: None  # noqa: E731
            for r in range(args.rounds):
                for arm in (("sampled", "greedy") if r % 2 == 0 else ("greedy", "sampled")):
                    passes = [(sampled, tmp / f"r{r}-sampled")] if arm == "sampled" else \
                        [(Decoding(), tmp / f"r{r}-greedy{i}") for i in range(n)]
                    t0, c0 = time.perf_counter(), time.process_time()
                    gen_wall = gen_cpu = 0.0
                    for decoding, work in passes:
                        engine.engine.reset_prefix_cache()  # every pass is an evaluation of its own
                        g0, gc0 = time.perf_counter(), time.process_time()
                        evaluate_runs([tmp / "run"], settings(decoding), workdir=work, stage="generate", backend=engine,
                                      log=quiet)
                        gen_wall += time.perf_counter() - g0
                        gen_cpu += time.process_time() - gc0
                        evaluate_runs([tmp / "run"], settings(decoding), workdir=work,
                                      stage="merge" if args.no_score else "score", backend=engine, log=quiet)
                    times[arm].append((gen_wall, gen_cpu, time.perf_counter() - t0, time.process_time() - c0))
                    records = [[rec for f in (work / "merged").glob("*/*.jsonl") for rec in read_records(f)]
                               for _, work in passes]
                    tokens[arm] = sum(rec["completion_tokens"] for recs in records for rec in recs)
                    # what the scorer runs: each evaluation's distinct programs per item (EvalPlus's program of a completion)
                    distinct[arm] = sum(len({(rec["item_id"], program(rec)) for rec in recs}) for recs in records)
        finally:
            engine.close()
    med = {arm: [statistics.median(t[i] for t in ts) for i in range(4)] for arm, ts in times.items()}
    completions = (args.adapters + 1) * args.items * n
    print(f"sampled evaluation vs {n} greedy passes: {args.adapters} adapters + base x {args.items} HumanEval+ problems, "
          f"model {args.model}, {args.max_new_tokens} new tokens max, {completions} completions per arm, one {args.backend} "
          f"engine (max_batch_size {rows}; prompt cache reset before every pass{'; unseeded' if args.unseeded else ''}), "
          f"{args.rounds} round(s), medians")
    for arm, label in (("sampled", f"sampled, N={n} in one pass ({sampled.short()})"), ("greedy", f"{n} greedy passes")):
        g, gc, w, c = med[arm]
        print(f"  {label:38s}: generation {g:7.2f} s wall, {gc:7.2f} s CPU; "
              f"{'generation + merge' if args.no_score else 'whole evaluation'} {w:7.2f} s wall, {c:7.2f} s CPU "
              f"({tokens[arm]} tokens; {distinct[arm]} distinct programs scored)")
    (gs, gcs, ws, cs), (gg, gcg, wg, cg) = med["sampled"], med["greedy"]
    whole = "generation + merge" if args.no_score else "whole evaluation"
    print(f"  ratio ({n} greedy passes / sampled)    : generation {gg / gs:5.2f}x wall, {gcg / gcs:5.2f}x CPU; "
          f"{whole} {wg / ws:5.2f}x wall, {cg / cs:5.2f}x CPU")
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

    from eval.benchmarks.evalplus import _dataset_copy, canonical_solutions, evalplus_default_parallel

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
