"""The engine serves what the trainer trained: the publish check on the real vLLM engine (the CPU build here).

Marked ``vllm`` (skipped without vLLM unless POPULORA_REQUIRE_VLLM=1) and ``slow``. One engine with four
strong adapters (B ~ N(0, 0.5^2), so members differ by whole nats) serves the first tests: a true publish
passes the check; three publishes broken on purpose are each caught with a ``ServedMismatch`` naming the
member, the step and the difference: a stale version (new weights under the version id and name vLLM has
cached), an adapter applied twice (its LoRA term doubled), another member's weights. Then a run with a
publish broken at step 2 stops there with one line, its last checkpoint (step 1) intact.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from populora.policy import make_backend
from populora.policy.engine import ServedMismatch
from populora.policy.vllm_adapters import LoraRegistry
from populora.policy.vllm_engine import VLLMEngine

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ["t0", "t1", "s0", "s1"]
MISMATCH = r"at step 7, engine 'vllm' does not serve member 't0' as the trainer holds it: .* by [0-9.e+-]+ nats"


@pytest.fixture(scope="module")
def be(tmp_path_factory):
    cfg = {"engine": "vllm", "model": "tiny", "device": "cpu", "dtype": "float32", "max_prompt_tokens": 64,
           "lora": {"rank": 8, "alpha": 16, "b_std": 0.5},
           "vllm": {"enforce_eager": True, "adapter_dir": str(tmp_path_factory.mktemp("published"))}}
    policy = make_backend(cfg, max_new_tokens=24)
    for i, name in enumerate(ADAPTERS):
        policy.add_adapter(name, policy.new_adapter_weights(seed=i))
    policy.publish()
    yield policy
    policy.close()


def _update(be, name: str = "t0") -> None:
    """One large RL-shaped step of ``name``: its served log-probabilities must change."""
    be.set_learning_rate(name, 0.05)
    tl = be.completion_logprobs(name, [be.encode("def f(x):")], [be.encode(" return x + 1")])
    be.optimizer_step(name, -(tl.logprobs * tl.mask).sum())


def _restore(be) -> None:
    """Every adapter published again, correctly (the module's engine serves the next test)."""
    for name in ADAPTERS:
        be.set_weights(name, be.get_weights(name))
    be.publish()
    assert max(be.check_served(ADAPTERS, 0).values()) <= be.engine.tolerance()


def test_a_true_publish_passes_the_check(be):
    _update(be)
    report = be.publish()
    assert report.published == ["t0"]  # only what changed is sent
    diffs = be.check_served(ADAPTERS, 7)
    assert set(diffs) == set(ADAPTERS)
    assert max(diffs.values()) <= be.engine.tolerance() == 1e-3
    assert be.check_due(7) and not be.publish().published  # nothing changed since


def test_a_stale_version_is_caught(be, monkeypatch):
    """New weights written under the version (id and name) vLLM has already loaded: vLLM keeps serving
    the old weights, the check sees it."""
    be.check_served(ADAPTERS, 6)  # every current version loaded in the engine
    served = be.engine.registry.current("t0")

    def stale(member, weights):
        if member != "t0":
            return LoraRegistry.publish(be.engine.registry, member, weights)
        weights.save_peft(served.path, base_model_name_or_path=be.engine.registry.base_model_name)
        return served, None  # the same version id and name: vLLM's cache answers

    monkeypatch.setattr(be.engine.registry, "publish", stale)
    _update(be)
    be.publish()
    with pytest.raises(ServedMismatch, match=MISMATCH):
        be.check_served(ADAPTERS, 7)
    monkeypatch.undo()
    be.engine.retire("t0")  # the stale version goes; the next publish writes a fresh one
    _restore(be)


def test_an_adapter_applied_twice_is_caught(be, monkeypatch):
    real = VLLMEngine.publish_many

    def twice(self, items):  # the LoRA term of t0 added twice
        return real(self, [(n, w.map(lambda m, a, b: (a, 2 * b)) if n == "t0" else w) for n, w in items])

    monkeypatch.setattr(VLLMEngine, "publish_many", twice)
    _update(be)
    be.publish()
    with pytest.raises(ServedMismatch, match=MISMATCH):
        be.check_served(ADAPTERS, 7)
    monkeypatch.undo()
    _restore(be)


def test_another_members_weights_are_caught(be, monkeypatch):
    real = VLLMEngine.publish_many

    def swapped(self, items):
        return real(self, [(n, be.get_weights("t1") if n == "t0" else w) for n, w in items])

    monkeypatch.setattr(VLLMEngine, "publish_many", swapped)
    _update(be)
    be.publish()
    with pytest.raises(ServedMismatch, match=MISMATCH):
        be.check_served(ADAPTERS, 7)
    monkeypatch.undo()
    _restore(be)


def test_a_broken_publish_stops_the_run_with_one_line_and_the_last_checkpoint_intact(tmp_path, monkeypatch):
    from populora.checkpoint import find_latest
    from populora.run_dir import RunDir
    from populora.selfplay.loop import SelfPlay
    from populora.selfplay.runner import train

    real_step, real_publish = SelfPlay.step, VLLMEngine.publish_many
    state = {"step": 0}

    def step(self, n):
        state["step"] = n
        return real_step(self, n)

    def broken_at_step_2(self, items):  # from step 2 on, every member is served twice its LoRA term
        if state["step"] >= 2:
            items = [(n, w.map(lambda m, a, b: (a, 2 * b))) for n, w in items]
        return real_publish(self, items)

    monkeypatch.setattr(SelfPlay, "step", step)
    monkeypatch.setattr(VLLMEngine, "publish_many", broken_at_step_2)
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm-cache"))
    rd = tmp_path / "run"
    with pytest.raises(ServedMismatch) as caught:
        train(str(ROOT / "configs" / "tiny.yaml"),
              ["policy.engine=vllm", "policy.lora.rank=8", "policy.lora.b_std=0.5", "policy.vllm.enforce_eager=true",
               "selfplay.steps=3", "run.checkpoint_every=1"], str(rd), handle_signals=False, progress=False)
    message = str(caught.value)
    assert "\n" not in message and "at step 2," in message and "does not serve member" in message
    summary = RunDir(rd).read_summary()
    assert summary["status"].startswith("failed: at step 2,")
    latest, unusable = find_latest(RunDir(rd).checkpoints)
    assert latest is not None and latest.step == 1 and not unusable
