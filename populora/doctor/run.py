"""The doctor's run: its stages in order, each guarded (``stages.py``), and the dry run.

Order (the cheapest, most informative first, so that a short allocation still answers the main
question): the installed versions against known-bad pairs; the devices; the first preset's plan, its
random model, one training step of every member with its memory beside the plan, the HF engine's arms
on that trainer (then the trainer is freed), vLLM's arms in a child process, and its verdict; the GPU
tests (correctness on this node, and cheaper than what follows); the self-play step of 4T+4S against
the baseline (on the first population preset); the other presets as the first; the all-reduce.
Presets run in ``PRIORITY`` order (the paper's 4T+4S first) unless given with ``--config``.

The report (``doctor.json``, ``doctor.md``) is rewritten after every stage, with the stages still to
run listed as pending.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from populora.doctor.records import AllReduceResult, DoctorReport, PresetReport

REPO = Path(__file__).resolve().parents[2]
CPU_RANKS = 2  # gloo ranks of the CPU all-reduce
PRIORITY = ("4t4s-7b", "8t8s-7b", "1t1s-7b", "baseline-7b")  # ours: the paper's headline first, then the largest
EXIT_NOT_FIT, EXIT_FAILED, EXIT_INCOMPLETE = 3, 1, 4


@dataclass(frozen=True)
class Options:
    configs: tuple[str, ...]
    device: str  # cuda | cpu
    overrides: tuple[str, ...] = ()
    min_headroom: float = 0.10
    tests: bool = False
    command: str = "populora doctor"
    budget_s: float | None = None
    gpu_gib: float | None = None  # judge the fit for a card of this size (default: the device's own)
    tests_dir: str | None = None
    step: bool = True
    only: tuple[str, ...] = ()  # stage kinds to run (ONLY_KINDS); empty: every stage
    strategies: bool = False  # the training stage also times every update strategy on its batches
    step_new_tokens: int | None = None  # the step's completion tokens (default step.STEP_NEW_TOKENS[device])

    def runs(self, kind: str) -> bool:
        """Whether stages of ``kind`` run (``--only``; the step also needs ``step``, the tests ``--tests``)."""
        if kind == "step" and not self.step or kind == "tests" and not self.tests:
            return False
        return not self.only or kind in self.only


ONLY_KINDS = ("training", "generation", "tests", "step", "allreduce")  # --only (versions and devices always run)


def default_configs(device: str, root: Path | None = None) -> tuple[str, ...]:
    """Every 7B preset on CUDA (``PRIORITY`` first), the tiny preset on CPU: from the source tree's
    ``configs/``, else ``./configs`` (an installed package has no configs of its own)."""
    for base in ([root] if root else [REPO, Path.cwd()]):
        found = sorted((base / "configs").glob("*-7b.yaml")) if device == "cuda" else [base / "configs" / "tiny.yaml"]
        found = [p for p in found if p.is_file()]
        if found:
            rank = {name: i for i, name in enumerate(PRIORITY)}
            return tuple(str(p) for p in sorted(found, key=lambda p: (rank.get(p.stem, len(rank)), p.stem)))
    return ()


def tests_dir(opts: Options) -> Path | None:
    """Where the GPU tests are: ``--tests-dir``, the source tree's ``tests/``, else ``./tests``."""
    for d in ([Path(opts.tests_dir)] if opts.tests_dir else [REPO / "tests", Path.cwd() / "tests"]):
        if d.is_dir():
            return d
    return None


GPU_MARK = re.compile(r"^\s*@pytest\.mark\.gpu\b", re.M)  # a decorated test (or class)
GPU_MODULE = re.compile(r"^pytestmark\s*=.*\bpytest\.mark\.gpu\b", re.M)  # every test of the file


def gpu_test_files(directory: Path) -> list[Path]:
    """The test files that hold ``gpu``-marked tests (only these run: they need no optional extra)."""
    return sorted(p for p in directory.glob("test_*.py") if count_gpu_tests([p]))


def count_gpu_tests(files: list[Path]) -> int:
    n = 0
    for p in files:
        text = p.read_text(errors="replace")
        n += len(GPU_MARK.findall(text)) + (len(re.findall(r"^def test_", text, re.M)) if GPU_MODULE.search(text) else 0)
    return n


def preset_config(path: str, overrides: tuple[str, ...], device: str):
    """The preset with ``policy.device`` set to the doctor's device."""
    from populora.config import load_config

    return load_config(path, [*overrides, f"policy.device={device}"])


def allreduce_plan(device: str) -> tuple[str, int]:
    """``(backend, ranks)``: NCCL over every local GPU, or gloo over 2 local CPU ranks."""
    import torch

    if device == "cuda":
        return "nccl", max(1, torch.cuda.device_count())
    return "gloo", CPU_RANKS


def device_gib(device: str, fallback: float = 80.0, gpu_gib: float | None = None) -> tuple[float, str]:
    """The memory the plan is checked against: ``--gpu-gib`` when given, else GPU 0's, or host RAM on
    CPU; ``fallback`` when absent."""
    import torch

    from populora.doctor.devices import _read, meminfo_gib

    if gpu_gib is not None:
        return gpu_gib, f"--gpu-gib {gpu_gib:g}"
    if device == "cuda":
        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / 2**30, "GPU 0"
        return fallback, f"no GPU here: the presets' {fallback:g} GiB GPU"
    ram = meminfo_gib(_read("/proc/meminfo"))
    return (ram, "host RAM") if ram else (fallback, "host RAM unknown")


def dry_run_text(opts: Options) -> str:
    """What ``populora doctor`` would run for ``opts``, from the configs alone (no GPU, no weights)."""
    from populora.doctor.allreduce import default_sizes
    from populora.doctor.generation import NEW_TOKENS, PROMPTS_PER_ADAPTER
    from populora.doctor.training import members, sequence_lengths, trained_here
    from populora.plan import check_plan
    from populora.plan.shapes import model_shape

    backend, _ = allreduce_plan(opts.device)
    gib, where = device_gib(opts.device, gpu_gib=opts.gpu_gib)
    ranks = "every local GPU" if opts.device == "cuda" else f"{CPU_RANKS} local CPU ranks"
    sizes = ", ".join(f"{s / 2**20:g} MiB" for s in default_sizes(backend))
    budget = f"--budget-s {opts.budget_s:g}: a stage starts only if its estimate fits" if opts.budget_s else "no budget"
    lines = [f"populora doctor --device {opts.device}: dry run (nothing is started); {budget}"]
    if opts.runs("allreduce"):
        lines.append(f"all-reduce: {backend}, float32 sum over {ranks}, sizes {sizes}; algbw and busbw = algbw x 2(n-1)/n")
    for path in opts.configs if opts.runs("training") or opts.runs("generation") else ():
        cfg = preset_config(path, opts.overrides, opts.device)
        plan = check_plan(cfg, gib, min_headroom=opts.min_headroom)
        shape = model_shape(cfg.policy.model)
        prompt, completion = sequence_lengths(cfg)
        roster = trained_here(cfg, members(cfg))
        lines += [
            "", f"preset {cfg.name} ({path})",
            f"  model: {cfg.policy.model}, random weights, shape from {shape.source}: hidden {shape.hidden}, "
            f"intermediate {shape.intermediate}, layers {shape.layers}, heads {shape.heads}/{shape.kv_heads} (kv), "
            f"head_dim {shape.head_dim}, vocab {shape.vocab}, {shape.n_params() / 1e9:.3f} B parameters",
            f"  training: a warm-up step, then one step of {len(roster)} member(s) through rl.update_strategy="
            f"{cfg.rl.update_strategy}: {cfg.policy.train_micro_batch} sequences x ({prompt} + {completion}) tokens "
            f"each, LoRA rank {cfg.policy.lora.rank}, gradient checkpointing "
            f"{'on' if cfg.policy.gradient_checkpointing else 'off'}",
            f"  generation: hf engine, and vllm where importable: mixed / one_adapter / base arms, "
            f"{len(roster) * PROMPTS_PER_ADAPTER} requests, {NEW_TOKENS[opts.device]} new tokens"
            + ("; sleep/wake timed" if opts.device == "cuda" and cfg.policy.vllm.sleep_between_phases else "")
            if opts.runs("generation") else "  generation: not run (--only)",
            f"  plan on {gib:.1f} GiB ({where}): {'fits' if plan.fits else 'DOES NOT FIT'}, peak {plan.peak_gib:.2f} GiB; items (GiB):",
        ]
        lines += [f"    {k:<20} {v:>10.3f}" for k, v in plan.items.items()]
    if opts.only:
        lines.append(f"\nonly: versions, devices, {', '.join(opts.only)}")
    if opts.strategies and opts.runs("training"):
        lines.append("\ntraining: then the same batches through every update strategy (fused, sequential), each timed")
    if opts.runs("step"):
        from populora.doctor.step import STUDENTS, TEACHERS, step_sizes

        step_path = next((p for p in opts.configs if not preset_config(p, opts.overrides, opts.device).population.baseline),
                         None)
        if step_path is not None:
            cfg = preset_config(step_path, opts.overrides, opts.device)
            seqs, rollouts, teacher_new, student_new = step_sizes(cfg, opts.device, opts.step_new_tokens)
            lines.append(f"\nself-play step ({cfg.name}): {TEACHERS}T+{STUDENTS}S and the baseline, one warm-up and one "
                         f"timed step each; {seqs} sequences per member, {rollouts} rollouts, {teacher_new} (teacher) and "
                         f"{student_new} (student) new tokens")
        else:
            lines.append("\nself-play step: no population preset named (only baselines): not run")
    if opts.runs("tests"):
        d = tests_dir(opts)
        files = gpu_test_files(d) if d else []
        lines.append(f"\ntests: pytest -m gpu on {len(files)} file(s) holding gpu tests: "
                     + ", ".join(p.name for p in files))
    return "\n".join(lines)


@dataclass
class PresetState:
    """One preset's results as its stages produce them, and the trainer the HF arms reuse."""

    path: str
    cfg: object = None
    plan: object = None
    trainer: object = None
    report: PresetReport | None = None
    generation: list = field(default_factory=list)

    def release(self) -> None:
        if self.trainer is not None:
            self.trainer.release()


class Doctor:
    """The stages of one doctor run, their shared state, and the report after every change."""

    def __init__(self, opts: Options, write):
        import os

        from populora.distributed.env import allocator_conf
        from populora.doctor.budget import Rates

        # the trainer's allocator settings as `populora train` gives them, before anything can start CUDA,
        # so the measured memory is the run's
        if (conf := allocator_conf(os.environ)) is not None:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
        self.opts, self.write = opts, write
        self.t0 = time.monotonic()
        self.device = self.allreduce = self.tests = self.step = self.versions = None
        # the card size the verdicts judge: --gpu-gib, else the device's own once the devices stage ran
        # (never read before it: reading it starts CUDA)
        self.gib: tuple[float | None, str] = (opts.gpu_gib, f"--gpu-gib {opts.gpu_gib:g}") if opts.gpu_gib else (None, "")
        self.rates = Rates(opts.device)
        self.presets = {p: PresetState(p) for p in opts.configs}
        self.records: tuple = ()
        self.runner = None

    # -- the report ---------------------------------------------------------------------------------
    def snapshot(self, records=None) -> DoctorReport:
        from populora.doctor.stages import run_status

        records = self.records if records is None else records
        gib, source = self.gib
        presets = tuple(s.report for s in self.presets.values() if s.report is not None)
        return DoctorReport(self.device, self.allreduce, presets, self.tests, time.monotonic() - self.t0,
                            self.opts.command, tuple(records), run_status(records), self.opts.budget_s, gib, source,
                            self.versions, self.step)

    def on_change(self, records) -> None:
        self.records = records
        self.write(self.snapshot(records))

    # -- stages -------------------------------------------------------------------------------------
    def stages(self) -> list:
        from populora.doctor.stages import Stage

        opts = self.opts
        out = [Stage("versions", self.run_versions, lambda: self.rates.fixed("versions")),
               Stage("devices", self.run_devices, lambda: self.rates.fixed("devices"))]
        step_preset = next((p for p in opts.configs if not self._is_baseline(p)), None)
        step = []
        if opts.runs("step") and step_preset is not None:
            step = [Stage("self-play step", lambda p=step_preset: self.run_step(p),
                          lambda p=step_preset: self.estimate_step(p), needs=("devices",))]
        if opts.only:  # a run of chosen stages is for the step when it names it: the step first
            out, step = out + step, []
        first, *rest = opts.configs
        out += self.preset_stages(first)
        if opts.runs("tests"):  # correctness on this node (cheaper than the step) before more figures
            out.append(Stage("tests", self.run_tests, self.estimate_tests))
        out += step
        for path in rest:
            out += self.preset_stages(path)
        if opts.runs("allreduce"):
            out.append(Stage("all-reduce", self.run_allreduce, self.estimate_allreduce, needs=("devices",)))
        return out

    def preset_stages(self, path: str) -> list:

        s = self.presets[path]
        key = Path(path).stem
        name = {k: f"{key}: {k}" for k in ("plan", "model", "training", "generation (hf)", "generation (vllm)", "verdict")}
        training, generation = self.opts.runs("training"), self.opts.runs("generation")
        if not (training or generation):
            return []
        wanted = {"plan", "model", "verdict"} | ({"training"} if training else set())
        wanted |= {"generation (hf)", "generation (vllm)"} if generation else set()
        return [stage for stage in self._preset_stages(s, name) if stage.name.split(": ", 1)[1] in wanted]

    def _preset_stages(self, s: PresetState, name: dict) -> list:
        from populora.doctor.stages import Stage

        return [
            Stage(name["plan"], lambda: self.run_plan(s), lambda: self.rates.fixed("plan"), needs=("devices",)),
            Stage(name["model"], lambda: self.run_model(s), lambda: self.estimate_model(s), needs=(name["plan"],),
                  cleanup=lambda: self._release_on_failure(s, name["model"])),
            Stage(name["training"], lambda: self.run_training(s), lambda: self.estimate_training(s),
                  needs=(name["model"],)),
            Stage(name["generation (hf)"], lambda: self.run_hf(s), lambda: self.estimate_hf(s), needs=(name["model"],),
                  cleanup=s.release),
            Stage(name["generation (vllm)"], lambda: self.run_vllm(s), lambda: self.estimate_vllm(),
                  needs=(name["plan"],)),
            Stage(name["verdict"], lambda: self.run_verdict(s), lambda: self.rates.fixed("verdict"),
                  needs=(name["plan"],)),
        ]

    def _release_on_failure(self, s: PresetState, stage: str) -> None:
        if self.runner is not None and self.runner.records[stage].status != "done":
            s.release()

    def _is_baseline(self, path: str) -> bool:
        try:
            return preset_config(path, self.opts.overrides, self.opts.device).population.baseline
        except Exception:
            return True

    def run_versions(self) -> str:
        from populora.doctor.versions import check_versions, installed_versions

        report = check_versions(installed_versions())
        self.versions = {"versions": report.versions, "problems": list(report.problems)}
        if report.problems:
            raise RuntimeError("; ".join(report.problems))
        return ", ".join(f"{k} {v}" for k, v in report.versions.items() if v)

    def run_devices(self) -> str:
        from populora.doctor.devices import probe_devices

        self.device = probe_devices(self.opts.device)
        if self.opts.device == "cuda" and not self.device.gpus:
            raise RuntimeError("no CUDA GPU visible")
        if self.gib[0] is None:
            self.gib = (self.device.memory_gib, "GPU 0" if self.opts.device == "cuda" else "host RAM")
        return ", ".join(f"{g.name} {g.total_gib:.0f} GiB" for g in self.device.gpus) or f"{self.device.cpu_cores} CPU cores"

    def run_plan(self, s: PresetState) -> str:
        from populora.plan import check_plan, fix_overrides

        s.cfg = preset_config(s.path, self.opts.overrides, self.opts.device)
        gib, _ = self.gib
        s.plan = check_plan(s.cfg, gib, min_headroom=self.opts.min_headroom)
        plan_json = s.plan.to_json()
        plan_json["fix_overrides"] = [fix_overrides(f) for f in s.plan.fixes]
        s.report = PresetReport(s.cfg.name, s.path, plan=plan_json)
        return f"plan on {gib:.1f} GiB: {'fits' if s.plan.fits else 'does not fit'}, peak {s.plan.peak_gib:.1f} GiB"

    def _shape(self, s: PresetState):
        from populora.plan.shapes import model_shape

        return model_shape(s.cfg.policy.model)

    def _weight_bytes(self, s: PresetState) -> float:
        from populora.doctor.training import training_dtype

        return self._shape(s).n_params() * (4 if training_dtype(s.cfg.policy, self.opts.device) == "float32" else 2)

    def estimate_model(self, s: PresetState) -> float:
        from populora.doctor.budget import model_s

        return model_s(self._shape(s).n_params(), self.rates)

    def run_model(self, s: PresetState) -> str:
        from populora.doctor.training import build_trainer

        t0 = time.perf_counter()
        s.trainer = build_trainer(s.cfg, self.opts.device)
        self.rates.measure("model_params_per_s", s.trainer.params / max(1e-3, time.perf_counter() - t0 - 5.0))
        return f"{s.trainer.params / 1e6:.1f} M parameters, {s.trainer.dtype}, from {s.trainer.source}"

    def _step_flops(self, s: PresetState, warm: bool = False) -> float:
        from populora.doctor.budget import training_flops
        from populora.doctor.training import WARMUP_TOKENS, members, sequence_lengths

        shape = self._shape(s)
        n = len(members(s.cfg))
        seq = sum(WARMUP_TOKENS) if warm else sum(sequence_lengths(s.cfg))
        rows = 1 if warm else s.cfg.policy.train_micro_batch
        return training_flops(shape.n_params(), shape.layers, shape.hidden, seq, rows * n,
                              s.cfg.policy.gradient_checkpointing)

    def estimate_training(self, s: PresetState) -> float:
        from populora.doctor.budget import training_s
        from populora.doctor.training import members

        n = len(members(s.cfg))
        profiled = self._step_flops(s) / n if self.opts.device == "cpu" else 0.0
        compared = self._step_flops(s) if self.opts.strategies else 0.0  # the other strategy's step
        return training_s(self._step_flops(s) + compared, self._step_flops(s, warm=True), n, self.rates, profiled)

    def run_training(self, s: PresetState) -> str:
        from populora.doctor.training import run_training

        result = run_training(s.trainer, self.opts.strategies)
        s.report = replace(s.report, training=result)
        if result.error:
            raise RuntimeError(result.error)
        self.rates.measure("train_flops", self._step_flops(s) / result.step_seconds)
        mfu = f", MFU {result.mfu:.1%}" if result.mfu is not None else ""
        both = {t.strategy: t.seconds for t in result.strategies}
        compare = (f", fused/sequential {both['fused'] / both['sequential']:.2f}x (seconds)"
                   if both.get("fused") and both.get("sequential") else "")
        return (f"{result.tokens_per_s:.0f} tokens/s over the timed step ({result.strategy}){mfu}{compare}, warm-up "
                f"{result.warmup.seconds:.1f} s apart")

    def estimate_hf(self, s: PresetState) -> float:
        from populora.doctor.budget import generation_s
        from populora.doctor.generation import NEW_TOKENS

        return generation_s(NEW_TOKENS[self.opts.device], self._weight_bytes(s), self.rates)

    def run_hf(self, s: PresetState) -> str:
        from populora.doctor.budget import MIXED_STEP_FACTOR
        from populora.doctor.generation import NEW_TOKENS, arm_ratios, hf_generation

        result = hf_generation(s.cfg, s.trainer.backend, self.opts.device)
        s.generation.append(result)
        s.report = replace(s.report, generation=tuple(s.generation))
        if result.error:
            raise RuntimeError(result.error)
        steps = sum(1 for _ in result.arms) * NEW_TOKENS[self.opts.device]
        self.rates.measure("step_overhead_s", sum(a.seconds for a in result.arms) / max(1, steps) / MIXED_STEP_FACTOR)
        r = arm_ratios(result)["mixed/one_adapter"]
        return f"mixed/one_adapter {r:.2f}x (s/s)" if r else "arms ran"

    def estimate_vllm(self) -> float:
        import importlib.util

        # nothing to wait for where vLLM is absent: the stage says it is unavailable at once
        return self.rates.fixed("vllm") if importlib.util.find_spec("vllm") is not None else 0.0

    def run_vllm(self, s: PresetState) -> str:
        import importlib.util

        from populora.doctor.generation import vllm_generation
        from populora.doctor.stages import Unavailable

        s.release()  # vLLM starts beside nothing of the doctor's own
        if importlib.util.find_spec("vllm") is None:
            raise Unavailable("vLLM is not importable here (pip install 'populora[vllm]'): no vLLM arms")
        left = self.runner.left() if self.runner else None
        result = vllm_generation(s.path, [*self.opts.overrides, f"policy.device={self.opts.device}"], self.opts.device,
                                 timeout_s=left)
        s.generation.append(result)
        s.report = replace(s.report, generation=tuple(s.generation))
        if result.error:
            raise RuntimeError(result.error)
        return f"{len(result.arms)} arms"

    def run_verdict(self, s: PresetState) -> str:
        from populora.doctor.verdict import compare, verdict

        t = s.report.training
        measures = list(t.memory if t else ()) + [m for g in s.generation for m in g.memory]
        items = compare(s.plan, measures)
        oom = next((e for e in [t.error if t else None, *(g.error for g in s.generation)] if e and "OutOfMemory" in e),
                   None)
        slack = 0.0
        if t is not None and t.peak_reserved_bytes is not None and t.peak_bytes is not None:
            slack = max(0.0, t.peak_reserved_bytes - t.peak_bytes) / 2**30
        v = verdict(s.cfg.name, s.plan, items, oom, slack)
        s.report = replace(s.report, items=items, verdict=v)
        return f"{'fits' if v.fits else 'DOES NOT FIT'} on {v.device_gib:.1f} GiB ({v.basis})"

    def estimate_step(self, path: str) -> float:
        from populora.doctor.budget import selfplay_step_s
        from populora.doctor.step import STUDENTS, TEACHERS, step_sizes

        s = PresetState(path, self.presets[path].cfg or preset_config(path, self.opts.overrides, self.opts.device))
        shape = self._shape(s)
        seqs, _, teacher_new, student_new = step_sizes(s.cfg, self.opts.device, self.opts.step_new_tokens)
        args = (shape.n_params(), shape.layers, shape.hidden, self._weight_bytes(s))
        rest = (seqs, max(teacher_new, student_new), s.cfg.policy.gradient_checkpointing, self.rates)
        return selfplay_step_s(*args, TEACHERS + STUDENTS, *rest) + selfplay_step_s(*args, 1, *rest)

    def run_step(self, path: str) -> str:
        from populora.doctor.step import run_step
        from populora.doctor.training import training_dtype

        for other in self.presets.values():
            other.release()
        cfg = preset_config(path, self.opts.overrides, self.opts.device)
        self.step = run_step(path, cfg, self.opts.device, training_dtype(cfg.policy, self.opts.device),
                             self.opts.overrides, self.opts.step_new_tokens)
        r = self.step.ratio
        return f"population/baseline step ratio: {r:.2f}x" if r else "ran"

    def estimate_allreduce(self) -> float:
        backend, ranks = allreduce_plan(self.opts.device)
        return 0.0 if backend == "nccl" and ranks < 2 else self.rates.fixed("allreduce")

    def run_allreduce(self) -> str:
        from populora.doctor.allreduce import run_allreduce
        from populora.doctor.stages import Unavailable

        backend, ranks = allreduce_plan(self.opts.device)
        if backend == "nccl" and ranks < 2:
            why = "not measured: one GPU (nothing crosses a link, so there is no bandwidth to measure)"
            self.allreduce = AllReduceResult(backend, ranks, "", (), not_measured=why)
            raise Unavailable(why)
        self.allreduce = run_allreduce(backend, ranks)
        if self.allreduce.error:
            raise RuntimeError(self.allreduce.error)
        return f"{backend} over {ranks} ranks"

    def estimate_tests(self) -> float:
        from populora.doctor.budget import tests_s

        d = tests_dir(self.opts)
        return tests_s(count_gpu_tests(gpu_test_files(d)) if d else 0, self.rates)

    def run_tests(self) -> str:
        from populora.doctor.stages import Unavailable

        d = tests_dir(self.opts)
        if d is None:
            self.tests = {"exit_status": None, "summary": "no tests/ directory (give --tests-dir): not run"}
            raise Unavailable(self.tests["summary"])
        files = gpu_test_files(d)
        if not files:
            self.tests = {"exit_status": None, "summary": f"no file in {d} holds gpu tests"}
            raise Unavailable(self.tests["summary"])
        left = self.runner.left() if self.runner else None
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *map(str, files)]
        self.tests = {"files": [p.name for p in files], "command": " ".join(["python", *cmd[1:]])}
        try:
            proc = subprocess.run(cmd, cwd=d.parent, capture_output=True, text=True,
                                  timeout=None if left is None else max(1.0, left))
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            self.tests.update(exit_status=None, summary=f"stopped at the budget; output so far: {out.strip()[-300:]}")
            raise RuntimeError(self.tests["summary"]) from None
        lines = proc.stdout.strip().splitlines()
        self.tests.update(exit_status=proc.returncode, summary=lines[-1] if lines else proc.stderr.strip()[-300:],
                          tail=lines[-30:])
        if proc.returncode not in (0, 5):  # 5: nothing collected (every test deselected)
            raise RuntimeError(f"pytest exit {proc.returncode}: {self.tests['summary']}")
        return self.tests["summary"]

    # -- the run ------------------------------------------------------------------------------------
    def run(self) -> DoctorReport:
        from populora.doctor.stages import StageRunner

        self.runner = StageRunner(self.stages(), self.opts.budget_s, self.on_change, start=self.t0)
        try:
            self.records = self.runner.run()
        finally:
            for s in self.presets.values():
                s.release()
        report = self.snapshot()
        self.write(report)
        return report


def run_doctor(opts: Options, write=lambda report: None) -> DoctorReport:
    """Every stage of ``opts``; ``write(report)`` after every change (the reports on disk)."""
    return Doctor(opts, write).run()


def exit_status(report: DoctorReport) -> int:
    """3: a preset does not fit; 1: a stage failed (or was blocked by one, or the GPU tests failed);
    4: incomplete (a stage skipped for the budget, or the run was stopped); 0: complete, every
    measured preset fits. A stage that cannot run on this node (no vLLM, one GPU) is not a failure."""
    if any(p.verdict is not None and not p.verdict.fits for p in report.presets):
        return EXIT_NOT_FIT
    if report.status == "failed":
        return EXIT_FAILED
    if report.status == "incomplete":
        return EXIT_INCOMPLETE
    return 0
