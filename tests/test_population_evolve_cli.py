"""`populora evolve` on PEFT directories: the child directory loads with peft on a small Qwen2."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from populora.commands import evolve
from populora.policy.adapters import AdapterWeights
from populora.population.operators import OPERATORS, make_child


def _cli(argv: list[str]) -> int:
    # The same wiring as populora.cli: a subparser per command module, dispatch via ``func``.
    parser = argparse.ArgumentParser(prog="populora")
    evolve.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture(scope="module")
def tiny_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )
    return Qwen2ForCausalLM(cfg).eval()


def _shapes(model, targets=("q_proj", "v_proj", "down_proj")):
    return {
        name: (mod.in_features, mod.out_features)
        for name, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets
    }


@pytest.mark.slow
def test_evolve_writes_a_child_that_peft_loads(tiny_qwen2, tmp_path, capsys):
    from peft import PeftModel

    shapes = _shapes(tiny_qwen2)
    for seed, name in ((1, "p1"), (2, "p2")):
        AdapterWeights.init(shapes, 4, 8, b_init="random", b_std=0.05, seed=seed).save_peft(tmp_path / name, "tiny")
    rc = _cli(["evolve", "delta_merge", "--parents", str(tmp_path / "p1"), str(tmp_path / "p2"),
               "--out", str(tmp_path / "child"), "--seed", "3", "weight=0.7"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["params"] == {"weight": 0.7}
    child = AdapterWeights.load_peft(tmp_path / "child")
    parents = [AdapterWeights.load_peft(tmp_path / p) for p in ("p1", "p2")]
    assert child.equal(make_child("delta_merge", parents, seed=3, weight=0.7))
    assert json.loads((tmp_path / "child" / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny"

    model = PeftModel.from_pretrained(tiny_qwen2, str(tmp_path / "child"))
    loaded = {n: p.detach() for n, p in model.named_parameters() if "lora_" in n}
    assert len(loaded) == 2 * len(shapes)
    for module, (a, b) in child.tensors.items():
        assert torch.equal(loaded[f"base_model.model.{module}.lora_A.default.weight"], a)
        assert torch.equal(loaded[f"base_model.model.{module}.lora_B.default.weight"], b)
    ids = torch.arange(10)[None]
    with torch.no_grad():
        with_adapter = model(ids).logits
        with model.disable_adapter():
            base = model(ids).logits
    assert not torch.allclose(with_adapter, base)


def test_evolve_one_parent_and_parameter_errors(tmp_path, capsys):
    shapes = {"model.layers.0.self_attn.q_proj": (16, 16)}
    AdapterWeights.init(shapes, 2, 4, b_init="random", seed=0).save_peft(tmp_path / "p")
    assert _cli(["evolve", "svd_perturb", "sigma=0.2", "--parents", str(tmp_path / "p"), "--out", str(tmp_path / "c")]) == 0
    assert AdapterWeights.load_peft(tmp_path / "c").shapes() == AdapterWeights.load_peft(tmp_path / "p").shapes()
    capsys.readouterr()
    assert _cli(["evolve", "dare", "--parents", str(tmp_path / "p"), "--out", str(tmp_path / "d")]) == 2
    assert "takes 2 parent" in capsys.readouterr().err
    rc = _cli(["evolve", "svd_perturb", "--parents", str(tmp_path / "p"), "--out", str(tmp_path / "d"), "sigma=-1"])
    assert rc == 2 and "parameter sigma must be in [0, inf)" in capsys.readouterr().err
    assert _cli(["evolve", "svd_perturb", "--parents", str(tmp_path / "nowhere"), "--out", str(tmp_path / "d")]) == 2
    assert "adapter_config.json: missing" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_evolve_list_prints_every_operator_with_defaults(capsys):
    assert _cli(["evolve", "--list"]) == 0
    out = capsys.readouterr().out
    for name, spec in OPERATORS.items():
        assert name in out and spec.summary in out
    assert "drop=0.7 [0, 1)" in out and "eta_max=0.5 [0, 1]" in out


def _tree(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_evolve_out_never_overwrites_a_parent_or_a_non_empty_directory(tmp_path, capsys):
    shapes = {"model.layers.0.self_attn.q_proj": (16, 16)}
    for seed, name in ((0, "p1"), (1, "p2")):
        AdapterWeights.init(shapes, 2, 4, b_init="random", seed=seed).save_peft(tmp_path / name)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("keep me")
    (tmp_path / "a-file").write_text("keep me too")
    before = _tree(tmp_path)
    pair = ["--parents", str(tmp_path / "p1"), str(tmp_path / "p2")]
    cases = [
        (["--out", str(tmp_path / "p2")], "is parent"),
        (["--out", str(tmp_path / "p1") + "/"], "is parent"),
        (["--out", str(tmp_path / "busy")], "non-empty directory (notes.txt)"),
        (["--out", str(tmp_path)], "contains parent"),
        (["--out", str(tmp_path), "--force"], "contains parent"),  # never, even forced
        (["--out", str(tmp_path / "busy"), "--force"], "not an adapter directory"),
        (["--out", str(tmp_path / "a-file"), "--force"], "is a file"),
    ]
    for extra, message in cases:
        assert _cli(["evolve", "delta_merge", *pair, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (extra, err)
        assert _tree(tmp_path) == before, extra  # nothing written, nothing deleted

    (tmp_path / "empty").mkdir()
    assert _cli(["evolve", "delta_merge", *pair, "--out", str(tmp_path / "empty")]) == 0
    child = AdapterWeights.load_peft(tmp_path / "empty")
    # --force replaces an adapter directory, a parent included (both parents are read first)
    parents = [AdapterWeights.load_peft(tmp_path / p) for p in ("p1", "p2")]
    assert _cli(["evolve", "delta_merge", *pair, "--out", str(tmp_path / "p2"), "--force"]) == 0
    assert AdapterWeights.load_peft(tmp_path / "p2").equal(make_child("delta_merge", parents, seed=0))
    assert AdapterWeights.load_peft(tmp_path / "p2").equal(child)
    assert (tmp_path / "busy" / "notes.txt").read_text() == "keep me"
