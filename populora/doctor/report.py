"""The doctor's reports: one JSON object (the records, plus the figures derived from them) and markdown.

Both are rewritten after every stage (``write_reports`` writes each file whole, through a temporary
file and a rename, so a reader or a kill never sees half a report); stages still to run are listed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from populora.doctor.generation import RATIO_LABELS, arm_ratios
from populora.doctor.records import DoctorReport, GenerationResult, PresetReport, StepComparison, to_json
from populora.doctor.step import phase_groups

GIB = float(1 << 30)
STEP_PHASES = ("generate", "validate", "solve", "check", "train", "publish", "evolve")  # the issue's order
PAPER_STEP_RATIO = 1.31  # paper: 4T+4S wall-clock over one agent, vLLM multi-LoRA on GPU
FLOPS_FORMULA = ("4 T L N_lin + 6 T L sum_j r (in_j + out_j) + 6 L q T^2 + 4 C d V per sequence of T = P + C tokens "
                 "(frozen projections: forward and input gradient; LoRA: forward, input and weight gradients; causal "
                 "attention; the vocabulary projection on the C completion tokens); recomputation not counted "
                 "(populora/doctor/mfu.py)")


def report_json(report: DoctorReport) -> dict:
    """The report as JSON: every record, with derived figures (tokens/s, ratios, verdict basis) added."""
    out = to_json(report)
    out["ratio_labels"] = dict(RATIO_LABELS)
    for preset, raw in zip(report.presets, out["presets"]):
        if preset.training is not None:
            raw["training"]["tokens_per_s"] = preset.training.tokens_per_s
            raw["training"]["per_member_bytes"] = preset.training.per_member_bytes
            raw["training"]["flops_per_s"] = preset.training.flops_per_s
            raw["training"]["mfu"] = preset.training.mfu
            raw["training"]["flops_formula"] = FLOPS_FORMULA
            for st, rs in zip(preset.training.strategies, raw["training"]["strategies"]):
                rs["tokens_per_s"] = st.tokens_per_s
            for u, ru in zip(preset.training.updates, raw["training"]["updates"]):
                ru["tokens_per_s"] = u.tokens_per_s
        for g, rg in zip(preset.generation, raw["generation"]):
            rg["ratios"] = arm_ratios(g)
            for a, ra in zip(g.arms, rg["arms"]):
                ra["tokens_per_s"] = a.tokens_per_s
        if preset.verdict is not None:
            raw["verdict"]["basis"] = preset.verdict.basis
    if report.step is not None:
        out["step"]["ratio"] = report.step.ratio
        for arm, raw in zip(report.step.arms, out["step"]["arms"]):
            raw["publish_share"] = arm.phases.get("publish", 0.0) / arm.step_s if arm.step_s > 0 else None
            raw["groups"] = phase_groups(arm.phases)
        out["step"]["ratio_label"] = ("seconds of one timed population step over one timed baseline step "
                                      f"(the paper reports {PAPER_STEP_RATIO}x for 4T+4S with vLLM on GPU)")
    return out


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_reports(report: DoctorReport, out_dir: Path) -> tuple[Path, Path]:
    """``doctor.json`` and ``doctor.md`` in ``out_dir`` (created), each replaced whole."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "doctor.json", out_dir / "doctor.md"
    _atomic_write(js, json.dumps(report_json(report), indent=2) + "\n")
    _atomic_write(md, render_markdown(report))
    return js, md


def _num(x, fmt: str = ".2f", none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def _stages(report: DoctorReport) -> list[str]:
    lines = ["## Stages", "", "| stage | status | estimate s | seconds | detail |", "| --- | --- | ---: | ---: | --- |"]
    for r in report.stages:
        detail = r.detail.replace("|", "\\|")
        lines.append(f"| {r.name} | {r.status} | {_num(r.estimate_s, '.0f')} | {_num(r.seconds, '.1f')} | {detail} |")
    todo = [r.name for r in report.stages if r.status in ("pending", "running")]
    skipped = [r.name for r in report.stages if r.status == "skipped"]
    if todo:
        lines.append(f"\nNot run yet (or cut short while running): {', '.join(todo)}.")
    if skipped:
        lines.append(f"\nSkipped for the time budget: {', '.join(skipped)}.")
    return lines + [""]


def _node(report: DoctorReport) -> list[str]:
    d = report.device
    lines = []
    if report.versions is not None:
        v = report.versions
        lines.append("- versions: " + ", ".join(f"{k} {x or 'not installed'}" for k, x in v["versions"].items()))
        lines += [f"- **known-bad pair**: {p}" for p in v["problems"]]
    if d is None:
        return lines + ["- devices: not probed yet"]
    lines.append(f"- host `{d.host}`, torch {d.torch}, {d.cpu_cores} CPU cores this process may use"
                 + (f" ({d.cpu_model})" if d.cpu_model else ""))
    if d.kind == "cuda":
        lines.append(f"- driver {d.driver or 'unknown'}, CUDA {d.cuda}, NCCL {d.nccl or 'none'}, "
                     f"CUDA_VISIBLE_DEVICES={d.visible_devices if d.visible_devices is not None else 'unset'}")
        lines += [f"- GPU {g.index}: {g.name}, {g.total_gib:.1f} GiB, compute capability {g.capability}" for g in d.gpus]
    else:
        lines.append(f"- no GPU: the CPU run; host RAM {d.memory_gib:.1f} GiB")
    if report.gpu_gib is not None:
        lines.append(f"- verdicts judge a device of **{report.gpu_gib:.1f} GiB** ({report.gpu_gib_source})")
    lines.append(f"- vLLM: {d.vllm or 'not importable'}")
    return lines


def _allreduce(report: DoctorReport) -> list[str]:
    a = report.allreduce
    if a is None:
        return []
    what = f"{a.backend}{' ' + a.version if a.version else ''} over {a.ranks} local rank(s)"
    lines = [f"## All-reduce: {what}", ""]
    if a.not_measured:
        return lines + [a.not_measured, ""]
    if a.error:
        return lines + [f"failed: {a.error}", ""]
    lines += ["float32 sum; time is the slowest rank's mean; algbw = bytes / time, busbw = algbw x 2(n-1)/n "
              "(nccl-tests' definitions; GB = 1e9 bytes)", "",
              "| size | time (ms) | algbw (GB/s) | busbw (GB/s) | sum correct |", "| ---: | ---: | ---: | ---: | :---: |"]
    for s in a.sizes:
        lines.append(f"| {s.size_bytes / 2**20:g} MiB | {s.seconds * 1e3:.3f} | {s.algbw_gbs:.2f} | {s.busbw_gbs:.2f} | "
                     f"{'yes' if s.correct else 'NO'} |")
    return lines + [""]


def _generation_rows(gens: tuple[GenerationResult, ...]) -> list[str]:
    lines = ["| engine | device | members | requests | new tokens | mixed tok/s | one_adapter tok/s | base tok/s "
             "| mixed/one_adapter (s/s) | mixed/base (s/s) | warm-up s | publish s | sleep s | wake s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    notes = []
    for g in gens:
        if g.error:
            lines.append(f"| {g.engine} | {g.device} | {g.adapters} | - | - | - | - | - | - | - | - | - | - | - |")
            notes.append(f"- {g.engine}: {g.error}")
            continue
        tps = {a: (g.arm(a).tokens_per_s if g.arm(a) else None) for a in ("mixed", "one_adapter", "base")}
        r = arm_ratios(g)
        lines.append(f"| {g.engine} | {g.device} | {g.adapters} | {g.requests} | {g.new_tokens} | {_num(tps['mixed'], '.1f')} "
                     f"| {_num(tps['one_adapter'], '.1f')} | {_num(tps['base'], '.1f')} | {_num(r['mixed/one_adapter'])}x "
                     f"| {_num(r['mixed/base'])}x | {_num(g.start_s, '.1f')} | {_num(g.publish_s, '.3f')} | {_num(g.sleep_s)} "
                     f"| {_num(g.wake_s)} |")
        notes += [f"- {g.engine}: {n}" for n in g.notes]
    labels = [f"- `{k}`: {v}" for k, v in RATIO_LABELS.items()]
    labels.append("- `publish s`: one publish of every member's weights to the engine (written and loaded by vLLM; "
                  "the HF engine serves the trainer's own weights)")
    return lines + ["", "What the ratios measure:", *labels, "", *notes]


def _training(p: PresetReport) -> list[str]:
    t = p.training
    lines = ["### Training: one step of every member (the update strategy `populora train` runs)", ""]
    if t is None:
        return lines + ["not run (see the stages table)", ""]
    if t.error:
        lines.append(f"failed: {t.error}\n")
    lines.append(f"model: {t.model}, {t.params / 1e6:.1f} M parameters, {t.dtype} on {t.device}; {t.strategy} update; "
                 f"micro-batch {t.micro_batch} x ({t.prompt_tokens} + {t.completion_tokens}) tokens per member; "
                 f"gradient checkpointing {'on' if t.gradient_checkpointing else 'off'}; behaviour log-probs "
                 f"{_num(t.behaviour_logprob, '.3f')} (-ln of the model's vocabulary)")
    if t.warmup is not None:
        lines.append(f"\nwarm-up (excluded from the timings): every member once on {t.warmup.tokens // max(1, t.warmup.sequences)} "
                     f"tokens, {t.warmup.seconds:.2f} s")
    if t.updates:
        lines += ["", "| member | role | tokens | seconds | tokens/s | loss | grad norm |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for u in t.updates:
            lines.append(f"| {u.member} | {u.role} | {u.tokens} | {_num(u.seconds)} | {_num(u.tokens_per_s, '.0f')} | "
                         f"{_num(u.loss, '.4g')} | {_num(u.grad_norm, '.3g')} |")
        lines.append(f"\ntimed step: {_num(t.step_seconds)} s, {_num(t.tokens_per_s, '.0f')} tokens/s over all members "
                     "(prompt + completion tokens; forward, backward, optimizer steps)")
    if t.flops:
        mfu = (f"MFU **{t.mfu:.1%}** of the device's dense {t.dtype} peak {t.peak_flops / 1e12:.1f} TFLOP/s"
               if t.mfu is not None else "MFU not given (no peak FLOP/s known for this device and dtype)")
        lines.append(f"\nmodel FLOPs of the timed step: {t.flops:.4g} ({FLOPS_FORMULA}); "
                     f"{_num(t.flops_per_s and t.flops_per_s / 1e12, '.2f')} TFLOP/s; {mfu}")
    if t.strategies:
        lines += ["", "| update strategy (same batches, after the timed step) | seconds | tokens/s |",
                  "| --- | ---: | ---: |"]
        lines += [f"| {st.strategy} | {st.seconds:.3f} | {st.tokens_per_s:.0f} |" for st in t.strategies]
        both = {st.strategy: st.seconds for st in t.strategies}
        if both.get("fused") and both.get("sequential"):
            lines.append(f"\nfused/sequential: {both['fused'] / both['sequential']:.2f}x the seconds")
    if t.per_member_bytes is not None:
        lines.append(f"\nper member: {t.per_member_bytes / GIB:.3f} GiB resident (LoRA factors, float32 masters, AdamW "
                     "state; measured after the warm-up, when every member's optimizer state exists)")
    if t.peak_bytes is not None:
        lines.append(f"\nprocess peak: {t.peak_bytes / GIB:.3f} GiB ({t.peak_method})"
                     + (f"; allocator reserved peak {t.peak_reserved_bytes / GIB:.3f} GiB (torch.cuda.max_memory_reserved: "
                        "what runs out)" if t.peak_reserved_bytes is not None else ""))
    return lines + [""]


def _preset(p: PresetReport) -> list[str]:
    lines = [f"## Preset {p.preset} (`{p.config_path}`)", ""]
    v = p.verdict
    if v is not None:
        word = "fits" if v.fits else "DOES NOT FIT"
        lines += [f"**Verdict: {word}** on {v.device_gib:.1f} GiB with {v.min_headroom:.0%} headroom ({v.basis}); "
                  f"populora plan says {'fits' if v.plan_fits else 'does not fit'}.", "",
                  "| phase | measured GiB | planned GiB |", "| --- | ---: | ---: |"]
        for phase in ("generation", "training"):
            lines.append(f"| {phase} | {v.phases_gib[phase]:.3f} | {v.planned_phases_gib.get(phase, 0):.3f} |")
        if v.reserved_slack_gib:
            lines.append(f"\nThe training phase counts {v.reserved_slack_gib:.3f} GiB the allocator reserved above its "
                         "allocated peak (the plan has no item for it).")
    else:
        lines.append("**Verdict: not reached yet** (see the stages table).")
    if p.items:
        lines += ["", "### Memory, item by item", "",
                  "| item | planned GiB | measured GiB | measured/planned | how measured |", "| --- | ---: | ---: | ---: | --- |"]
        for c in p.items:
            lines.append(f"| {c.item} | {c.planned_gib:.3f} | {_num(c.measured_gib, '.3f')} | "
                         f"{_num(c.ratio, '.2f') + 'x' if c.ratio is not None else '-'} | {c.method} |")
    lines += [""] + _training(p)
    if p.generation:
        lines += ["### Generation: mixed adapters vs one adapter vs the base (same prompts, greedy)", ""]
        lines += _generation_rows(p.generation)
    return lines + [""]


def _step(s: StepComparison) -> list[str]:
    lines = [f"## One self-play step: {' vs '.join(a.label for a in s.arms)} ({s.preset})", "",
             f"model: {s.model}; engine {s.engine}; changed from the preset: `{' '.join(s.overrides)}`", ""]
    if s.arms:
        phases = [p for p in STEP_PHASES if any(p in a.phases for a in s.arms)]
        phases += sorted({k for a in s.arms for k in a.phases} - set(phases) - {"collectives"})
        head = " | ".join(a.label for a in s.arms)
        lines += [f"| phase (s) | {head} | ratio |", "| --- |" + " ---: |" * (len(s.arms) + 1)]
        for ph in phases:
            vals = [a.phases.get(ph) for a in s.arms]
            ratio = vals[0] / vals[1] if len(vals) == 2 and vals[0] is not None and vals[1] and vals[1] >= 1e-3 else None
            lines.append(f"| {ph} | " + " | ".join(_num(x, '.3f') for x in vals) + f" | {_num(ratio)} |")
        groups = [phase_groups(a.phases) for a in s.arms]
        for g in groups[0]:
            vals = [x[g] for x in groups]
            ratio = vals[0] / vals[1] if len(vals) == 2 and vals[1] >= 1e-3 else None
            lines.append(f"| *{g}* | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {_num(ratio)} |")
        lines.append("| **step** | " + " | ".join(f"{a.step_s:.3f}" for a in s.arms) + f" | {_num(s.ratio)} |")
        lines.append("| warm-up step (apart) | " + " | ".join(f"{a.warmup_s:.3f}" for a in s.arms) + " | |")
        lines.append("\npublish (the trainer's new weights to the engine serving them), share of the step: "
                     + ", ".join(f"{a.label} {a.phases.get('publish', 0.0) / a.step_s:.1%}" for a in s.arms if a.step_s > 0)
                     + f" (engine {s.engine})")
        lines.append(f"\npopulation/baseline step ratio: {_num(s.ratio)}x")
        lines.append(f"\npopulation/baseline: **{_num(s.ratio)}x** per step: seconds of one timed population step over "
                     f"one timed baseline step, each member on the baseline's budget (the paper: {PAPER_STEP_RATIO}x for "
                     "4T+4S with vLLM on GPU).")
    lines += [f"- {n}" for n in s.notes]
    return lines + [""]


def render_markdown(report: DoctorReport) -> str:
    budget = f", budget {report.budget_s:g} s" if report.budget_s else ""
    lines = ["# populora doctor", "", f"`{report.command}`, {report.wall_s:.0f} s{budget}: **{report.status}**", ""]
    lines += _stages(report)
    lines += _node(report) + [""] + _allreduce(report)
    for p in report.presets:
        lines += _preset(p)
    if report.step is not None:
        lines += _step(report.step)
    if report.tests is not None:
        lines += ["## GPU tests (`pytest -m gpu` on the files that hold them)", "",
                  f"exit status {report.tests.get('exit_status')}: {report.tests.get('summary')}", ""]
        if report.tests.get("files"):
            lines += [f"files: {', '.join(report.tests['files'])}", ""]
    return "\n".join(lines)
