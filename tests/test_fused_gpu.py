"""The fused update on CUDA: the grouped matrix product (``grouped_mm``) in bf16 against the slot loop and a
float64 reference, a whole fused pass against the sequential one, and a short timing that prints its ratio.

Marked ``gpu``: skipped without CUDA. Imports only torch, transformers, peft and the project's core (no
vLLM, no hypothesis, no omegaconf needed), so it runs on a bare GPU node with the core installed.
Expected runtime on one H100: well under a minute (most of it is building the tiny tokenizer once).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import pytest
import torch

from populora.policy.multi_lora import GROUPED, LOOP, grouped_kernel_fits, grouped_mm, lora_delta

pytestmark = pytest.mark.gpu

# Qwen2.5-7B's LoRA shapes (in -> out of q/k/v/o/gate/up/down share these four) at the preset's rank
SHAPES_7B = [(3584, 3584), (3584, 512), (3584, 18944), (18944, 3584)]
RANK = 32
DEVICE = "cuda"
TOKENS = [0, 300, 17, 1024, 5, 0, 600, 90]  # 8 slots, two of them empty, unequal sizes


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


@pytest.mark.parametrize("shape", SHAPES_7B, ids=lambda s: f"{s[0]}x{s[1]}")
def test_grouped_mm_is_each_tokens_own_adapter_in_bf16(shape):
    """Forward and backward of the grouped kernel against the bf16 slot loop and a float64 reference:
    the grouped result is as close to float64 as the loop's (both are bf16 products with float32
    accumulation); empty slots get no gradient."""
    assert grouped_mm() is not None, "this torch has neither torch.nn.functional.grouped_mm nor torch._grouped_mm"
    d_in, d_out = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    ends = torch.tensor(TOKENS).cumsum(0).tolist()
    x = torch.randn(ends[-1], d_in, device="cuda", generator=g).bfloat16()
    a = [(torch.randn(RANK, d_in, device="cuda", generator=g) / d_in**0.5).bfloat16() for _ in TOKENS]
    b = [(torch.randn(d_out, RANK, device="cuda", generator=g) / RANK**0.5).bfloat16() for _ in TOKENS]
    assert grouped_kernel_fits(x, RANK, d_out)
    grad_out = torch.randn(ends[-1], d_out, device="cuda", generator=g).bfloat16()
    results = {}
    for kernel, dtype in ((GROUPED, torch.bfloat16), (LOOP, torch.bfloat16), (LOOP, torch.float64)):
        xs = x.detach().clone().to(dtype).requires_grad_()  # fresh leaves for each arm
        As = [t.detach().clone().to(dtype).requires_grad_() for t in a]
        Bs = [t.detach().clone().to(dtype).requires_grad_() for t in b]
        out = lora_delta(xs, As, Bs, ends, [2.0] * len(TOKENS), kernel=kernel)
        out.backward(grad_out.to(dtype))
        results[(kernel, dtype)] = (out.detach(), xs.grad, [t.grad for t in As], [t.grad for t in Bs])
    ref = results[(LOOP, torch.float64)]
    for kernel in (GROUPED, LOOP):
        out, gx, ga, gb = results[(kernel, torch.bfloat16)]
        assert _rel(out, ref[0]) < 1e-2, (kernel, _rel(out, ref[0]))
        assert _rel(gx, ref[1]) < 1e-2, (kernel, _rel(gx, ref[1]))
        for s, n in enumerate(TOKENS):
            if n == 0:
                assert ga[s] is None or not ga[s].any(), (kernel, s)
                assert gb[s] is None or not gb[s].any(), (kernel, s)
                continue
            assert _rel(ga[s], ref[2][s]) < 2e-2, (kernel, s, _rel(ga[s], ref[2][s]))
            assert _rel(gb[s], ref[3][s]) < 2e-2, (kernel, s, _rel(gb[s], ref[3][s]))
    grouped, loop = results[(GROUPED, torch.bfloat16)][0], results[(LOOP, torch.bfloat16)][0]
    assert _rel(grouped, ref[0]) <= 2 * _rel(loop, ref[0]) + 1e-3


@pytest.mark.parametrize("shape", SHAPES_7B[2:], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_generation_kernel_on_stacked_slots_in_bf16(shape):
    """Mixed-adapter generation's LoRA product (stacked_delta: grouped_mm over the rows of each stacked
    adapter, some with no rows left) against the bf16 loop and float64, at a decode step (one token
    per row) and a prefill (32 tokens per row)."""
    from populora.policy.multi_lora import route_index, stacked_delta

    d_in, d_out = shape
    g = torch.Generator(device="cuda").manual_seed(1)
    counts = (3, 0, 1, 7, 0, 2, 2, 1)  # rows per stacked adapter; two have finished all theirs
    a = (torch.randn(len(counts), RANK, d_in, device="cuda", generator=g) / d_in**0.5).bfloat16()
    b = (torch.randn(len(counts), d_out, RANK, device="cuda", generator=g) / RANK**0.5).bfloat16()
    for width in (1, 32):
        x = torch.randn(sum(counts) * width, d_in, device="cuda", generator=g).bfloat16()
        offs = route_index(counts, width, x.device, grouped=True)
        got = stacked_delta(x, a, b, counts, width, [2.0] * len(counts), index=offs)
        ends = [int(e) for e in offs.tolist()]
        loop = lora_delta(x, list(a), list(b), ends, [2.0] * len(counts), kernel=LOOP)
        ref = lora_delta(x.double(), [t.double() for t in a], [t.double() for t in b], ends, [2.0] * len(counts),
                         kernel=LOOP)
        assert _rel(got, ref) < 1e-2 and _rel(got, ref) <= 2 * _rel(loop, ref) + 1e-3, (width, _rel(got, ref))


# -- a whole fused pass on a small random Qwen2 -------------------------------------------------------
@dataclass
class _Seq:  # the fields of populora.selfplay.records.Seq that the update reads
    role: str
    task_type: str
    prompt_ids: list
    completion_ids: list
    logprobs: list
    reward: float
    prompt_group: str


def _model(hidden: int = 512, layers: int = 4):
    """A random bf16 Qwen2 of the given size on the device, and the tiny tokenizer."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from populora.policy.models.tiny import prepare_tiny

    tok = AutoTokenizer.from_pretrained(prepare_tiny(0))
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 11 // 4 // 8 * 8,
                      num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=2,
                      max_position_embeddings=8192, tie_word_embeddings=False, pad_token_id=tok.pad_token_id or 0)
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Qwen2ForCausalLM._from_config(cfg, dtype=torch.bfloat16)
    return model.eval().requires_grad_(False), tok


def _backend(model, tok, adapters: int = 8):
    from populora.policy.config import PolicyConfig
    from populora.policy.hf import HFBackend

    policy = PolicyConfig(model="tiny", device=DEVICE, dtype="bfloat16",
                          lora={"rank": 16, "alpha": 32, "b_std": 0.05})
    be = HFBackend(policy, model=model, tokenizer=tok)
    names = [f"m{i}" for i in range(adapters)]
    for i, n in enumerate(names):
        be.add_adapter(n, be.new_adapter_weights(seed=i))
    return be, names


def _batches(names, sizes, vocab, prompt, new, seed=0):
    rng = random.Random(seed)
    out = {}
    for n, size in zip(names, sizes):
        seqs = []
        for i in range(size):
            p = rng.randint(max(1, prompt // 4), prompt)
            c = max(1, min(new, round(math.exp(rng.uniform(math.log(max(1, new / 32)), math.log(new))))))
            seqs.append(_Seq("student", "code_o", [rng.randrange(10, vocab) for _ in range(p)],
                             [rng.randrange(10, vocab) for _ in range(c)], [-rng.random() for _ in range(c)],
                             float(i % 2), f"{n}{i // 2}"))  # each pair of a prompt has a spread
        out[n] = seqs
    return out


def _grads(be, names):
    out = {}
    for n in names:
        ps = be.trainable_parameters(n)
        out[n] = None if all(p.grad is None for p in ps) else torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double() for p in ps])
        be.discard_gradients(n)
    return out


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _run(be, names, batches, strategy, mb):
    from populora.rl.config import RLConfig
    from populora.rl.fused import MemberPart, fused_gradients
    from populora.rl.update import accumulate_gradients, advantages_of

    rl = RLConfig()
    _sync()
    t0 = time.perf_counter()
    if strategy == "fused":
        fused_gradients(be, [MemberPart(n, batches[n], advantages_of(batches[n], rl)) for n in names], rl, mb)
    else:
        for n in names:
            if batches[n]:
                accumulate_gradients(be, n, batches[n], advantages_of(batches[n], rl), rl, mb)
    _sync()
    return time.perf_counter() - t0, _grads(be, names)


def _micro_batching(micro_batch, prompt, new):
    from populora.rl.packing import MicroBatching, TokenBudget

    return MicroBatching(TokenBudget.of(micro_batch, prompt, new), micro_batch)


def test_fused_pass_on_cuda_gives_each_adapter_its_sequential_gradient(monkeypatch):
    """bf16 base and adapters: the fused pass (grouped kernel) and the sequential one (peft) are each
    within bf16 rounding of the float64 model's gradient, for every adapter; the empty member gets none."""
    import copy

    import populora.policy.multi_lora as ml

    model, tok = _model()
    ref_be, _ = _backend(copy.deepcopy(model).double(), tok)  # the same base and adapters in float64
    be, names = _backend(model, tok)
    for n in names:
        ref_be.set_weights(n, be.get_weights(n))
    sizes = [6, 1, 0, 3, 9, 2, 4, 5]
    batches = _batches(names, sizes, len(be.tokenizer), 64, 256)
    mb = _micro_batching(4, 64, 256)
    calls = {"grouped": 0}
    real = ml.grouped_mm()

    def counting(*args, **kwargs):
        calls["grouped"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(ml, "grouped_mm", lambda: counting)
    _, fused = _run(be, names, batches, "fused", mb)
    assert calls["grouped"] > 0, "the fused pass did not use the grouped kernel on CUDA bf16"
    _, seq = _run(be, names, batches, "sequential", mb)
    _, ref = _run(ref_be, names, batches, "sequential", mb)
    for n, size in zip(names, sizes):
        if size == 0:
            assert fused[n] is None and seq[n] is None and ref[n] is None
            continue
        e_fused, e_seq = _rel(fused[n], ref[n]), _rel(seq[n], ref[n])
        print(f"{n}: {size} sequences, relative error vs float64: fused {e_fused:.2e}, sequential {e_seq:.2e}")
        assert e_fused < 5e-2 and e_seq < 5e-2, (n, e_fused, e_seq)
        assert e_fused <= 2 * e_seq + 5e-3, (n, e_fused, e_seq)


def test_fused_vs_sequential_timing_prints_its_ratio():
    """8 members, the paper's length regime scaled down (prompts in [P/4, P], completions log-uniform in
    [N/32, N]), forward + backward of one update each way, median of 3 after a warm-up. Prints the ratio;
    asserts only that both ran and agree (speed is measured, not asserted)."""
    be, names = _backend(*_model(hidden=1024, layers=8))
    batches = _batches(names, [16] * 8, len(be.tokenizer), 256, 2048, seed=1)
    mb = _micro_batching(4, 256, 2048)
    times = {"fused": [], "sequential": []}
    grads = {}
    for rep in range(4):
        for strategy in ("sequential", "fused"):
            seconds, grads[strategy] = _run(be, names, batches, strategy, mb)
            if rep:
                times[strategy].append(seconds)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    diff = max(_rel(grads["fused"][n], grads["sequential"][n]) for n in names)
    print(f"\ncuda {torch.cuda.get_device_name()}: sequential {med['sequential']:.3f} s, fused {med['fused']:.3f} s; "
          f"fused/sequential speed-up: {med['sequential'] / med['fused']:.2f}x, max relative gradient difference "
          f"(bf16): {diff:.2e}")
    assert diff < 5e-2
