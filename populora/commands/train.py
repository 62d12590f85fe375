"""`populora train`, `populora status` and `populora demo`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# the presets live at the repository root, beside the package
EXIT_DOES_NOT_FIT = 3  # as `populora plan`
EXIT_ENVIRONMENT = 2  # the command cannot start as given: config, model, optional package (docs/exit-status.md)
DEFAULT_GPU_GIB = 80.0  # as `populora plan --gpu-gib`: one H100 80 GB, the presets' target (paper)
DEMO_CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "cpu-demo.yaml")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="run (or resume) a self-play training run")
    p.add_argument("--config", help="preset YAML (configs/*.yaml)")
    p.add_argument("--run-dir", help="run directory (default: runs/<name>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last good checkpoint")
    p.add_argument("--resume-if-started", action="store_true",
                   help="with --config and --run-dir: continue the run there if it has started, else start it with "
                        "--config and the overrides (what batch jobs use: a requeued job continues, a start that "
                        "failed before its model loaded is started again with the settings given)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--nproc", type=_positive_int, default=0, metavar="W",
                   help="start W local ranks with torch's launcher (torchrun) and run on all of them; "
                        "on a GPU node, one per GPU (see docs/distributed.md)")
    p.add_argument("--no-memory-check", action="store_true",
                   help="start a GPU run even when its memory plan (populora plan) says it does not fit")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. selfplay.steps=4")
    p.set_defaults(func=cmd_train)

    s = sub.add_parser("status", help="print the summary of a run (finished or not)")
    s.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/<name>)")
    s.set_defaults(func=cmd_status)

    d = sub.add_parser("demo", help="the cpu-demo preset on the embedded SmolLM2-135M, with example tasks")
    d.add_argument("--run-dir", default="runs/cpu-demo", help="run directory (default runs/cpu-demo; an existing "
                   "demo run there is resumed)")
    d.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. selfplay.steps=2")
    d.set_defaults(func=cmd_demo)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def launch_local_ranks(nproc: int, argv: list[str]) -> int:
    """``populora train ARGV`` on ``nproc`` local ranks through torch's own launcher (torchrun)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun(["--standalone", f"--nproc-per-node={nproc}", "--module", "populora.cli", "train", *argv])
    except ChildFailedError as e:
        failed = sorted(e.failures)
        print(f"populora train: local rank(s) {failed} of {nproc} exited with an error (their messages are above)",
              file=sys.stderr)
        return 1
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from populora.checkpoint import CheckpointError
    from populora.config import ConfigError
    from populora.distributed.env import LauncherError, before_cuda, rank_env
    from populora.errors import os_error_line
    from populora.jsonl import JsonlError
    from populora.policy.engine import EngineFailure
    from populora.policy.models import EmbeddedModelMissing, ModelNotFound
    from populora.run_dir import RunDirError
    from populora.selfplay.runner import StartFailed, peek_config, train

    if not args.resume and not args.config:
        print("populora train: give --config PRESET.yaml (or --resume RUN_DIR)", file=sys.stderr)
        return 2
    if args.resume_if_started:
        if args.resume or not (args.config and args.run_dir):
            print("populora train: --resume-if-started needs --config and --run-dir (not --resume)", file=sys.stderr)
            return 2
        from populora.run_dir import RunDir

        if RunDir(args.run_dir).holds_run():  # a requeued job: the run's saved config wins
            args.resume, args.config, args.overrides = args.run_dir, None, []
    # once, before any engine starts (vLLM's CPU platform rewrites LOCAL_WORLD_SIZE); and one GPU per
    # rank before anything (the memory check included) initialises CUDA. The --nproc parent is world 1.
    try:
        env = rank_env()
        before_cuda(env)
    except LauncherError as e:
        print(f"populora train: {e}", file=sys.stderr)
        return 2
    cfg = peek_config(args.config, list(args.overrides), args.resume or args.run_dir, bool(args.resume))
    if cfg is not None and cfg.policy.engine == "vllm":
        from populora.extras import MissingExtra, available

        if not available("vllm"):  # before anything starts, instead of the engine's import error
            raise MissingExtra("vllm", "vllm", "populora train: policy.engine=vllm")
    # the plan first (it needs only the model's shape): a run that cannot fit is refused before its
    # weights are looked for
    if not args.no_memory_check and (refusal := memory_refusal(cfg, args.nproc or env.world)) is not None:
        print(refusal, file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    if cfg is not None and env.rank == 0 and (problem := model_problem_line(cfg.policy.model)) is not None:
        print(f"populora train: {problem}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    if args.nproc > 1:
        for warning in nproc_warnings(args.nproc, cfg):
            print(f"warning: {warning}", file=sys.stderr)
        argv = [*(["--config", args.config] if args.config else []), *(["--run-dir", args.run_dir] if args.run_dir else []),
                *(["--resume", args.resume] if args.resume else []), *(["--quiet"] if args.quiet else []),
                *args.overrides]
        return launch_local_ranks(args.nproc, argv)
    run_dir = args.resume or args.run_dir
    try:
        summary = train(args.config, args.overrides, run_dir=run_dir, resume=bool(args.resume),
                        progress=not args.quiet, env=env, config=cfg)
    except ConfigError as e:
        print(f"populora train: {e}", file=sys.stderr)
        return 2
    except (CheckpointError, JsonlError, RunDirError) as e:  # a run directory that cannot be resumed as it is: left unchanged
        print(f"populora train: {e}", file=sys.stderr)
        return 1
    except (ModelNotFound, EmbeddedModelMissing, StartFailed) as e:  # nothing of the run exists yet
        print(f"populora train: {e}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except OSError as e:  # disk full, a file that cannot be read or written: one line naming it
        print(f"populora train: {os_error_line(e, run_dir or (cfg.run.dir if cfg else None))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        where = run_dir or (cfg.run.dir if cfg else "RUN_DIR")
        print(f"populora train: interrupted; continue with `populora train --resume {where}` (the last "
              "checkpoint is intact)", file=sys.stderr)
        return 130
    except EngineFailure as e:  # every rank stops together; the last checkpoint is intact
        run_dir = getattr(e, "run_dir", None) or args.resume or args.run_dir or "RUN_DIR"
        print(f"populora train: rank {env.rank}: {e}; the last checkpoint is intact: "
              f"`populora train --resume {run_dir}` continues from it", file=sys.stderr)
        return 1
    if env.rank != 0:
        return 0  # rank 0 prints the summary
    return _print_or_fail("train", Path(summary["run_dir"]))


def model_problem_line(model: str) -> str | None:
    """Why ``policy.model`` would not load (one line, ``populora.model_source``), checked before the run
    directory is touched; a cached Hub id whose Hub does not answer is loaded offline."""
    from populora.model_source import prepare_model_source

    problem = prepare_model_source(model)
    return f"policy.model={model}: {problem}" if problem else None


def nproc_warnings(nproc: int, cfg) -> list[str]:
    """What ``--nproc W`` costs when W exceeds the CPU cores or the members (said, not refused)."""
    from populora.cpus import available_cpus

    out = []
    cores = available_cpus()
    gpu = cfg is not None and cuda_memory_gib(cfg.policy.device) is not None
    if not gpu and nproc > cores:
        out.append(f"--nproc {nproc} starts {nproc} ranks on {cores} CPU core(s): the ranks share cores, so each "
                   f"step is slower than with --nproc {cores}")
    if cfg is not None:
        members = 1 if cfg.population.baseline else cfg.population.teachers + cfg.population.students
        if nproc > members:
            out.append(f"--nproc {nproc} starts more ranks than the run has members ({members}): ranks share a member "
                       f"and all-reduce its gradients (docs/distributed.md); --nproc {members} gives each rank one")
    return out


def memory_refusal(cfg, ranks: int = 1) -> str | None:
    """Why a GPU run of ``ranks`` ranks would not fit its GPUs (one rank's plan: its table and fixes), or
    ``None``.

    Checked before any weights load or any rank starts, from the config and the model's shape alone
    (``populora plan``); runs on CPU are not checked. A model whose shape the plan cannot find is
    let through with a warning (it cannot be planned, not known to fail).
    """
    from populora.plan import UnknownModelShape, check_plan, format_plan

    gib = cuda_memory_gib(cfg.policy.device) if cfg is not None else None
    if gib is None:
        return None
    try:
        plan = check_plan(cfg, gib, ranks=ranks)
    except UnknownModelShape as e:
        print(f"populora train: memory plan skipped: {e}", file=sys.stderr)
        return None
    if plan.fits:
        return None
    where = f"one {gib:.0f} GiB GPU" if ranks == 1 else f"{ranks} ranks of one {gib:.0f} GiB GPU each"
    more = (f" (its preset is made for {cfg.run.ranks} ranks: --nproc {cfg.run.ranks}, or that many srun tasks)"
            if cfg.run.ranks > ranks else "")
    return (f"populora train: the run does not fit {where}{more} (exit {EXIT_DOES_NOT_FIT}); "
            f"nothing was loaded.\n{format_plan(plan, title=cfg.name)}\n(--no-memory-check starts it anyway)")


def cuda_memory_gib(device: str) -> float | None:
    """Memory of the GPU a run with ``policy.device`` would use; ``None`` for a CPU run.

    The visible device's total memory; for ``cuda``/``cuda:N`` on a machine that shows no GPU (a
    login node, a config checked before submission), the 80 GiB of the H100 the presets target.
    """
    if device == "cpu":
        return None
    import torch

    if torch.cuda.is_available():
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        return torch.cuda.get_device_properties(index).total_memory / 2**30
    return None if device == "auto" else DEFAULT_GPU_GIB


def cmd_status(args: argparse.Namespace) -> int:
    from populora.run_dir import RunDir

    rd = Path(args.run_dir)
    if RunDir(rd).failed_start():
        from populora.selfplay.runner import never_started_line

        print(never_started_line(RunDir(rd)))
        return 0
    if not RunDir(rd).holds_run():
        print(f"populora status: {rd} is not a run directory (no {RunDir.CONFIG})", file=sys.stderr)
        return 2
    try:
        return _print_or_fail("status", rd, code=2)
    except BrokenPipeError:  # `populora status RUN | head -1`: the reader has what it wanted
        return stdout_closed()


def stdout_closed() -> int:
    """Exit 0 after the reader of standard output went away: point stdout at /dev/null so that the
    interpreter's last flush does not fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def _print_or_fail(command: str, rd: Path, code: int = 1) -> int:
    try:
        print_summary(rd)
    except ValueError as e:  # a damaged metrics.jsonl, lineage.jsonl or summary.json: name it, keep the run
        print(f"populora {command}: {e}", file=sys.stderr)
        return code
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from populora.checkpoint import CheckpointError
    from populora.config import ConfigError
    from populora.jsonl import JsonlError
    from populora.run_dir import RunDir, RunDirError
    from populora.selfplay.runner import train

    rd = Path(args.run_dir)
    resume = RunDir(rd).holds_run()
    if resume:
        print(f"resuming the demo run in {rd} (delete it to start over)")
    try:
        summary = train(None if resume else DEMO_CONFIG, args.overrides, run_dir=str(rd), resume=resume)
    except ConfigError as e:
        print(f"populora demo: {e}", file=sys.stderr)
        return 2
    except (CheckpointError, JsonlError, RunDirError) as e:
        print(f"populora demo: {e}", file=sys.stderr)
        return 1
    code = _print_or_fail("demo", Path(summary["run_dir"]))
    if code == 0:
        print_examples(rd)
    return code


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def print_summary(rd: Path) -> None:
    """Valid rates, solve rates, ratings, evolution events and where the files are."""
    from rich.console import Console
    from rich.table import Table

    from populora.checkpoint import list_checkpoints
    from populora.run_dir import RunDir

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:  # rich exits 1 here; the caller decides (status: exit 0)
            raise BrokenPipeError

    con = PipeConsole()
    run = RunDir(rd)
    rows = run.read_metrics()
    summary = run.read_summary()
    events = run.read_lineage(strict=False)
    state = summary.get("status", "?") if summary is not None else "running or interrupted (no summary.json yet)"
    con.print(f"[bold]run[/bold] {rd}  status: {state}  steps logged: {len(rows)}")
    if rows:
        props = sum(_count(r.get("teacher/proposals")) for r in rows)
        valid = sum(_count(r.get("teacher/valid_tasks")) for r in rows)
        con.print(f"over the run: {props} proposals, {valid} valid tasks ({valid / max(1, props):.0%}), "
                  f"{len(rows)} steps")
        last = rows[-1]
        t = Table(title=f"step {last.get('step')}: tasks")
        for col in ("task type", "teacher valid rate", "teacher reward", "student solve rate", "student format rate"):
            t.add_column(col)
        from populora.tasks.kinds import kind_names

        for tt in kind_names():
            if f"teacher/{tt}/valid_rate" in last or f"student/{tt}/solve_rate" in last:
                t.add_row(tt, _fmt(last.get(f"teacher/{tt}/valid_rate")), _fmt(last.get(f"teacher/{tt}/reward_mean")),
                          _fmt(last.get(f"student/{tt}/solve_rate")), _fmt(last.get(f"student/{tt}/format_rate")))
        con.print(t)
        members = member_order({k.split("/")[1] for k in last if k.startswith("member/")})
        r = Table(title=f"members: values of the last step ({last.get('step')})")
        for col in ("member", "mu", "sigma", "valid rate", "solve rate", "sequences", "optimizer steps"):
            r.add_column(col, no_wrap=True)
        for mid in members:
            r.add_row(mid, _fmt(last.get(f"member/{mid}/mu")), _fmt(last.get(f"member/{mid}/sigma")),
                      _fmt(last.get(f"member/{mid}/valid_rate")), _fmt(last.get(f"member/{mid}/solve_rate")),
                      _fmt(last.get(f"adapter/{mid}/sequences")), _fmt(last.get(f"adapter/{mid}/optimizer_steps")))
        con.print(r)
        for line in role_lines(last, members):
            con.print(line, markup=False, highlight=False)
        times = {k[5:-2]: v for k, v in last.items() if k.startswith("time/") and isinstance(v, (int, float))}
        con.print("time of the last step (s): " + ", ".join(f"{k} {v:.2f}" for k, v in times.items()))
    replaced = [e for e in events if e.get("event") == "replacement"]
    con.print(f"evolution events: {len(replaced)}")
    for e in replaced[-6:]:
        child = e["member"] if isinstance(e.get("member"), dict) else {}
        con.print(f"  step {e.get('step')}: {e.get('replaced')} -> {child.get('id')} by {child.get('operator')} "
                  f"from {child.get('parents')}")
    for r in run.read_ranks():
        con.print(f"rank {r.get('rank')} (local {r.get('local_rank')}) on {r.get('host')}: device {r.get('device')}, "
                  f"CUDA_VISIBLE_DEVICES={r.get('visible_devices') if r.get('visible_devices') is not None else 'unset'}",
                  markup=False, highlight=False)
    ckpts = list_checkpoints(run.checkpoints)
    con.print(f"files: metrics {run.metrics_file}; checkpoints {[p.name for _, p in ckpts]}; "
              f"final adapters {run.adapters}; examples {run.examples_file}")


def member_order(ids) -> list[str]:
    """Member ids as a population reads: teachers, then students, then the baseline agent, each by slot and
    then by birth step (``t2`` before ``t10``; ``t3-40``, the child born in slot 3 at step 40, after ``t3``)."""
    import re

    def key(mid: str):
        m = re.fullmatch(r"([a-z])(\d+)(?:-(\d+))?", mid)
        if m is None:
            return (3, 0, 0, mid)
        return ({"t": 0, "s": 1}.get(m.group(1), 2), int(m.group(2)), int(m.group(3) or 0), mid)

    return sorted(ids, key=key)


def role_lines(row: dict, members: list[str]) -> list[str]:
    """Per role, one line: members, mean mu and the highest and lowest (what 64 table rows hide)."""
    out = []
    for prefix, role in (("t", "teachers"), ("s", "students")):
        mus = {m: row[f"member/{m}/mu"] for m in members if m.startswith(prefix)
               and isinstance(row.get(f"member/{m}/mu"), (int, float))}
        if len(mus) > 1:
            hi, lo = max(mus, key=mus.get), min(mus, key=mus.get)
            out.append(f"{role}: {len(mus)}, mean mu {sum(mus.values()) / len(mus):.2f}, highest {hi} "
                       f"{mus[hi]:.2f}, lowest {lo} {mus[lo]:.2f}")
    return out


def _count(v) -> int | float:
    """A count from a metrics row; anything but a number (null, a damaged value) counts 0."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def print_examples(rd: Path, n: int = 4) -> None:
    from populora.run_dir import RunDir

    rows = RunDir(rd).read_examples()
    valid = [r for r in rows if r.get("valid")][-n:]
    invalid = [r for r in rows if not r.get("valid")][-2:]
    print("\nExample tasks proposed by the teachers (last steps):")
    for r in valid:
        g = r.get
        print(f"--- step {g('step')} {g('teacher')} {g('type')}: valid; student solved "
              f"{g('student_correct')}/{g('student_attempts')}")
        print(str(g("program", "")).rstrip())
        if g("message"):  # an induction task: several inputs and outputs, and the teacher's message
            print(f"inputs: {g('input')}\noutputs: {g('output')}\nmessage: {g('message')}")
        else:
            print(f"input: {g('input')}\noutput: {g('output')}")
    for r in invalid:
        print(f"--- step {r.get('step')} {r.get('teacher')} {r.get('type')}: rejected ({r.get('reason')})")
