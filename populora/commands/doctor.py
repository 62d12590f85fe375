"""`populora doctor`: the acceptance run of one node (random weights at the presets' shapes, no download).

    populora doctor [--config PRESET ...] [--device cuda|cpu] [--out DIR] [--budget-s S] [--gpu-gib N]
                    [--tests] [--dry-run] [--only KINDS] [--strategies] [--step-new-tokens N] [key=value ...]

Stages, cheapest and most informative first: versions against known-bad pairs, devices, then per
preset its plan, the random model, one training step of every member with its memory beside the plan,
HF and vLLM arms (mixed-adapter vs one-adapter vs base), the verdict; one self-play step of 4T+4S and
of the baseline; the all-reduce; the GPU tests. Each stage is guarded: a failure is a line in the
report and the doctor goes on. DIR/doctor.json and DIR/doctor.md are rewritten after every stage, so a
run cut short leaves a report that names what did not run. See docs/doctor.md.

Exit status: 0 complete and every measured preset fits; 3 a preset does not fit; 1 a stage failed;
4 incomplete (stages skipped for --budget-s, or the run was stopped); 2 no GPU (without
`--device cpu`) or a bad config.
"""

from __future__ import annotations

import argparse
import shlex
import sys

EXIT_NO_GPU = 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="acceptance run of a GPU node: training memory vs the plan, multi-adapter "
                                      "generation, a self-play step (exit 3: a preset does not fit; 4: incomplete)")
    p.add_argument("--config", action="append", default=None, metavar="PRESET",
                   help="preset YAML; repeat for several (default: every configs/*-7b.yaml on cuda, 4t4s first; "
                        "configs/tiny.yaml on cpu)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda (default; exit 2 without a GPU) or cpu (the same measurements at CPU scale)")
    p.add_argument("--out", default="doctor-report", help="directory of doctor.json and doctor.md (default doctor-report/)")
    p.add_argument("--budget-s", type=float, default=None, metavar="SECONDS",
                   help="time budget: no stage starts whose estimate would overrun it (skipped stages are named; "
                        "exit 4)")
    p.add_argument("--gpu-gib", type=float, default=None, metavar="N",
                   help="judge the fit for an N-GiB card, whatever card runs it (default: the device's own memory)")
    p.add_argument("--dry-run", action="store_true", help="print what would run (plan items, all-reduce, shapes) and exit")
    p.add_argument("--tests", action="store_true", help="also run the gpu-marked tests (only the files that hold them)")
    p.add_argument("--tests-dir", default=None, metavar="DIR",
                   help="the tests/ directory for --tests (default: the source tree's, else ./tests)")
    p.add_argument("--no-step", dest="step", action="store_false",
                   help="leave out the self-play step stage (4T+4S vs the baseline)")
    p.add_argument("--only", default=None, metavar="KINDS",
                   help="run only these kinds of stage (comma-separated: training, generation, tests, step, "
                        "allreduce; versions and devices always run), e.g. --only step: the self-play step alone, "
                        "on the first population preset named")
    p.add_argument("--strategies", action="store_true",
                   help="the training stage also times its batches through every update strategy (fused, sequential)")
    p.add_argument("--step-new-tokens", type=int, default=None, metavar="N",
                   help="completion tokens of the self-play step (default 128 on cuda, 32 on cpu)")
    p.add_argument("--min-headroom", type=float, default=0.10, help="fraction of the device that must stay free (0.10)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every preset")
    p.set_defaults(func=cmd_doctor)


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def cmd_doctor(args: argparse.Namespace) -> int:
    from pathlib import Path

    from populora.config import ConfigError
    from populora.doctor.run import (
        Options,
        default_configs,
        dry_run_text,
        exit_status,
        preset_config,
        run_doctor,
    )
    from populora.plan import UnknownModelShape

    configs = tuple(args.config) if args.config else default_configs(args.device)
    if not configs:
        print("populora doctor: no preset found; give one with --config", file=sys.stderr)
        return 2
    if not 0 <= args.min_headroom < 1:
        print(f"populora doctor: --min-headroom must be in [0, 1), got {args.min_headroom}", file=sys.stderr)
        return 2
    for flag, value in (("--budget-s", args.budget_s), ("--gpu-gib", args.gpu_gib)):
        if value is not None and value <= 0:
            print(f"populora doctor: {flag} must be > 0, got {value:g}", file=sys.stderr)
            return 2
    from populora.doctor.run import ONLY_KINDS

    only = tuple(k for k in (args.only or "").split(",") if k)
    unknown = [k for k in only if k not in ONLY_KINDS]
    if unknown or (args.only is not None and not only):
        print(f"populora doctor: --only takes kinds of {', '.join(ONLY_KINDS)}, got {args.only!r}", file=sys.stderr)
        return 2
    if args.step_new_tokens is not None and args.step_new_tokens < 1:
        print(f"populora doctor: --step-new-tokens must be >= 1, got {args.step_new_tokens}", file=sys.stderr)
        return 2
    command = "populora doctor " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["doctor"] else
                                              [f"--device={args.device}", *(f"--config={c}" for c in configs)])
    opts = Options(configs, args.device, tuple(args.overrides), args.min_headroom, args.tests, command.strip(),
                   args.budget_s, args.gpu_gib, args.tests_dir, args.step, only, args.strategies, args.step_new_tokens)
    try:
        if args.dry_run:
            print(dry_run_text(opts))
            return 0
        for path in configs:  # a bad preset fails before anything starts
            preset_config(path, opts.overrides, args.device)
    except (ConfigError, UnknownModelShape, FileNotFoundError) as e:
        print(f"populora doctor: {e}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not has_cuda():
        print("populora doctor: no CUDA GPU visible (torch.cuda.is_available() is false); run it on a GPU node, "
              "or give --device cpu for the CPU run", file=sys.stderr)
        return EXIT_NO_GPU
    from populora.doctor.report import render_markdown, write_reports

    out = Path(args.out)
    report = run_doctor(opts, write=lambda r: write_reports(r, out))
    js, md = write_reports(report, out)
    print(render_markdown(report))
    if report.step is not None and report.step.ratio is not None:
        print(f"population/baseline step ratio: {report.step.ratio:.2f}x ({report.step.preset} shapes, "
              f"{report.device.kind if report.device else args.device}, engine {report.step.engine})")
    print(f"reports: {js} and {md}")
    status = exit_status(report)
    if status == 4:
        print("populora doctor: incomplete: " + ", ".join(f"{r.name} ({r.status})" for r in report.stages
                                                          if r.status in ("skipped", "interrupted", "pending", "running")),
              file=sys.stderr)
    return status
