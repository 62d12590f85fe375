"""vLLM engine: naming/versioning/routing and the API of every supported vLLM release without vLLM;
logprob parity on a GPU with vLLM."""

from __future__ import annotations

import pytest
import torch

from populora.policy.adapters import AdapterWeights
from populora.policy.vllm_adapters import LoraRegistry, sampling_seeds

SHAPES = {"model.layers.0.self_attn.q_proj": (8, 8), "model.layers.0.mlp.down_proj": (16, 8)}


def _weights(seed):
    return AdapterWeights.init(SHAPES, 2, 4.0, b_init="random", b_std=0.1, seed=seed)


def test_every_publish_gets_a_new_name_id_and_directory(tmp_path):
    reg = LoraRegistry(tmp_path, base_model_name="tiny")
    a1, old = reg.publish("teacher_0", _weights(0))
    assert old is None and a1.lora_int_id >= 1 and a1.lora_name == "teacher_0@v1"
    b1, _ = reg.publish("student_0", _weights(1))
    a2, retired = reg.publish("teacher_0", _weights(2))
    assert retired == a1
    names = {a1.lora_name, b1.lora_name, a2.lora_name}
    ids = {a1.lora_int_id, b1.lora_int_id, a2.lora_int_id}
    paths = {a1.path, b1.path, a2.path}
    assert len(names) == len(ids) == len(paths) == 3
    assert AdapterWeights.load_peft(a2.path).equal(_weights(2))
    assert AdapterWeights.load_peft(a1.path).equal(_weights(0))  # files stay until the engine dropped them
    reg.delete_files(retired)
    assert not a1.path.exists() and a2.path.exists()


def test_removed_then_re_added_member_never_reuses_name_or_id(tmp_path):
    reg = LoraRegistry(tmp_path)
    first, _ = reg.publish("m", _weights(0))
    assert reg.retire("m") == first and "m" not in reg
    again, old = reg.publish("m", _weights(0))
    assert old is None
    assert again.lora_name != first.lora_name and again.lora_int_id != first.lora_int_id


def test_routing_follows_current_versions(tmp_path):
    reg = LoraRegistry(tmp_path)
    t, _ = reg.publish("t", _weights(0))
    s, _ = reg.publish("s", _weights(1))
    assert reg.route(["t", None, "s", "t"]) == [t, None, s, t]
    t2, _ = reg.publish("t", _weights(3))
    assert reg.route(["t"]) == [t2]
    with pytest.raises(KeyError, match="'nope' is not published"):
        reg.route(["nope"])


def test_member_names_are_made_path_safe(tmp_path):
    reg = LoraRegistry(tmp_path)
    a, _ = reg.publish("run/teacher 1", _weights(0))
    assert a.path.parent == tmp_path and "/" not in a.path.name and " " not in a.path.name
    assert a.lora_name == "run/teacher 1@v1"


def test_request_seeds():
    assert sampling_seeds(None, [0, 1, 2]) == [None, None, None]
    seeds = sampling_seeds(7, [0, 1, 2, 3])
    assert len(set(seeds)) == 4 and seeds == sampling_seeds(7, [0, 1, 2, 3]) and all(0 <= s < 2**31 for s in seeds)
    assert sampling_seeds(7, [2, 3]) == seeds[2:]  # a request's seed depends on its index, not on the call


def test_module_imports_without_vllm_and_says_how_to_install(monkeypatch):
    import sys

    import populora.policy.vllm_engine as ve

    monkeypatch.setitem(sys.modules, "vllm", None)  # as if not installed: `import vllm` raises ImportError
    with pytest.raises(ImportError, match=r"populora\[vllm\].*make setup-vllm"):
        ve.VLLMEngine.check_available()
    from populora.policy import make_backend

    with pytest.raises(ImportError, match=r"populora\[vllm\]"):  # before any weights load
        make_backend({"engine": "vllm", "model": "/nowhere/no-such-model", "lora": {"rank": 8}})


# -- the vLLM API the engine uses, checked against every supported release (no vLLM needed) --------
def test_the_release_table_covers_the_declared_range():
    from pathlib import Path

    from populora.policy import vllm_api

    versions = vllm_api.supported_versions()
    assert versions[0] == vllm_api.SUPPORTED[1] and len(versions) >= 5
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"vllm>={vllm_api.SUPPORTED[1]}"' in pyproject  # the extra declares the same floor
    # what the table says about releases before the floor: why the floor is where it is
    old = vllm_api.table()["0.6.3.post1"]
    assert "enable_sleep_mode" not in old["EngineArgs"] and 512 not in old["lora_ranks"]


@pytest.mark.parametrize("sleep", [False, True])
def test_every_engine_keyword_exists_in_every_supported_release(sleep):
    from populora.policy import PolicyConfig
    from populora.policy.vllm_api import supported_versions, table
    from populora.policy.vllm_launch import engine_kwargs

    cfg = PolicyConfig(engine="vllm", model="tiny", device="cuda", lora={"rank": 32},
                       vllm={"sleep_between_phases": sleep, "load_format": "dummy"})  # every optional keyword
    for v in supported_versions():
        api = table()[v]
        available = set(api["EngineArgs"]) | set(api["LLM"])
        kwargs = engine_kwargs(cfg, 8, 8192, available, v)
        assert kwargs["load_format"] == "dummy"
        assert set(kwargs) <= available, (v, set(kwargs) - available)
        assert cfg.lora.rank in api["lora_ranks"]
        # what generate() passes and reads
        assert {"n", "temperature", "top_p", "max_tokens", "stop", "seed", "logprobs"} <= set(api["SamplingParams"]), v
        assert {"lora_name", "lora_int_id", "lora_path"} <= set(api["LoRARequest"]), v
        assert {"prompts", "sampling_params", "lora_request", "use_tqdm"} <= set(api["LLM.generate"]), v
        assert {"index", "text", "token_ids", "logprobs", "finish_reason"} <= set(api["CompletionOutput"]), v
        assert {"outputs", "prompt_token_ids"} <= set(api["RequestOutput"]), v
        assert {"sleep", "wake_up"} <= set(api["LLM.methods"]), v
        # what score() (the publish check) passes and reads
        assert "prompt_logprobs" in api["SamplingParams"] and "prompt_logprobs" in api["RequestOutput"], v


def test_an_option_the_installed_vllm_lacks_is_an_error_naming_it():
    from populora.policy import PolicyConfig
    from populora.policy.vllm_api import table
    from populora.policy.vllm_launch import VLLMEngineError, engine_kwargs

    old = table()["0.6.6.post1"]
    available = set(old["EngineArgs"]) | set(old["LLM"])
    cfg = PolicyConfig(engine="vllm", model="tiny", device="cuda", lora={"rank": 32},
                       vllm={"sleep_between_phases": True})
    with pytest.raises(VLLMEngineError, match="policy.vllm.sleep_between_phases"):
        engine_kwargs(cfg, 8, 8192, available, "0.6.6.post1")
    # raw log-probabilities are vLLM's default where the option does not exist: left out, not an error
    assert "logprobs_mode" not in engine_kwargs(cfg.replace(vllm={"sleep_between_phases": False}), 8, 8192,
                                                available, "0.6.6.post1")


def test_config_refuses_ranks_a_supported_release_does_not_serve():
    from populora.policy import PolicyConfig, PolicyConfigError

    with pytest.raises(PolicyConfigError, match="policy.lora.rank"):
        PolicyConfig(engine="vllm", lora={"rank": 1})  # served from 0.11 on, not by 0.10.2
    assert PolicyConfig(engine="vllm", lora={"rank": 512}).lora.rank == 512


@pytest.mark.gpu
@pytest.mark.slow
def test_vllm_logprobs_match_trainer_logprobs(tmp_path):
    """Same adapter, same prompt: vLLM's sampled-token logprobs vs the HF trainer's.

    Tolerance: both run in bfloat16 with different kernels, so per-token logprobs differ by bf16
    rounding; we require mean |diff| < 0.05 and max |diff| < 0.5 nats over all tokens, and the
    greedy tokens of the first 8 positions to agree. Also checks that a weight update is served
    (new version) and not the stale cached adapter.
    """
    pytest.importorskip("vllm")
    from populora.policy import make_backend
    from populora.policy.base import GenerationRequest, SamplingParams

    be = make_backend(
        {
            "engine": "vllm",
            "model": "smollm2-135m",
            "device": "cuda",
            "lora": {"rank": 8, "alpha": 16, "b_std": 0.02},
            "vllm": {"gpu_memory_utilization": 0.3, "max_model_len": 1024, "max_loras": 2,
                     "adapter_dir": str(tmp_path)},
            "max_prompt_tokens": 512,
        }
    )
    be.add_adapter("a", be.new_adapter_weights(seed=1))
    be.add_adapter("b", be.new_adapter_weights(seed=2))
    prompt = be.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a Python function that reverses a string."}],
        tokenize=False,
        add_generation_prompt=True,
    ) + "```python"
    greedy = SamplingParams(temperature=0, max_new_tokens=32)
    out = be.generate([GenerationRequest(prompt, "a"), GenerationRequest(prompt, "b")], greedy)
    trainer_greedy = be.trainer.generate([GenerationRequest(prompt, "a")], greedy)[0].completions[0]
    assert out[0].completions[0].token_ids[:8] == trainer_greedy.token_ids[:8]
    for res, name in zip(out, ("a", "b")):
        comp = res.completions[0]
        tl = be.completion_logprobs(name, [res.prompt_token_ids], [comp.token_ids], with_grad=False)
        diff = (tl.logprobs[0, : len(comp.token_ids)].float().cpu() - torch.tensor(comp.logprobs)).abs()
        assert diff.mean() < 0.05 and diff.max() < 0.5, (name, diff)
    # A weight update must be served, not the cached old version. Make "b" clearly different first
    # (large B: its greedy text differs from a's), then give it a's weights: the next generate must
    # serve them under a new version, so b's text becomes a's.
    be.set_weights("b", be.get_weights("b").map(lambda m, a, b: (a, b * 200.0)))
    far = be.generate([GenerationRequest(prompt, "b")], greedy)[0].completions[0].token_ids
    assert far != out[0].completions[0].token_ids, "the test needs b to differ from a"
    before = be.engine.registry.current("b").lora_int_id
    be.set_weights("b", be.get_weights("a"))
    out2 = be.generate([GenerationRequest(prompt, "b")], greedy)
    assert be.engine.registry.current("b").lora_int_id > before
    assert out2[0].completions[0].token_ids == out[0].completions[0].token_ids
    # a prompt over policy.max_prompt_tokens is refused on its own; the rest of the batch runs
    long = be.generate([GenerationRequest(prompt * 40, "a"), GenerationRequest(prompt, "a")], greedy)
    assert long[0].refused.startswith("prompt_too_long") and long[0].completions == []
    assert long[1].completions[0].token_ids == out[0].completions[0].token_ids
    be.close()


# -- the engine's glue code, against a recording stand-in for the vllm package ----------------
# Not a vLLM simulation: it records what the engine asks of vLLM (engine arguments, one LoRARequest
# per prompt, adapter removals) and echoes fixed outputs in vLLM's RequestOutput shape, so the
# publishing/routing/conversion code runs without a GPU. It is strict: LLM, SamplingParams and
# LoRARequest accept only the names the given vLLM release takes (data/vllm_api.json), so a keyword
# that a release lacks fails here.


def _install_recording_vllm(monkeypatch, version: str):
    import dataclasses
    import sys
    import types
    from types import SimpleNamespace

    from populora.policy.vllm_api import table

    api = table()[version]
    calls = {"engines": [], "generate": [], "removed": [], "added": []}

    def strict(kind, names):
        def make(*args, **kwargs):
            unknown = sorted(set(kwargs) - set(names))
            assert not unknown, f"vLLM {version} {kind} takes no {unknown}"
            return kwargs if not args else (args, kwargs)
        return make

    EngineArgs = dataclasses.make_dataclass("EngineArgs", [(f, object, None) for f in api["EngineArgs"]])

    class LLM:
        def __init__(self, **kwargs):
            unknown = sorted(set(kwargs) - set(api["EngineArgs"]) - set(api["LLM"]))
            assert not unknown, f"vLLM {version} LLM takes no {unknown}"
            calls["engines"].append(kwargs)
            self.llm_engine = SimpleNamespace(remove_lora=lambda i: calls["removed"].append(i),
                                              add_lora=lambda request: calls["added"].append(request))

        def generate(self, prompts, sampling_params, lora_request, use_tqdm):
            calls["generate"].append((prompts, sampling_params, lora_request))
            outs = []
            for i, (p, sp) in enumerate(zip(prompts, sampling_params)):
                toks = [5, 6, 7][: sp["max_tokens"]]
                reason = "abort" if i == 1 else "length"  # the second request was aborted by the engine
                comps = [
                    SimpleNamespace(index=j, token_ids=toks, text="x" * len(toks), finish_reason=reason,
                                    logprobs=[{t: SimpleNamespace(logprob=-0.5)} for t in toks])
                    for j in reversed(range(sp["n"]))  # out of order on purpose
                ]
                outs.append(SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=comps))
            return outs

    mods = {
        "vllm": types.ModuleType("vllm"),
        "vllm.engine": types.ModuleType("vllm.engine"),
        "vllm.engine.arg_utils": types.ModuleType("vllm.engine.arg_utils"),
        "vllm.inputs": types.ModuleType("vllm.inputs"),
        "vllm.lora": types.ModuleType("vllm.lora"),
        "vllm.lora.request": types.ModuleType("vllm.lora.request"),
        "vllm.platforms": types.ModuleType("vllm.platforms"),
    }
    mods["vllm.platforms"].current_platform = SimpleNamespace(device_type="cuda")
    mods["vllm"].LLM = LLM
    mods["vllm"].__version__ = version
    mods["vllm"].SamplingParams = strict("SamplingParams", api["SamplingParams"])
    mods["vllm.engine.arg_utils"].EngineArgs = EngineArgs
    mods["vllm.inputs"].TokensPrompt = lambda **kw: kw
    mods["vllm.lora.request"].LoRARequest = lambda name, int_id, path: (name, int_id, path)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return calls


@pytest.fixture(scope="module")
def tiny_trainer():
    from populora.policy.config import PolicyConfig
    from populora.policy.hf import HFBackend

    return HFBackend(PolicyConfig(model="tiny", device="cpu", lora={"rank": 8, "alpha": 8, "b_std": 0.05}))


@pytest.mark.parametrize("version", ["0.10.2", "0.33.0"])
def test_vllm_engine_publishes_new_versions_and_routes_per_prompt(monkeypatch, tmp_path, tiny_trainer, version):
    from pathlib import Path

    from populora.policy.backend import Policy
    from populora.policy.base import GenerationRequest as Req
    from populora.policy.base import SamplingParams
    from populora.policy.vllm_engine import VLLMEngine

    calls = _install_recording_vllm(monkeypatch, version)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # a started engine holds its share (0.45 of 80 GiB) on this rank's device
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: ((34 if calls["engines"] else 70) * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    for name in list(tiny_trainer.adapter_names()):
        tiny_trainer.remove_adapter(name)
    cfg = tiny_trainer.config.replace(engine="vllm", vllm={"adapter_dir": str(tmp_path)}, max_prompt_tokens=64)
    be = Policy(cfg, tiny_trainer, VLLMEngine(cfg, tiny_trainer, max_new_tokens=16))
    assert be.engine.max_model_len == 64 + 16  # policy.max_prompt_tokens + the longest completion
    be.add_adapter("t0", be.new_adapter_weights(seed=0))
    be.add_adapter("s0", be.new_adapter_weights(seed=1))
    s = SamplingParams(temperature=1.0, max_new_tokens=2, n=2, seed=3, stop=("</answer>",))
    res = be.generate([Req("def f(x):", "t0"), Req("x = 1", None), Req("y", "s0"), Req("z " * 200, "s0")], s)

    engine = calls["engines"][0]
    assert engine["enable_lora"] and engine["max_loras"] == 2 and engine["max_lora_rank"] == 8
    assert engine["logprobs_mode"] == "raw_logprobs" and engine["max_model_len"] == 80
    prompts, params, loras = calls["generate"][0]
    assert len(prompts) == 3  # the over-long prompt never reached the engine ...
    assert res[3].refused.startswith("prompt_too_long:") and res[3].completions == []  # ... it was refused alone
    assert prompts[0]["prompt_token_ids"] == be.encode("def f(x):") == res[0].prompt_token_ids
    assert [p["stop"] for p in params] == [["</answer>"]] * 3 and params[0]["logprobs"] == 0
    assert {p["seed"] for p in params} == {None}  # seeded_sampling is off by default (vLLM's fast sampler)
    (t_name, t_id, t_path), base, (s_name, s_id, _) = loras
    assert base is None and (t_name, s_name) == ("t0@v1", "s0@v1") and t_id != s_id
    published = AdapterWeights.load_peft(t_path)
    assert published.dtype == torch.bfloat16  # published in the engine's dtype
    assert published.equal(be.get_weights("t0").to(torch.bfloat16))
    assert [c.token_ids for c in res[0].completions] == [[5, 6], [5, 6]]
    assert res[0].completions[0].logprobs == [-0.5, -0.5] and res[0].completions[0].finish_reason == "length"
    assert res[1].completions[0].finish_reason == "abort"  # not reported as "length"

    # an RL update of t0: next generate serves t0@v2 under a new id; the old version is dropped
    tl = be.completion_logprobs("t0", [be.encode("a")], [be.encode(" b")])
    be.optimizer_step("t0", -(tl.logprobs * tl.mask).sum())
    be.generate([Req("a", "t0"), Req("b", "s0")], s)
    (t2_name, t2_id, t2_path), (s_again, s_id_again, _) = calls["generate"][1][2]
    assert (t2_name, s_again, s_id_again) == ("t0@v2", "s0@v1", s_id) and t2_id not in (t_id, s_id)
    assert calls["removed"] == [t_id] and not Path(t_path).exists()
    assert AdapterWeights.load_peft(t2_path).equal(be.get_weights("t0").to(torch.bfloat16))
    assert [a[:2] for a in calls["added"]] == [("t0@v2", t2_id)]  # loaded when published, not at the next batch

    # an evolved child replaces s0's weights; a removed member leaves the engine
    be.set_weights("s0", be.get_weights("t0"))
    be.remove_adapter("t0")
    assert calls["removed"] == [t_id, t2_id]
    be.generate([Req("b", "s0")], s)
    assert calls["generate"][2][2][0][0] == "s0@v2"
    assert len(calls["engines"]) == 1
    with pytest.raises(KeyError, match="t0"):
        be.generate([Req("a", "t0")], s)

    # seeded sampling (opt-in): one seed per request, from the request's own index
    be.engine.config.vllm.seeded_sampling = True
    be.generate([Req("b", "s0", index=5)], s)
    assert calls["generate"][3][1][0]["seed"] is not None
    be.engine.config.vllm.seeded_sampling = False


def test_the_first_publish_of_several_members_keeps_every_version(monkeypatch, tmp_path, tiny_trainer):
    """The first publish writes its members on threads; the registry they share is made once, before them
    (made lazily by each thread, a slow start left one registry per thread and kept only one member)."""
    import time

    from populora.policy import vllm_engine
    from populora.policy.vllm_adapters import LoraRegistry
    from populora.policy.vllm_engine import VLLMEngine

    _install_recording_vllm(monkeypatch, "0.33.0")

    class SlowToMake(LoraRegistry):
        def __init__(self, *args, **kwargs):
            time.sleep(0.05)  # every thread would arrive before the first registry exists
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(vllm_engine, "LoraRegistry", SlowToMake)
    cfg = tiny_trainer.config.replace(engine="vllm", vllm={"adapter_dir": str(tmp_path)}, max_prompt_tokens=64)
    engine = VLLMEngine(cfg, tiny_trainer, max_new_tokens=4)
    weights = tiny_trainer.new_adapter_weights(seed=0)
    engine.publish_many([(f"m{i}", weights) for i in range(3)])
    assert sorted(engine.registry.members()) == ["m0", "m1", "m2"]


def test_the_engine_refuses_a_memory_share_that_is_not_free(monkeypatch):
    from populora.policy.vllm_engine import VLLMEngine
    from populora.policy.vllm_launch import VLLMEngineError

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (40 * 2**30, 80 * 2**30))
    with pytest.raises(VLLMEngineError, match=r"gpu_memory_utilization=0.85 .* at most 0.50"):
        VLLMEngine._check_free_memory(0.85)
    VLLMEngine._check_free_memory(0.45)


# -- platforms, ranks and signals (pure parts; the real engine is in test_vllm_engine_real.py) -----
def test_the_cpu_platform_gets_float32_a_kv_cache_in_gib_and_no_sleep_mode():
    from populora.policy import PolicyConfig, PolicyConfigError
    from populora.policy.vllm_api import table
    from populora.policy.vllm_launch import VLLMEngineError, engine_kwargs

    api = table()["0.33.0"]
    available = set(api["EngineArgs"]) | set(api["LLM"])
    cfg = PolicyConfig(engine="vllm", model="tiny", device="cpu", lora={"rank": 8}, vllm={"cpu_kv_cache_gib": 0.5})
    cpu = engine_kwargs(cfg, 5, 256, available, platform="cpu", seed=123)
    assert cpu["dtype"] == "float32" and cpu["kv_cache_memory_bytes"] == 2**29 and cpu["seed"] == 123
    cuda = engine_kwargs(cfg.replace(device="cuda"), 5, 256, available, platform="cuda")
    assert cuda["dtype"] == "bfloat16" and "kv_cache_memory_bytes" not in cuda
    with pytest.raises(PolicyConfigError, match=r"policy.vllm.sleep_between_phases=true: vLLM's CPU platform"):
        PolicyConfig(engine="vllm", device="cpu", lora={"rank": 8}, vllm={"sleep_between_phases": True})
    sleepy = PolicyConfig(engine="vllm", device="cuda", lora={"rank": 8}, vllm={"sleep_between_phases": True})
    with pytest.raises(VLLMEngineError, match="CPU platform, which has no sleep mode"):
        engine_kwargs(sleepy, 5, 256, available, platform="cpu")  # a CPU vLLM under a cuda config
    with pytest.raises(PolicyConfigError, match=r"policy.vllm.cpu_kv_cache_gib .*got 0"):
        PolicyConfig(engine="vllm", lora={"rank": 8}, vllm={"cpu_kv_cache_gib": 0})


@pytest.mark.parametrize("cores, world, expected", [
    ([0, 1], 1, ["0,1"]),
    ([0, 1], 2, ["0", "1"]),
    ([4, 5, 6, 7, 8], 2, ["4,5,6", "7,8"]),
    ([3], 2, ["3", "3"]),  # fewer cores than ranks: they share
])
def test_each_local_rank_binds_its_own_cores(cores, world, expected):
    from populora.policy.vllm_launch import omp_binding

    assert [omp_binding(cores, r, world) for r in range(world)] == expected


def test_each_rank_has_its_own_compile_cache_and_cores():
    from populora.policy.engine import EngineContext
    from populora.policy.vllm_launch import engine_environment

    ctx = EngineContext(seed=1, rank=3, local_rank=1, local_world=2)
    env = engine_environment(ctx, "cpu", {"VLLM_CACHE_ROOT": "/scratch/vllm"}, [0, 1, 2, 3])
    assert env == {"VLLM_CACHE_ROOT": "/scratch/vllm/rank-3", "VLLM_CPU_OMP_THREADS_BIND": "2,3"}
    home = engine_environment(ctx, "cuda", {"XDG_CACHE_HOME": "/c"}, [0, 1])
    assert home == {"VLLM_CACHE_ROOT": "/c/vllm/rank-3"}  # no core binding on CUDA
    mine = engine_environment(ctx, "cpu", {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}, [0, 1, 2, 3])
    assert "VLLM_CPU_OMP_THREADS_BIND" not in mine  # the user's binding wins


def test_engine_seeds_differ_by_rank_and_by_run():
    from populora.policy.engine import engine_seed

    seeds = {engine_seed(run, rank) for run in range(4) for rank in range(8)}
    assert len(seeds) == 32 and all(0 <= s < 2**31 for s in seeds)
    assert engine_seed(5, 2) == engine_seed(5, 2)


def test_processes_started_in_the_block_are_immune_and_the_trainer_keeps_its_signal():
    import signal
    import subprocess
    import threading
    import time

    from populora.signals import children_immune

    got = []
    old = signal.signal(signal.SIGUSR2, lambda s, f: got.append(s))
    try:
        with children_immune():
            child = subprocess.Popen(["sleep", "30"])
            # Sent to this (blocked) thread: pending, not lost. A process-directed kill would be
            # taken by any other thread left running by earlier tests (vLLM, torch), which does
            # not block it, and the handler would run at once: also not lost, but not this test.
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR2)
            assert got == []
            pending = signal.sigpending()
            assert signal.SIGUSR2 in pending
        time.sleep(0.05)
        assert got == [signal.SIGUSR2]  # delivered once the block is lifted
        child.send_signal(signal.SIGUSR2)  # Slurm signals every process of the step
        time.sleep(0.3)
        assert child.poll() is None, "the child died of SIGUSR2"
        with open(f"/proc/{child.pid}/status") as f:
            blocked = int(next(line for line in f if line.startswith("SigBlk:")).split()[1], 16)
        assert blocked & (1 << (signal.SIGUSR2 - 1))
    finally:
        signal.signal(signal.SIGUSR2, old)
        child.kill()
        child.wait()


def test_an_engine_whose_memory_went_to_another_gpu_is_refused():
    from populora.policy.vllm_launch import placement_problem

    gib = 2**30
    # 80 GiB GPU, share 0.45: the engine took 36 GiB of this rank's device
    assert placement_problem(60 * gib, 24 * gib, 80 * gib, 0.45, "cuda:0") is None
    # every rank's engine on physical GPU 0: this rank's device did not move
    problem = placement_problem(60 * gib, 59.5 * gib, 80 * gib, 0.45, "cuda:0 (CUDA_VISIBLE_DEVICES=0,1,2,3)")
    assert problem and "not on this rank's device cuda:0 (CUDA_VISIBLE_DEVICES=0,1,2,3)" in problem
    assert "fell by 0.5 GiB, expected about 36.0 GiB" in problem and "--gpus-per-task=1" in problem


def test_an_engine_started_on_another_gpu_stops_the_run(monkeypatch, tmp_path, tiny_trainer):
    from populora.policy.backend import Policy
    from populora.policy.base import GenerationRequest as Req
    from populora.policy.base import SamplingParams
    from populora.policy.engine import EngineFailure
    from populora.policy.vllm_engine import VLLMEngine

    calls = _install_recording_vllm(monkeypatch, "0.33.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (70 * 2**30, 80 * 2**30))  # nothing taken here
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    for name in list(tiny_trainer.adapter_names()):
        tiny_trainer.remove_adapter(name)
    cfg = tiny_trainer.config.replace(engine="vllm", vllm={"adapter_dir": str(tmp_path)}, max_prompt_tokens=64)
    be = Policy(cfg, tiny_trainer, VLLMEngine(cfg, tiny_trainer, max_new_tokens=16))
    be.add_adapter("t0", be.new_adapter_weights(seed=0))
    for _ in range(2):  # refused, and not started a second time
        with pytest.raises(EngineFailure, match=r"not on this rank's device cuda:0 \(CUDA_VISIBLE_DEVICES=0,1\)"):
            be.generate([Req("x", "t0")], SamplingParams(max_new_tokens=4))
    assert len(calls["engines"]) == 1 and be.engine._llm is None  # closed
