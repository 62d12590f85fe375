"""AdapterWeights: construction, validation, and the lossless PEFT directory round trip."""

from __future__ import annotations

import json

import pytest
import torch

from populora.policy.adapters import (
    AdapterFormatError,
    AdapterMismatchError,
    AdapterWeights,
    check_uniform_rank,
)

SHAPES = {"model.layers.0.self_attn.q_proj": (16, 16), "model.layers.0.mlp.down_proj": (32, 16)}


def test_init_zeros_is_peft_default_and_seeded():
    w = AdapterWeights.init(SHAPES, rank=4, alpha=8, seed=1)
    for a, b in w.tensors.values():
        assert torch.count_nonzero(b) == 0 and torch.count_nonzero(a) > 0
    assert w.equal(AdapterWeights.init(SHAPES, rank=4, alpha=8, seed=1))
    assert not w.equal(AdapterWeights.init(SHAPES, rank=4, alpha=8, seed=2))
    assert w.target_modules == ("down_proj", "q_proj")
    assert w.shapes()["model.layers.0.mlp.down_proj"] == ((4, 32), (16, 4))


def test_init_random_b_differs_from_base():
    w = AdapterWeights.init(SHAPES, rank=4, alpha=8, b_init="random", b_std=0.01, seed=3)
    assert all(torch.count_nonzero(b) > 0 for _, b in w.tensors.values())
    with pytest.raises(AdapterFormatError, match="b_init"):
        AdapterWeights.init(SHAPES, rank=4, alpha=8, b_init="ones")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_peft_round_trip_is_lossless(tmp_path, dtype):
    w = AdapterWeights.init(SHAPES, rank=4, alpha=16, b_init="random", seed=5, dtype=dtype)
    w.save_peft(tmp_path / "ad", base_model_name_or_path="tiny")
    cfg = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 16 and cfg["peft_type"] == "LORA"
    back = AdapterWeights.load_peft(tmp_path / "ad")
    assert back.equal(w) and back.dtype == dtype
    # overwriting an existing directory is atomic and leaves no temporary directories
    w2 = w.map(lambda m, a, b: (a, b + 1))
    w2.save_peft(tmp_path / "ad")
    assert AdapterWeights.load_peft(tmp_path / "ad").equal(w2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ad"]


def test_peft_keys_match_peft_naming(tmp_path):
    from safetensors.torch import load_file

    AdapterWeights.init(SHAPES, rank=2, alpha=2).save_peft(tmp_path / "ad")
    keys = set(load_file(str(tmp_path / "ad" / "adapter_model.safetensors")))
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in keys
    assert "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight" in keys


def test_bad_directories_name_the_problem(tmp_path):
    with pytest.raises(AdapterFormatError, match="adapter_config.json: missing"):
        AdapterWeights.load_peft(tmp_path)
    AdapterWeights.init(SHAPES, rank=2, alpha=2).save_peft(tmp_path / "ad")
    (tmp_path / "ad" / "adapter_config.json").write_text("{not json")
    with pytest.raises(AdapterFormatError, match="invalid JSON"):
        AdapterWeights.load_peft(tmp_path / "ad")
    (tmp_path / "ad" / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 2}))
    with pytest.raises(AdapterFormatError, match="'target_modules' missing"):
        AdapterWeights.load_peft(tmp_path / "ad")
    (tmp_path / "ad" / "adapter_config.json").write_text(
        json.dumps({"r": 3, "lora_alpha": 2, "target_modules": ["q_proj"]})
    )
    with pytest.raises(AdapterFormatError, match=r"expected A \[3, in\]"):
        AdapterWeights.load_peft(tmp_path / "ad")
    (tmp_path / "ad" / "adapter_model.safetensors").write_bytes(b"garbage")
    with pytest.raises(AdapterFormatError, match="unreadable safetensors"):
        AdapterWeights.load_peft(tmp_path / "ad")


def test_rank_mismatch_is_a_clear_error():
    a = AdapterWeights.init(SHAPES, rank=4, alpha=8)
    b = AdapterWeights.init(SHAPES, rank=8, alpha=8)
    with pytest.raises(AdapterMismatchError, match="ranks differ"):
        a.check_compatible(b)
    with pytest.raises(AdapterMismatchError, match="'s1' has rank 8"):
        check_uniform_rank({"t0": a, "s1": b})
    assert check_uniform_rank({"t0": a, "t1": a.clone()}) == 4


def test_delta_uses_peft_scaling():
    w = AdapterWeights.init(SHAPES, rank=4, alpha=8, b_init="random", seed=0)
    a, b = w.tensors["model.layers.0.self_attn.q_proj"]
    assert torch.allclose(w.delta("model.layers.0.self_attn.q_proj"), 2.0 * b @ a)
