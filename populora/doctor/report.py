"""The doctor's reports: one JSON object (the records, plus the figures derived from them) and markdown."""

from __future__ import annotations

import json
from pathlib import Path

from populora.doctor.generation import arm_ratios
from populora.doctor.records import DoctorReport, GenerationResult, PresetReport, to_json

GIB = float(1 << 30)


def report_json(report: DoctorReport) -> dict:
    """The report as JSON: every record, with derived figures (tokens/s, ratios, verdict basis) added."""
    out = to_json(report)
    for preset, raw in zip(report.presets, out["presets"]):
        raw["training"]["tokens_per_s"] = preset.training.tokens_per_s
        for u, ru in zip(preset.training.updates, raw["training"]["updates"]):
            ru["tokens_per_s"] = u.tokens_per_s
        for g, rg in zip(preset.generation, raw["generation"]):
            rg["ratios"] = arm_ratios(g)
            for a, ra in zip(g.arms, rg["arms"]):
                ra["tokens_per_s"] = a.tokens_per_s
        raw["verdict"]["basis"] = preset.verdict.basis
    return out


def write_reports(report: DoctorReport, out_dir: Path) -> tuple[Path, Path]:
    """``doctor.json`` and ``doctor.md`` in ``out_dir`` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "doctor.json", out_dir / "doctor.md"
    js.write_text(json.dumps(report_json(report), indent=2) + "\n")
    md.write_text(render_markdown(report))
    return js, md


def _num(x, fmt: str = ".2f", none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def _node(report: DoctorReport) -> list[str]:
    d = report.device
    lines = [f"- host `{d.host}`, torch {d.torch}, {d.cpu_cores} CPU cores this process may use"
             + (f" ({d.cpu_model})" if d.cpu_model else "")]
    if d.kind == "cuda":
        lines.append(f"- driver {d.driver or 'unknown'}, CUDA {d.cuda}, NCCL {d.nccl or 'none'}, "
                     f"CUDA_VISIBLE_DEVICES={d.visible_devices if d.visible_devices is not None else 'unset'}")
        lines += [f"- GPU {g.index}: {g.name}, {g.total_gib:.1f} GiB, compute capability {g.capability}" for g in d.gpus]
    else:
        lines.append(f"- no GPU: the CPU run; host RAM {d.memory_gib:.1f} GiB is the budget the plan is checked against")
    lines.append(f"- vLLM: {d.vllm or 'not importable'}")
    return lines


def _allreduce(report: DoctorReport) -> list[str]:
    a = report.allreduce
    what = f"{a.backend}{' ' + a.version if a.version else ''} over {a.ranks} local rank(s)"
    lines = [f"## All-reduce: {what}", ""]
    if a.error:
        return lines + [f"failed: {a.error}", ""]
    lines += ["float32 sum; time is the slowest rank's mean; algbw = bytes / time, busbw = algbw x 2(n-1)/n "
              "(nccl-tests' definitions; GB = 1e9 bytes)", "",
              "| size | time (ms) | algbw (GB/s) | busbw (GB/s) | sum correct |", "| ---: | ---: | ---: | ---: | :---: |"]
    for s in a.sizes:
        lines.append(f"| {s.size_bytes / 2**20:g} MiB | {s.seconds * 1e3:.3f} | {s.algbw_gbs:.2f} | {s.busbw_gbs:.2f} | "
                     f"{'yes' if s.correct else 'NO'} |")
    if a.ranks == 1:
        lines.append("\nOne rank: nothing crosses a link, so busbw is 0 by definition.")
    return lines + [""]


def _generation_rows(gens: tuple[GenerationResult, ...]) -> list[str]:
    lines = ["| engine | device | members | requests | new tokens | mixed tok/s | one_adapter tok/s | base tok/s "
             "| mixed/one_adapter (s/s) | mixed/base (s/s) | start s | sleep s | wake s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    notes = []
    for g in gens:
        if g.error:
            lines.append(f"| {g.engine} | {g.device} | {g.adapters} | - | - | - | - | - | - | - | - | - | - |")
            notes.append(f"- {g.engine}: {g.error}")
            continue
        tps = {a: (g.arm(a).tokens_per_s if g.arm(a) else None) for a in ("mixed", "one_adapter", "base")}
        r = arm_ratios(g)
        lines.append(f"| {g.engine} | {g.device} | {g.adapters} | {g.requests} | {g.new_tokens} | {_num(tps['mixed'], '.1f')} "
                     f"| {_num(tps['one_adapter'], '.1f')} | {_num(tps['base'], '.1f')} | {_num(r['mixed/one_adapter'])}x "
                     f"| {_num(r['mixed/base'])}x | {_num(g.start_s, '.1f')} | {_num(g.sleep_s)} | {_num(g.wake_s)} |")
        notes += [f"- {g.engine}: {n}" for n in g.notes]
    return lines + [""] + notes


def _preset(p: PresetReport) -> list[str]:
    v, t = p.verdict, p.training
    word = "fits" if v.fits else "DOES NOT FIT"
    lines = [f"## Preset {p.preset} (`{p.config_path}`)", "",
             f"**Verdict: {word}** on {v.device_gib:.1f} GiB with {v.min_headroom:.0%} headroom ({v.basis}); "
             f"populora plan says {'fits' if v.plan_fits else 'does not fit'}.", "",
             "| phase | measured GiB | planned GiB |", "| --- | ---: | ---: |"]
    for phase in ("generation", "training"):
        lines.append(f"| {phase} | {v.phases_gib[phase]:.3f} | {v.planned_phases_gib.get(phase, 0):.3f} |")
    lines += ["", "### Memory, item by item", "",
              "| item | planned GiB | measured GiB | measured/planned | how measured |", "| --- | ---: | ---: | ---: | --- |"]
    for c in p.items:
        lines.append(f"| {c.item} | {c.planned_gib:.3f} | {_num(c.measured_gib, '.3f')} | "
                     f"{_num(c.ratio, '.2f') + 'x' if c.ratio is not None else '-'} | {c.method} |")
    lines += ["", "### Training: one micro-batch per member (`train_member`, the trainer `populora train` runs)", ""]
    if t.error:
        lines.append(f"failed: {t.error}")
    lines.append(f"model: {t.model}, {t.params / 1e6:.1f} M parameters, {t.dtype} on {t.device}; micro-batch "
                 f"{t.micro_batch} x ({t.prompt_tokens} + {t.completion_tokens}) tokens; gradient checkpointing "
                 f"{'on' if t.gradient_checkpointing else 'off'}")
    if t.updates:
        lines += ["", "| member | role | tokens | seconds | tokens/s | loss | grad norm |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for u in t.updates:
            lines.append(f"| {u.member} | {u.role} | {u.tokens} | {u.seconds:.2f} | {u.tokens_per_s:.0f} | "
                         f"{u.loss:.4g} | {u.grad_norm:.3g} |")
        lines.append(f"\nall members: {t.tokens_per_s:.0f} tokens/s (prompt + completion tokens over the seconds of "
                     "train_member: forward, backward, optimizer step)")
    if t.peak_bytes is not None:
        lines.append(f"\nprocess peak: {t.peak_bytes / GIB:.3f} GiB ({t.peak_method})")
    lines += ["", "### Generation: mixed adapters vs one adapter vs the base (same prompts, greedy)", ""]
    lines += _generation_rows(p.generation)
    return lines + [""]


def render_markdown(report: DoctorReport) -> str:
    lines = ["# populora doctor", "", f"`{report.command}`, {report.wall_s:.0f} s", ""]
    lines += _node(report) + [""] + _allreduce(report)
    for p in report.presets:
        lines += _preset(p)
    if report.tests is not None:
        lines += ["## GPU tests (`pytest -m gpu`)", "", f"exit status {report.tests['exit_status']}: "
                  f"{report.tests['summary']}", ""]
    return "\n".join(lines)
