"""`populora bench NAME`: benchmarks that print ratios measured side by side in one run.

Each benchmark is a module ``populora.bench.<name>`` with ``add_arguments(parser)`` and
``run(args) -> int``; it is imported only when asked for.
"""

from __future__ import annotations

import argparse
import importlib

# name -> module; the order is the order of `populora bench all`.
BENCHMARKS: dict[str, str] = {
    "executor": "populora.bench.executor",
    "generate": "populora.bench.generate",
    "train": "populora.bench.train",
    "operators": "populora.bench.operators",
    "step": "populora.bench.step",
    "eval": "populora.bench.eval",
    "distributed": "populora.bench.distributed",
    "scale": "populora.bench.scale",
    "swap": "populora.bench.swap",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a benchmark (prints side-by-side ratios)")
    bsub = p.add_subparsers(dest="bench_name", metavar="NAME")
    for name, module in BENCHMARKS.items():
        bp = bsub.add_parser(name, help=f"benchmark: {name}")
        importlib.import_module(module).add_arguments(bp)
        bp.set_defaults(func=importlib.import_module(module).run)
    allp = bsub.add_parser("all", help="run every benchmark with its defaults")
    allp.set_defaults(func=_run_all)


def _run_all(args: argparse.Namespace) -> int:
    status = 0
    for name, module in BENCHMARKS.items():
        print(f"== populora bench {name}")
        mod = importlib.import_module(module)
        parser = argparse.ArgumentParser()
        mod.add_arguments(parser)
        status |= int(mod.run(parser.parse_args([])) or 0)
    return status
