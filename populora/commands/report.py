"""`populora report` (HTML diagnostics of runs) and `populora retention` (operator retention tests)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="one HTML page of diagnostics comparing runs side by side")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (e.g. population and baseline)")
    p.add_argument("--out", default="report.html", help="HTML file; PNGs and data go to <out>_files/")
    p.add_argument("--centroids", default=None, help="CVT centroids (.npy) of an earlier report, to compare cell for cell")
    p.add_argument("--cells", type=int, default=256, help="CVT cells when centroids are computed (default 256)")
    p.add_argument("--seed", type=int, default=0, help="seed of the CVT centroids (default 0)")
    p.add_argument("--example-steps", type=int, default=8, help="steps whose example tasks are shown per run")
    p.set_defaults(func=_report)

    r = sub.add_parser("retention", help="retention test of the evolution operators from a run's checkpoint")
    r.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with checkpoints")
    r.add_argument("--operators", default="all", help="'all' or a comma-separated list of operator names")
    r.add_argument("--steps", type=int, required=True, help="training steps per arm")
    r.add_argument("--role", default=None, choices=["teacher", "student", "agent"],
                   help="role of the member tested (default: student; a baseline: its agent)")
    r.add_argument("--checkpoint", default=None, help="checkpoint directory (default: the run's latest good one)")
    r.add_argument("--out", default=None, help="output directory (default: RUN_DIR/retention, which the report reads)")
    r.add_argument("--seed", type=int, default=0, help="seed of the operators' random draws")
    r.set_defaults(func=_retention)


def _report(args: argparse.Namespace) -> int:
    from populora.extras import require

    for module in ("matplotlib", "ribs"):  # figures and the coverage archive
        require(module, "diagnostics", "populora report")
    from populora.diagnostics.report import build_report
    from populora.diagnostics.runs import RunDirError

    try:
        rep = build_report(args.run_dirs, args.out, centroids_file=args.centroids, cells=args.cells, seed=args.seed,
                           example_steps=args.example_steps)
    except (RunDirError, ValueError, OSError) as e:
        print(f"populora report: {e}", file=sys.stderr)
        return 2
    print(f"wrote {rep.html} ({len(rep.figures)} figures in {rep.folder})")
    return 0


def _retention(args: argparse.Namespace) -> int:
    from populora.extras import require

    require("matplotlib", "diagnostics", "populora retention")  # its figure, checked before the runs start
    from populora.diagnostics.retention import RetentionError, parse_operators, retention

    try:
        ops = parse_operators(args.operators)
        res = retention(args.run_dir, ops, args.steps, role=args.role, out_dir=args.out, checkpoint=args.checkpoint,
                        seed=args.seed)
    except RetentionError as e:
        print(f"populora retention: {e}", file=sys.stderr)
        return 2
    print(f"{'arm':<16}{'kind':<11}{'reward_mean':>12}{'final':>9}{'gap':>9}{'steps_to_parent':>17}")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for row in res["summary"]:
        print(f"{row['arm']:<16}{row['kind']:<11}{fmt(row['reward_mean']):>12}{fmt(row['reward_final']):>9}"
              f"{fmt(row.get('gap_to_parent_mean')):>9}{str(row.get('steps_to_parent_level', '-')):>17}")
    for name, why in res["skipped"].items():
        print(f"skipped {name}: {why}")
    return 0
