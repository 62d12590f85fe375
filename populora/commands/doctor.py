"""`populora doctor`: the acceptance run of one node (random weights at the presets' shapes, no download).

    populora doctor [--config PRESET ...] [--device cuda|cpu] [--out DIR] [--dry-run] [--tests] [key=value ...]

Devices and versions, an all-reduce over the local GPUs (NCCL; gloo over 2 CPU ranks on CPU), one
training micro-batch per member through the trainer `populora train` runs with peak memory beside
`populora plan`'s figures, mixed-adapter vs one-adapter vs base generation (HF engine, and vLLM where
importable), a verdict per preset. Writes DIR/doctor.json and DIR/doctor.md and prints the markdown.
See docs/doctor.md.

Exit status: 0 every preset fits and every stage ran; 3 a preset does not fit; 1 a stage (or
`--tests`) failed; 2 no GPU (without `--device cpu`) or a bad config.
"""

from __future__ import annotations

import argparse
import shlex
import sys

EXIT_NO_GPU = 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="acceptance run of a GPU node: all-reduce, training memory vs the plan, "
                                      "multi-adapter generation (exit 3: a preset does not fit)")
    p.add_argument("--config", action="append", default=None, metavar="PRESET",
                   help="preset YAML; repeat for several (default: every configs/*-7b.yaml on cuda, configs/tiny.yaml on cpu)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda (default; exit 2 without a GPU) or cpu (the same measurements at CPU scale)")
    p.add_argument("--out", default="doctor-report", help="directory of doctor.json and doctor.md (default doctor-report/)")
    p.add_argument("--dry-run", action="store_true", help="print what would run (plan items, all-reduce, shapes) and exit")
    p.add_argument("--tests", action="store_true", help="also run the gpu-marked tests (pytest -m gpu)")
    p.add_argument("--min-headroom", type=float, default=0.10, help="fraction of the device that must stay free (0.10)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every preset")
    p.set_defaults(func=cmd_doctor)


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def cmd_doctor(args: argparse.Namespace) -> int:
    from pathlib import Path

    from populora.config import ConfigError
    from populora.doctor.run import Options, default_configs, dry_run_text, exit_status, run_doctor
    from populora.plan import UnknownModelShape

    configs = tuple(args.config) if args.config else default_configs(args.device)
    if not configs:
        print("populora doctor: no preset found; give one with --config", file=sys.stderr)
        return 2
    if not 0 <= args.min_headroom < 1:
        print(f"populora doctor: --min-headroom must be in [0, 1), got {args.min_headroom}", file=sys.stderr)
        return 2
    command = "populora doctor " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["doctor"] else
                                              [f"--device={args.device}", *(f"--config={c}" for c in configs)])
    opts = Options(configs, args.device, tuple(args.overrides), args.min_headroom, args.tests, command.strip())
    try:
        if args.dry_run:
            print(dry_run_text(opts))
            return 0
        if args.device == "cuda" and not has_cuda():
            print("populora doctor: no CUDA GPU visible (torch.cuda.is_available() is false); run it on a GPU node, "
                  "or give --device cpu for the CPU run", file=sys.stderr)
            return EXIT_NO_GPU
        for path in configs:  # a bad preset fails before anything starts
            from populora.doctor.run import preset_config

            preset_config(path, opts.overrides, args.device)
        report = run_doctor(opts)
    except (ConfigError, UnknownModelShape, FileNotFoundError) as e:
        print(f"populora doctor: {e}", file=sys.stderr)
        return 2
    from populora.doctor.report import render_markdown, write_reports

    js, md = write_reports(report, Path(args.out))
    print(render_markdown(report))
    print(f"reports: {js} and {md}")
    return exit_status(report)
