"""More members than LoRA slots on the real vLLM engine (the CPU build here): adapters swap in and out.

Marked ``vllm`` (skipped without vLLM unless POPULORA_REQUIRE_VLLM=1) and ``slow``. One engine with two
LoRA slots for the members (``policy.vllm.max_loras=2``; on CPU one more for the all-zero base adapter)
and a host cache of two (``max_cpu_loras=2``) serves six members with strong adapters and alpha = 2 x
rank (vLLM folds the scale alpha / rank into ``lora_B`` when it loads an adapter, in place). So every
generate call of all six loads adapters into slots, and evicts some from the host cache too, which
vLLM then reads again from their published files. After every swap the engine must serve what the
trainer holds: greedy tokens equal the trainer's, and the publish check (``check_served``: the engine's
log-probabilities of fixed sequences against the trainer's) holds for every member. A tensor scaled
twice (an adapter reloaded from a staged copy that vLLM had already scaled) would double its LoRA
term: whole nats off, caught by the check.
"""

from __future__ import annotations

import pytest

from populora.policy import make_backend
from populora.policy.base import GenerationRequest as Req
from populora.policy.base import SamplingParams

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MEMBERS = [f"m{i}" for i in range(6)]
GREEDY = SamplingParams(temperature=0, max_new_tokens=8)
PROMPTS = ["def fibonacci(n):", "x = [1, 2, 3]\nfor"]


@pytest.fixture(scope="module")
def be(tmp_path_factory):
    cfg = {"engine": "vllm", "model": "tiny", "device": "cpu", "dtype": "float32", "max_prompt_tokens": 64,
           "lora": {"rank": 8, "alpha": 16, "b_std": 0.5},
           "vllm": {"enforce_eager": True, "max_loras": 2, "max_cpu_loras": 2,
                    "adapter_dir": str(tmp_path_factory.mktemp("published"))}}
    policy = make_backend(cfg, max_new_tokens=16)
    for i, name in enumerate(MEMBERS):
        policy.add_adapter(name, policy.new_adapter_weights(seed=i))
    yield policy
    policy.close()


def _tokens(results):
    return [r.completions[0].token_ids for r in results]


def _served_as_trained(be, members) -> None:
    requests = [Req(p, m) for p in PROMPTS for m in members]
    served = be.generate(requests, GREEDY)
    assert _tokens(served) == _tokens(be.trainer.generate(requests, GREEDY))
    diffs = be.check_served(list(members), 0)
    assert set(diffs) == set(members) and max(diffs.values()) <= be.engine.tolerance(), diffs


def test_more_members_than_slots_are_served_as_the_trainer_holds_them(be):
    assert be.engine.llm.llm_engine.vllm_config.lora_config.max_loras == 3  # 2 + the base adapter's on CPU
    _served_as_trained(be, MEMBERS)
    texts = {c.completions[0].text for c in be.generate([Req(PROMPTS[0], m) for m in MEMBERS], GREEDY)}
    assert len(texts) == len(MEMBERS), "adapters not strong enough to tell apart"


def test_an_adapter_evicted_and_loaded_again_is_not_scaled_twice(be):
    """First the last two members alone (the first four leave the slots and the host cache), then the first
    four again, several times: every reload is scaled once."""
    for _ in range(2):
        _served_as_trained(be, MEMBERS[4:])
        _served_as_trained(be, MEMBERS[:4])


def test_a_new_version_published_while_others_swap_is_the_one_served(be):
    old = be.engine.registry.current("m0")
    be.set_learning_rate("m0", 0.05)
    tl = be.completion_logprobs("m0", [be.encode("def f(x):")], [be.encode(" return x + 1")])
    be.optimizer_step("m0", -(tl.logprobs * tl.mask).sum())
    be.publish()
    assert be.engine.registry.current("m0").lora_int_id != old.lora_int_id
    _served_as_trained(be, MEMBERS[3:] + MEMBERS[:1])  # m0's new version, loaded after the others took the slots
