"""`populora eval` and `populora leaderboard`: evaluate the adapters of runs, then tabulate them.

    populora eval runs/a runs/b --benchmarks code,math [--adapters ID ...] [--limit N]
    populora eval --runs runs/a --shard 3/8 --stage generate     # one Slurm array task
    populora eval --runs runs/a --shard 0/8 --stage score        # merge all 8 shards, then score
    populora eval --runs runs/a runs/b --samples 8               # pass@1..8 (T 0.6, top-p 0.95, seeded)
    populora leaderboard runs/a runs/b --out DIR

The heavy imports (torch, transformers, evalplus, math-verify) happen only when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _kv(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), v.strip()


def unit_float(text: str) -> float:
    """An argparse type: a number in (0, 1] (``--top-p``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value:g}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0 (``--temperature``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (seeds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (``--limit 0`` or ``-1`` is an error, not "everything")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value} (leave --limit out to evaluate every item)")
    return value


class Engines:
    """``--backend``'s choices: the registered generation engines (``populora.policy.engine``), read
    only when argparse checks a value or prints the help, so that building the CLI's parser (every
    command does) imports no engine. ``str()`` lists each with its summary."""

    def _names(self) -> list[str]:
        from populora.policy.engine import engine_names

        return engine_names()

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())

    def __str__(self) -> str:
        from populora.policy.engine import engines

        return "; ".join(f"{name} = {cls.summary}" if cls.summary else name for name, cls in engines().items())


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate adapters of runs (and the base model) on code and math benchmarks")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run directories (each with members.json), as "
                   "`populora leaderboard` and `report` take them")
    p.add_argument("--runs", nargs="+", metavar="RUN_DIR", help="the same as an option (what sweep jobs pass)")
    p.add_argument("--benchmarks", default="code,math", help="comma list: code, math, all or benchmark names")
    p.add_argument("--adapters", nargs="+", help="only these member ids (or run/member)")
    p.add_argument("--no-base", action="store_true", help="do not evaluate the bare base model")
    p.add_argument("--limit", type=positive_int, metavar="N", help="only the first N items of every benchmark (N >= 1)")
    p.add_argument("--model", default="tiny", help="base model: tiny, smollm2-135m, a path or HF id")
    p.add_argument("--skip-base-check", action="store_true",
                   help="evaluate even when an adapter records another base model than --model")
    backend = p.add_argument("--backend", choices=Engines(), metavar="ENGINE",
                             help="generation engine, policy.engine (default: the policy's default); one module "
                                  "populora/policy/<name>_engine.py each: %(engines)s")
    backend.engines = Engines()  # the help's %(engines)s
    p.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default auto: CUDA when present)")
    p.add_argument("--dtype", default="auto", help="float32, bfloat16 or float16 (default auto: bf16 on CUDA)")
    p.add_argument("--max-batch-size", type=int, default=64, help="rows decoded together by the backend")
    p.add_argument("--policy", type=_kv, action="append", default=[], metavar="KEY=VALUE",
                   help="any other engine setting of the run config's policy: section (repeatable), "
                        "e.g. vllm.gpu_memory_utilization=0.9 or vllm.max_loras=8; see docs/backends.md")
    p.add_argument("--template", default="base", choices=("base", "chat", "r1"), help="prompt template (see docs/evaluation.md)")
    p.add_argument("--samples", type=positive_int, default=1, metavar="N",
                   help="samples per item (default 1: greedy, as the paper); N > 1 gives pass@1..N (unbiased estimator) "
                        "and avg@N, all samples of all adapters generated in the same batches")
    p.add_argument("--temperature", type=non_negative_float, metavar="T",
                   help="sampling temperature (default: 0 = greedy for 1 sample, 0.6 for --samples > 1)")
    p.add_argument("--top-p", type=unit_float, metavar="P", help="nucleus sampling (default: 1 greedy, 0.95 sampled)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="sampling seed (default 0): the same seed draws the same samples, whatever the shards or chunks")
    p.add_argument("--max-new-tokens", type=_kv, action="append", default=[], metavar="BENCH=N",
                   help="token budget per benchmark (repeatable); defaults in eval/benchmarks/__init__.py")
    p.add_argument("--data", type=_kv, action="append", default=[], metavar="BENCH=PATH",
                   help="benchmark file (LiveCodeBench: directory of test*.jsonl); repeatable")
    p.add_argument("--data-dir", help="a directory with your own copy of the benchmark files (default: $POPULORA_BENCHMARKS_DIR, else the shipped eval/data)")
    p.add_argument("--lcb-release", default="release_v5", help="LiveCodeBench release (default release_v5)")
    p.add_argument("--lcb-start", default="2024-08-01", help="first contest date (ISO), inclusive")
    p.add_argument("--lcb-end", default="2025-02-01", help="last contest date (ISO), inclusive (as LCB)")
    p.add_argument("--lcb-timeout", type=int, default=6, help="LiveCodeBench per-test alarm in seconds (LCB: 6)")
    p.add_argument("--skip-missing", action="store_true", help="skip benchmarks whose data is not available (says which)")
    p.add_argument("--shard", default="0/1", help="i/N: this process's share of adapter x benchmark x slice")
    p.add_argument("--stage", default="all", choices=("all", "generate", "merge", "score"),
                   help="generate (this --shard only), merge, score (merge + score) or all (default)")
    p.add_argument("--slice-size", type=int, default=64, help="items per work unit split over shards (default 64)")
    p.add_argument("--workdir", help="generations and scores (default: <first run>/eval/work)")
    p.add_argument("--evalplus-max-memory-gb", type=float,
                   help="address-space limit of EvalPlus test processes (default: EvalPlus's 4 GiB)")
    p.add_argument("--evalplus-parallel", type=int, help="EvalPlus workers (default: EvalPlus's own, cpu_count // 2)")
    p.add_argument("--chunk-size", type=int,
                   help="requests per generate call (default: the engine's own: vLLM all pending of a benchmark, "
                        "HF one batch)")
    p.add_argument("--cache-dir", help="EvalPlus data/ground-truth cache (default $POPULORA_CACHE/evalplus)")
    p.set_defaults(func=eval_command, interrupt_hint="the completions generated so far are kept: run the same command "
                                                 "again to continue where it stopped")

    lp = sub.add_parser("leaderboard", help="write leaderboard.md/.csv/.html from evaluated runs")
    lp.add_argument("runs", nargs="+", help="run directories evaluated with `populora eval`")
    lp.add_argument("--out", required=True, help="output directory")
    lp.add_argument("--seed-key", default="seed",
                    help="config key that holds a run's training seed (default seed; a sweep's seed_key)")
    lp.set_defaults(func=run_leaderboard)


def eval_command(args: argparse.Namespace) -> int:
    """The run directories come as arguments or after --runs (both may be given)."""
    args.runs = [*args.run_dirs, *(args.runs or [])]
    if not args.runs:
        print("populora eval: give run directories: populora eval RUN_DIR ... (or --runs RUN_DIR ...)", file=sys.stderr)
        return 2
    from populora.model_source import prepare_model_source
    from populora.policy.models import EmbeddedModelMissing, ModelNotFound

    if args.stage in ("all", "generate") and (problem := prepare_model_source(args.model)) is not None:
        print(f"populora eval: --model {args.model}: {problem}", file=sys.stderr)  # the check train runs too
        return 2
    try:
        return run_eval(args)
    except (ModelNotFound, EmbeddedModelMissing) as e:  # a model that passed the check but does not load
        print(f"populora eval: --model {args.model}: {e}", file=sys.stderr)
        return 2


def run_eval(args: argparse.Namespace) -> int:
    from eval.benchmarks import BENCHMARKS, BenchmarkDataError, resolve_benchmarks
    from eval.runner.decoding import Decoding
    from eval.runner.generate import ShardError, parse_shard
    from eval.runner.pipeline import evaluate_runs, load_benchmarks
    from eval.runner.settings import EvalSettings
    from populora.policy.engine import EngineFailure

    try:
        benches = resolve_benchmarks(args.benchmarks)
        budgets = {}
        for k, v in args.max_new_tokens:
            if k not in BENCHMARKS:
                raise ValueError(f"--max-new-tokens: unknown benchmark {k!r}")
            budgets[k] = int(v)
        s = EvalSettings(
            policy=eval_policy(args), template=args.template, benchmarks=benches,
            decoding=Decoding.resolve(args.samples, args.temperature, args.top_p, args.seed), max_new_tokens=budgets,
            limit=args.limit, slice_size=args.slice_size, shard=parse_shard(args.shard), data_dir=args.data_dir,
            data_paths=dict(args.data), lcb_release=args.lcb_release, lcb_start=args.lcb_start or None,
            lcb_end=args.lcb_end or None, lcb_timeout_s=args.lcb_timeout, cache_dir=args.cache_dir,
            include_base=not args.no_base, evalplus_max_memory_gb=args.evalplus_max_memory_gb,
            evalplus_parallel=args.evalplus_parallel, chunk_size=args.chunk_size, check_base=not args.skip_base_check,
        )
        if args.skip_missing:
            kept = []
            for b in s.benchmarks:
                try:
                    load_benchmarks(EvalSettings(**{**s.__dict__, "benchmarks": [b], "limit": 1}))
                    kept.append(b)
                except BenchmarkDataError as e:
                    print(f"skipping {b}: {e}", file=sys.stderr)
            s.benchmarks = kept
        workdir = Path(args.workdir) if args.workdir else Path(args.runs[0]) / "eval" / "work"
        rows = evaluate_runs(args.runs, s, workdir=workdir, only=args.adapters, stage=args.stage,
                             log=lambda m: print(m, file=sys.stderr))
    except (BenchmarkDataError, ShardError, FileNotFoundError, ValueError) as e:  # PolicyConfigError too
        print(f"populora eval: {e}", file=sys.stderr)
        return 2
    except EngineFailure as e:  # what was generated is kept: the same command continues where it stopped
        print(f"populora eval: {e}; the completions generated so far are kept: run the same command again "
              f"to continue", file=sys.stderr)
        return 1
    if rows:
        from eval.runner.score_table import score_table

        print(score_table(rows))
    return 0


def eval_policy(args: argparse.Namespace):
    """The engine's ``PolicyConfig``: the flags, then ``--policy KEY=VALUE`` overrides (omegaconf
    dot-list, so values parse as they do in a run config; an unknown key is an error naming it)."""
    from omegaconf import OmegaConf

    from populora.policy.config import PolicyConfig

    base = {"model": args.model, "device": args.device, "dtype": args.dtype, "max_batch_size": args.max_batch_size}
    if args.backend is not None:
        base["engine"] = args.backend
    node = OmegaConf.merge(OmegaConf.create(base), OmegaConf.from_dotlist([f"{k}={v}" for k, v in args.policy]))
    return PolicyConfig.from_mapping(node)


def run_leaderboard(args: argparse.Namespace) -> int:
    from eval.leaderboard.page import write_leaderboard

    try:
        paths = write_leaderboard(args.runs, args.out, seed_key=args.seed_key)
    except (FileNotFoundError, ValueError) as e:
        print(f"populora leaderboard: {e}", file=sys.stderr)
        return 2
    for p in paths.values():
        print(p)
    return 0
