"""The vLLM engine against the real vLLM: the CPU build here (``make setup-vllm``), the CUDA build on a GPU.

Marked ``vllm``: skipped where vLLM is not installed, unless POPULORA_REQUIRE_VLLM=1 (CI), where a
missing vLLM fails. The engine runs with vLLM's default multiprocessing (its own engine process), as
on a GPU node; one engine serves most tests (starting one takes 10-40 s on two cores).

Strong adapters (B ~ N(0, 0.5^2) on the tiny model) make every adapter's greedy text differ from the
base's and from each other's, so routing a row to the wrong adapter cannot go unseen.
"""

from __future__ import annotations

import os

import pytest
import torch

from populora.policy import make_backend
from populora.policy.base import GenerationRequest as Req
from populora.policy.base import SamplingParams
from populora.policy.engine import EngineContext, engine_seed

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ADAPTERS = ["t0", "t1", "s0", "s1"]
PROMPTS = ["def fibonacci(n):", "import os\nclass Stack:", "x = [1, 2, 3]\nfor"]
GREEDY = SamplingParams(temperature=0, max_new_tokens=16)
# float32 on both sides, different kernels (vLLM's CPU attention and LoRA ops vs transformers + peft):
# measured differences are ~1e-5 nats; a wrong adapter or a wrong position is off by whole nats.
LOGPROB_TOLERANCE = 1e-3


def _backend(tmp_path, context=None, **vllm):
    cfg = {"engine": "vllm", "model": "tiny", "device": "cpu", "dtype": "float32", "max_prompt_tokens": 64,
           "lora": {"rank": 8, "alpha": 16, "b_std": 0.5},
           "vllm": {"enforce_eager": True, "adapter_dir": str(tmp_path), **vllm}}
    be = make_backend(cfg, max_new_tokens=24, context=context)
    for i, name in enumerate(ADAPTERS):
        be.add_adapter(name, be.new_adapter_weights(seed=i))
    return be


@pytest.fixture(scope="module")
def be(tmp_path_factory):
    policy = _backend(tmp_path_factory.mktemp("published"))
    yield policy
    policy.close()


def _mixed_requests():
    """Every adapter and the bare base model, interleaved in one call."""
    return [Req(p, a) for p in PROMPTS for a in (None, *ADAPTERS)]


def _tokens(results):
    return [r.completions[0].token_ids for r in results]


def test_mixed_adapter_greedy_equals_the_trainer_token_for_token(be):
    requests = _mixed_requests()
    served = be.generate(requests, GREEDY)
    reference = be.trainer.generate(requests, GREEDY)  # transformers + peft, the trainer's own weights
    assert _tokens(served) == _tokens(reference)
    texts = {r.adapter: c.text for r, c in zip(requests, (s.completions[0] for s in served)) if r.prompt == PROMPTS[0]}
    assert len(set(texts.values())) == len(texts), f"adapters not strong enough to tell apart: {texts}"
    for request, result in zip(requests, served):
        completion = result.completions[0]
        assert be.engine.platform == "cpu" and completion.finish_reason in ("stop", "length")
        adapter = request.adapter or ADAPTERS[0]
        if request.adapter is None:
            continue  # the trainer scores under adapters; the base rows' tokens were compared above
        tl = be.completion_logprobs(adapter, [result.prompt_token_ids], [completion.token_ids], with_grad=False)
        diff = (tl.logprobs[0, : len(completion.token_ids)] - torch.tensor(completion.logprobs)).abs()
        assert diff.max().item() < LOGPROB_TOLERANCE, (adapter, diff)


def test_every_new_version_is_served_and_the_old_one_retired(be):
    """An optimizer step, an evolution child and set_weights each publish a new version: the engine
    serves it (its greedy tokens equal the trainer's with the new weights) and drops the old one."""
    llm_engine = be.engine.llm.llm_engine
    requests = [Req(PROMPTS[0], a) for a in ADAPTERS]

    def served_equals_trainer():
        assert _tokens(be.generate(requests, GREEDY)) == _tokens(be.trainer.generate(requests, GREEDY))

    served_equals_trainer()
    before = {a: be.engine.registry.current(a) for a in ADAPTERS}
    # an RL update of t0 (large learning signal so that its greedy text changes)
    be.set_learning_rate("t0", 0.5)
    tl = be.completion_logprobs("t0", [be.encode(PROMPTS[1])], [be.encode(" return 0")])
    be.optimizer_step("t0", -(tl.logprobs * tl.mask).sum())
    # an evolved child replaces s1; t1 gets s0's weights (what a restore or a broadcast does)
    be.remove_adapter("s1")
    be.add_adapter("s1-3", be.new_adapter_weights(seed=11))
    be.set_weights("t1", be.get_weights("s0"))
    requests = [Req(PROMPTS[0], a) for a in ("t0", "t1", "s0", "s1-3")]
    served_equals_trainer()
    assert _tokens(be.generate([requests[1]], GREEDY)) == _tokens(be.generate([requests[2]], GREEDY))
    after = {a: be.engine.registry.current(a) for a in ("t0", "t1", "s0")}
    assert after["s0"] == before["s0"]  # unchanged: not republished
    for a in ("t0", "t1"):
        assert after[a].lora_int_id != before[a].lora_int_id and not before[a].path.exists()
    loaded = set(llm_engine.list_loras())
    assert not loaded & {before["t0"].lora_int_id, before["t1"].lora_int_id, before["s1"].lora_int_id}
    assert "s1" not in be.engine.registry and not before["s1"].path.exists()
    # put the population back for the other tests
    be.remove_adapter("s1-3")
    be.add_adapter("s1", be.new_adapter_weights(seed=3))
    be.set_weights("t0", be.new_adapter_weights(seed=0))
    be.set_weights("t1", be.new_adapter_weights(seed=1))


def test_stop_strings_end_completions_as_on_the_hf_engine(be):
    requests = [Req(p, a) for p in PROMPTS for a in (None, "t0", "s1")]
    free = be.trainer.generate(requests, GREEDY)
    # a stop string that the greedy texts really contain: the 3rd..5th characters of a long one
    text = next(r.completions[0].text for r in free if len(r.completions[0].text) > 6)
    stop = SamplingParams(temperature=0, max_new_tokens=16, stop=(text[2:5],))
    served, reference = be.generate(requests, stop), be.trainer.generate(requests, stop)
    assert [r.completions[0].text for r in served] == [r.completions[0].text for r in reference]
    assert _tokens(served) == _tokens(reference)  # the token that completed the stop string is kept
    assert any(r.completions[0].finish_reason == "stop" and stop.stop[0] not in r.completions[0].text
               for r in served)
    assert [r.completions[0].finish_reason for r in served] == [r.completions[0].finish_reason for r in reference]


def test_seeded_sampling_depends_on_the_seed_and_the_request_index_only(be):
    """As on the HF engine: with a seed, a request's samples depend on (seed, its index), not on the
    other requests of the call; another seed gives other samples."""
    be.engine.config.vllm.seeded_sampling = True
    try:
        s = SamplingParams(temperature=1.0, max_new_tokens=12, n=2, seed=7)
        requests = [Req(PROMPTS[0], "t0", index=0), Req(PROMPTS[1], "s0", index=1), Req(PROMPTS[2], None, index=2)]
        full = be.generate(requests, s)
        alone = be.generate([requests[1]], s)
        again = be.generate(requests, s)
        other = be.generate(requests, SamplingParams(temperature=1.0, max_new_tokens=12, n=2, seed=8))
    finally:
        be.engine.config.vllm.seeded_sampling = False
    samples = lambda rs: [[c.token_ids for c in r.completions] for r in rs]  # noqa: E731
    assert samples(full) == samples(again)
    assert samples(alone) == samples(full)[1:2]
    assert samples(other) != samples(full)
    assert full[0].completions[0].token_ids != full[0].completions[1].token_ids  # n samples differ


def test_the_zero_adapter_workaround_keeps_base_rows_right_and_a_dead_engine_is_an_engine_failure(tmp_path, be):
    """vLLM's CPU LoRA ops give a base-model row the last slot's adapter once every slot has been used
    (docs/backends.md). Without the workaround and with exactly one slot per adapter, base rows come
    out as an adapter's; the engine in ``be`` (workaround on) gets them right. If this test fails on
    its first assertion, the installed vLLM has fixed the bug and the workaround can go.

    The second engine also runs with another ``EngineContext`` seed: unseeded samples of the same
    prompts differ between the two engines (ranks do not repeat each other). Then its process is
    killed: the next generate is an ``EngineFailure`` that names the process and the signal."""
    import signal

    from populora.policy.engine import EngineFailure

    other = _backend(tmp_path, context=EngineContext(seed=engine_seed(0, 1), rank=1))
    try:
        other.engine.base_via_zero_adapter = False  # the engine as it would be without the workaround
        requests = _mixed_requests()
        wrong = other.generate(requests, GREEDY)
        right = be.trainer.generate(requests, GREEDY)
        base_rows = [i for i, r in enumerate(requests) if r.adapter is None]
        assert other.engine.llm.llm_engine.vllm_config.lora_config.max_loras == len(ADAPTERS)
        assert [wrong[i].completions[0].token_ids for i in base_rows] != [right[i].completions[0].token_ids
                                                                          for i in base_rows]
        assert [_tokens(wrong)[i] for i in range(len(requests)) if i not in base_rows] == \
            [_tokens(right)[i] for i in range(len(requests)) if i not in base_rows]
        assert _tokens(be.generate(requests, GREEDY)) == _tokens(right)
        # different engine seeds: different samples for the same prompts
        sample = SamplingParams(temperature=1.0, max_new_tokens=12, n=4)
        mine = _tokens(be.generate([Req(PROMPTS[0], None)] * 2, sample))
        theirs = _tokens(other.generate([Req(PROMPTS[0], None)] * 2, sample))
        assert mine != theirs

        # the engine runs in its own processes, and a dead one is an engine failure that names it
        # (on this second engine, not a third: an engine start is the cost of these tests)
        pids = other.engine.process_ids()
        assert pids and os.getpid() not in pids
        os.kill(pids[0], signal.SIGKILL)
        with pytest.raises(EngineFailure, match=r"vllm engine \(cpu\) of rank 1: .*pid \d+.*died \(killed by SIGKILL\)"):
            for _ in range(50):  # the first call may still be answered before the kill is noticed
                other.generate([Req(PROMPTS[0], "t0")], GREEDY)
    finally:
        other.close()
