"""`populora sweep SWEEP.yaml [--dry-run] [--profile P] [--eval-profile P] [--leaderboard-profile P] [--out DIR]
[--wait S]` and
`populora sweep status DIR`: grids of training runs submitted as job arrays, then evaluation
arrays and a leaderboard (see jobs/sweep.py for the sweep file and directory layout)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="submit a sweep (training array -> evaluation arrays -> leaderboard), or show its status",
        description="populora sweep SWEEP.yaml [options]  |  populora sweep status SWEEP_DIR",
    )
    p.add_argument("target", nargs="+", metavar="SWEEP.yaml | status DIR",
                   help="a sweep file to submit, or `status` and a sweep directory")
    p.add_argument("--dry-run", action="store_true", help="run the preflight (models, benchmark files, binds, disk) "
                   "and print the runs, the disk table and the sbatch scripts; submit nothing (exit 1, one line per "
                   "problem, if the submission would be refused)")
    p.add_argument("--profile", help="cluster profile of the training jobs (name in slurm/profiles or a YAML path)")
    p.add_argument("--eval-profile", help="cluster profile of the evaluation jobs (default: the sweep file's "
                   "eval_profile, else one GPU and one rank's CPUs and memory of the training profile); "
                   "the leaderboard job runs on it without a GPU")
    p.add_argument("--leaderboard-profile", help="cluster profile of the leaderboard job, which needs no GPU "
                   "(default: the sweep file's leaderboard_profile, else the evaluation profile without GPUs)")
    p.add_argument("--out", help="sweep directory (default: the sweep file's `out`, else sweeps/<name>)")
    p.add_argument("--wait", type=float, metavar="SECONDS",
                   help="after submitting (or with status), poll until every job ends or SECONDS pass")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from populora.extras import require

    require("submitit", "hpc", "populora sweep")  # the jobs are submitit's
    from jobs import sweep
    from jobs.executors import ContainerImageError, SlurmUnavailableError
    from jobs.profiles import ProfileError
    from jobs.status import AccountingError, format_table, wait

    try:
        if args.target[0] == "status":
            if len(args.target) != 2:
                print("usage: populora sweep status SWEEP_DIR", file=sys.stderr)
                return 2
            return _status(args.target[1], args.wait)
        if len(args.target) != 1:
            print("usage: populora sweep SWEEP.yaml [--dry-run] [--profile P] [--out DIR]", file=sys.stderr)
            return 2
        spec = sweep.load_spec(args.target[0])
        plan = sweep.build_plan(spec, args.out, args.profile, eval_profile=args.eval_profile,
                                leaderboard_profile=args.leaderboard_profile)
        if args.dry_run:
            pf = sweep.run_preflight(plan)
            print(sweep.dry_run_text(plan, pf))
            for e in pf.errors:  # the refusals again, last, where a long dry run ends
                print(f"populora sweep: would refuse to submit: {e}", file=sys.stderr)
            return 1 if pf.errors else 0  # 1: the submission would be refused
        manifest = sweep.submit_sweep(plan)
        print(sweep.describe_submission(manifest))
        if args.wait:
            rows = wait(lambda: sweep.read_manifest(plan.sweep_dir), args.wait)
            print(format_table(rows))
            return 0 if all(r["state"] == "COMPLETED" for r in rows) else 1
        return 0
    except (sweep.SweepError, ProfileError, ContainerImageError, SlurmUnavailableError, AccountingError,
            TimeoutError) as exc:
        print(f"populora sweep: error: {exc}", file=sys.stderr)
        return 2


def _status(sweep_dir: str, wait_s: float | None) -> int:
    from jobs import sweep
    from jobs.status import format_table, status_of, wait

    if wait_s:
        rows = wait(lambda: sweep.read_manifest(sweep_dir), wait_s)
    else:
        rows = status_of(sweep_dir)
    print(format_table(rows))
    return 0
