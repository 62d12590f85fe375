"""`populora score BENCH SAMPLES.jsonl [--out FILE]`: score generations made anywhere.

Per-sample verdicts are printed as JSON lines (or written to ``--out``), then the aggregate as the
last line, through exactly the extraction and scorers of ``populora eval`` (see ``eval/runner/samples.py``
for the samples format).
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score a samples file (EvalPlus format) on one benchmark with populora's scorers",
                       description=__doc__ + "\nSamples: code benchmarks: task_id + solution (full program) or "
                       "completion; math: id + answer.", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("benchmark", help="benchmark name (humaneval_plus, mbpp_plus, livecodebench, gsm8k, ...)")
    p.add_argument("samples", help="JSON lines: task_id + solution|completion (code), id + answer (math)")
    p.add_argument("--out", help="write the per-sample verdicts (and the aggregate line) here")
    p.add_argument("--data", help="the benchmark's file (LiveCodeBench: directory of test*.jsonl)")
    p.add_argument("--data-dir", help="a directory with your own copy of the benchmark files (default: $POPULORA_BENCHMARKS_DIR, else the shipped eval/data)")
    p.add_argument("--parallel", type=int, help="EvalPlus workers (default: EvalPlus's own, cpu_count // 2)")
    p.add_argument("--evalplus-max-memory-gb", type=float, help="EvalPlus address-space limit (default its 4 GiB)")
    p.add_argument("--evalplus-min-time-limit", type=float, default=1.0, help="EvalPlus seconds per test (default 1)")
    p.add_argument("--evalplus-gt-time-limit-factor", type=float, default=4.0,
                   help="EvalPlus limit as a multiple of the canonical solution's time (default 4)")
    p.add_argument("--lcb-timeout", type=int, default=6, help="LiveCodeBench per-test alarm in seconds (default 6)")
    p.add_argument("--lcb-release", default="release_v5", help="LiveCodeBench release (default release_v5)")
    p.add_argument("--lcb-start", default="2024-08-01", help="first contest date (ISO), inclusive")
    p.add_argument("--lcb-end", default="2025-02-01", help="last contest date (ISO), inclusive (as LCB)")
    p.add_argument("--cache-dir", help="EvalPlus data/ground-truth cache (default $POPULORA_CACHE/evalplus)")
    p.set_defaults(func=run_score)


def run_score(args: argparse.Namespace) -> int:
    from eval.benchmarks import BENCHMARKS, BenchmarkDataError
    from eval.runner.pipeline import load_benchmarks
    from eval.runner.samples import SamplesError, read_samples, score_samples
    from eval.runner.settings import EvalSettings

    try:
        if args.benchmark not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {args.benchmark!r} (known: {', '.join(BENCHMARKS)})")
        s = EvalSettings(benchmarks=[args.benchmark], data_dir=args.data_dir,
                         data_paths={args.benchmark: args.data} if args.data else {}, lcb_release=args.lcb_release,
                         lcb_start=args.lcb_start or None, lcb_end=args.lcb_end or None, lcb_timeout_s=args.lcb_timeout,
                         evalplus_parallel=args.parallel, evalplus_max_memory_gb=args.evalplus_max_memory_gb,
                         evalplus_min_time_limit=args.evalplus_min_time_limit,
                         evalplus_gt_time_limit_factor=args.evalplus_gt_time_limit_factor, cache_dir=args.cache_dir)
        items = load_benchmarks(s)[args.benchmark]
        samples = read_samples(args.samples)
        records, agg = score_samples(args.benchmark, samples, items, s, where=args.samples)
    except (BenchmarkDataError, SamplesError, ValueError, FileNotFoundError) as e:
        print(f"populora score: {e}", file=sys.stderr)
        return 2
    lines = [json.dumps(r) for r in records] + [json.dumps({"aggregate": agg})]
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(lines[-1])
    else:
        print("\n".join(lines))
    if agg["n_tasks"] < agg["n_items_in_benchmark"]:
        print(f"note: the samples cover {agg['n_tasks']} of the {agg['n_items_in_benchmark']} items of {args.benchmark}",
              file=sys.stderr)
    return 0
