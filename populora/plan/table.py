"""The plan as a table: one line per item, the two phases, the verdict and the knobs that fit."""

from __future__ import annotations

from populora.plan.inputs import fix_overrides
from populora.plan.memory import Plan


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def describe(plan: Plan) -> dict[str, str]:
    """What each item holds, in words and sub-figures (the engine's line is its own)."""
    p, d = plan.inputs, plan.details
    s, policy = p.shape, p.policy
    tokens = p.prompt_tokens + p.new_tokens
    rows = policy.train_micro_batch
    ckpt = d["activations_with_checkpointing_gib"]
    plain = d["activations_without_checkpointing_gib"]
    return {
        "base_weights": f"frozen base in the trainer, {s.n_params() / 1e9:.2f} B params in {p.dtype}",
        "engine": plan.engine.what,
        "trainer": (f"gradients of the {p.fused_members} members of a fused pass, stacked adapters, AdamW "
                    "temporaries of one" if p.fused_members > 1 else
                    "gradients and AdamW temporaries of the member being updated"),
        "adapters_optimizer": _adapters_line(p),
        "activations": (
            f"a pass of <= {rows} x {tokens} = {rows * tokens} padded tokens (packed) x {s.layers} layers ({d['layer_kib_per_token']:.1f} KiB/token/layer); "
            f"checkpointing {_on(policy.gradient_checkpointing)} (on: {ckpt:.1f}, off: {plain:.1f})"
        ),
        "logits": (
            f"<= {rows * p.new_tokens} completion tokens a pass, chunks of {policy.logits_chunk} "
            f"(one [B, T, V] float32 log-softmax would keep {d['logits_unchunked_gib']:.1f})"
        ),
        "cuda_context": "CUDA contexts (estimate)" if p.device.startswith("cuda") else "none on CPU",
    }


def _adapters_line(p) -> str:
    from populora.plan.memory import GIB, host_masters_bytes

    n = f"{p.adapters} adapters x {p.adapter_params / 1e6:.1f} M params"
    if p.adapter_dtype == "float32":
        head = f"{n}: float32 weights + AdamW moments"
    else:
        head = f"{n}: {p.adapter_dtype} weights + float32 masters and AdamW moments"
    if p.trained_here == p.adapters:
        return head
    host = host_masters_bytes(p) / GIB
    return (head + f" of the {p.trained_here} trained on this rank"
            + (f" (the others' masters: {host:.1f} GiB of host memory)" if host else ""))


def format_plan(plan: Plan, title: str = "") -> str:
    """The plan as text: items, phases, headroom, verdict, problems and fixes."""
    p = plan.inputs
    device = "GPU" if p.device.startswith("cuda") else "CPU (figures are process RAM)"
    where = (f"one rank of {p.ranks}, each {plan.gpu_gib:g} GiB {device}: {p.adapters} members, "
             f"{p.trained_here} trained per rank" if p.ranks > 1 else f"one {plan.gpu_gib:g} GiB {device}")
    lines = [
        f"memory plan{': ' + title if title else ''} on {where}",
        f"model: {p.shape.source}; engine {p.policy.engine}, {p.dtype}, LoRA compute {p.adapter_dtype}, "
        f"{p.adapters} adapters of rank {p.policy.lora.rank}, prompts {p.prompt_tokens} + completions {p.new_tokens} tokens",
        "",
        f"{'item':<20}{'GiB':>8}  what",
    ]
    what = describe(plan)
    for name, gib in plan.items.items():
        lines.append(f"{name:<20}{gib:>8.1f}  {what[name]}")
    lines.append("-" * 72)
    for name, gib in plan.phases.items():
        lines.append(f"{name + ' phase':<20}{gib:>8.1f}")
    need = plan.min_headroom * plan.gpu_gib
    verdict = "fits" if plan.fits else "DOES NOT FIT"
    lines.append(f"{'headroom':<20}{plan.headroom_gib:>8.1f}  (at least {need:.1f} = {plan.min_headroom:.0%} wanted): {verdict}")
    for problem in plan.problems:
        lines.append(f"  problem: {problem}")
    if plan.problems:
        if plan.fixes:
            lines.append("would fit with (any one line):")
            lines.extend(f"  {fix_overrides(fix)}" for fix in plan.fixes)
        else:
            lines.append("no setting of checkpointing, sleep mode, micro-batch, vLLM share or chunk size fits: "
                         "use fewer members per GPU, shorter completions or a larger GPU")
    return "\n".join(lines)
