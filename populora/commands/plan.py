"""`populora plan`: the per-GPU memory budget of a run, from its config alone (no weights, no GPU).

    populora plan --config configs/4t4s-7b.yaml [key=value ...] [--gpu-gib 80] [--nproc W] [--json]
    populora plan configs/4t4s-7b.yaml [key=value ...]   (the same: the preset as the first word)

The plan is one rank's of a run of ``--nproc`` ranks (default the preset's ``run.ranks``): every rank
holds every member's weights and trains its share of them. After the table, the largest population
whose plan fits such ranks, with the per-member and the shared cost (``populora/plan/population.py``).
Exit status 0 when the run fits with the wanted headroom, 3 when it does not, 2 on a bad config.
"""

from __future__ import annotations

import argparse
import json
import sys

EXIT_DOES_NOT_FIT = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="memory plan of a run on one GPU, before anything loads (exit 3: does not fit)")
    p.add_argument("--config", default=None, help="preset YAML (configs/*.yaml); or the first positional word")
    p.add_argument("--gpu-gib", type=float, default=80.0, help="memory of one GPU in GiB (default 80)")
    p.add_argument("--min-headroom", type=float, default=None,
                   help="fraction of the GPU that must stay free (default 0.10)")
    p.add_argument("--prompt-tokens", type=int, default=None,
                   help="prompt tokens per sequence (default policy.max_prompt_tokens, the longest a run accepts)")
    p.add_argument("--nproc", type=int, default=None, metavar="W",
                   help="ranks (GPUs) of the run, one rank planned (default: the config's run.ranks)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (after the preset's path)")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from populora.config import ConfigError, load_config
    from populora.plan import UnknownModelShape, check_plan, fix_overrides, format_plan
    from populora.plan.memory import DEFAULT_MIN_HEADROOM
    from populora.plan.population import largest_population

    if args.config is None and args.overrides and "=" not in args.overrides[0]:
        args.config, args.overrides = args.overrides[0], args.overrides[1:]
    if args.config is None:
        print("populora plan: no preset: give its YAML, `populora plan configs/4t4s-7b.yaml` "
              "or `--config configs/4t4s-7b.yaml`", file=sys.stderr)
        return 2
    if args.gpu_gib <= 0:
        print(f"populora plan: --gpu-gib must be > 0, got {args.gpu_gib}", file=sys.stderr)
        return 2
    headroom = DEFAULT_MIN_HEADROOM if args.min_headroom is None else args.min_headroom
    if not 0 <= headroom < 1:
        print(f"populora plan: --min-headroom must be in [0, 1), got {headroom}", file=sys.stderr)
        return 2
    if args.nproc is not None and args.nproc < 1:
        print(f"populora plan: --nproc must be >= 1, got {args.nproc}", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.config, args.overrides)
        result = check_plan(cfg, args.gpu_gib, min_headroom=headroom, prompt_tokens=args.prompt_tokens,
                            ranks=args.nproc)
    except (ConfigError, UnknownModelShape) as e:
        print(f"populora plan: {e}", file=sys.stderr)
        return 2
    fit = largest_population(result.inputs, args.gpu_gib, headroom)
    if args.json:
        out = result.to_json()
        out["fix_overrides"] = [fix_overrides(f) for f in result.fixes]
        out["population"] = {"largest": fit.largest, "per_member_gib": round(fit.per_member_gib, 3),
                             "shared_gib": round(fit.shared_gib, 3), "ranks": fit.ranks}
        print(json.dumps(out, indent=2))
    else:
        print(format_plan(result, title=cfg.name))
        print(fit.line())
    return 0 if result.fits else EXIT_DOES_NOT_FIT
