"""Optimizer state without pickle: exact round trip of AdamW's state_dict, clear errors on bad files."""

from __future__ import annotations

import json
import math

import pytest
import torch

from populora.optimizer_state import OptimizerStateError, decode, encode, load_state, save_state


def _adamw_after_steps(steps: int = 2, seed: int = 0) -> tuple[list[torch.nn.Parameter], torch.optim.AdamW]:
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(4, 3, generator=g)), torch.nn.Parameter(torch.randn(3, generator=g))]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.01)
    for _ in range(steps):
        opt.zero_grad()
        (params[0].pow(2).sum() + params[1].sin().sum()).backward()
        opt.step()
    return params, opt


def test_adamw_state_round_trips_exactly_and_training_continues_identically(tmp_path):
    params, opt = _adamw_after_steps()
    sd = opt.state_dict()
    files = save_state(tmp_path / "opt" / "t0", sd)
    assert sorted(f.name for f in files) == ["t0.json", "t0.safetensors"]
    back = load_state(tmp_path / "opt" / "t0")
    assert back["param_groups"] == sd["param_groups"]
    assert isinstance(back["param_groups"][0]["betas"], tuple)  # tuples stay tuples
    assert sorted(back["state"]) == sorted(sd["state"]) == [0, 1]  # int keys stay ints
    for i, st in sd["state"].items():
        for k, v in st.items():
            assert torch.equal(back["state"][i][k], v) and back["state"][i][k].dtype == v.dtype, (i, k)

    # one more step from the original and from the restored state gives the same parameters
    twin = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt2 = torch.optim.AdamW(twin, lr=1e-3)
    opt2.load_state_dict(back)
    for ps, o in ((params, opt), (twin, opt2)):
        o.zero_grad()
        (ps[0].pow(2).sum() + ps[1].sin().sum()).backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(params, twin))


def test_non_finite_floats_and_nested_containers():
    tree = {"a": [1, 2.5, float("nan"), float("inf"), -math.inf, None, True, "s"], 3: ((1,), {})}
    tensors: dict = {}
    enc = encode(tree, tensors)
    text = json.dumps(enc, allow_nan=False)  # strict JSON: no NaN literals
    back = decode(json.loads(text), tensors)
    assert back[3] == ((1,), {}) and back["a"][:2] == [1, 2.5] and back["a"][5:] == [None, True, "s"]
    assert math.isnan(back["a"][2]) and back["a"][3] == math.inf and back["a"][4] == -math.inf


def test_what_cannot_be_stored_is_refused_naming_where(tmp_path):
    with pytest.raises(OptimizerStateError, match=r"state\['x'\]: cannot store a set"):
        save_state(tmp_path / "o", {"x": {1, 2}})
    with pytest.raises(OptimizerStateError, match="dict key"):
        save_state(tmp_path / "o", {(1, 2): 3})


@pytest.mark.parametrize(
    "doc, match",
    [
        ("not json", "unreadable"),
        ("[1, 2]", "not an optimizer state"),
        ('{"format": "other", "state": 1}', "not an optimizer state"),
        ('{"format": "populora-optimizer-state/1", "state": {"tensor": "t9"}}', "tensor 't9' is not in the tensor file"),
        ('{"format": "populora-optimizer-state/1", "state": {"pickle": "x"}}', "unknown tag 'pickle'"),
        ('{"format": "populora-optimizer-state/1", "state": {"dict": [[1]]}}', "a dict item must be"),
        ('{"format": "populora-optimizer-state/1", "state": {"float": "1e999"}}', "is not nan, inf or -inf"),
        ('{"format": "populora-optimizer-state/1", "state": ' + '{"list": [' * 5000 + "]}" * 5000 + "}",
         "unreadable|nested|recursion"),
    ],
)
def test_malformed_tree_file_is_an_error_naming_it(tmp_path, doc, match):
    save_state(tmp_path / "o", {"w": torch.zeros(2)})
    (tmp_path / "o.json").write_text(doc)
    with pytest.raises(OptimizerStateError, match=match) as e:
        load_state(tmp_path / "o")
    assert "o.json" in str(e.value)


def test_damaged_tensor_file_is_an_error_naming_it(tmp_path):
    save_state(tmp_path / "o", {"w": torch.zeros(2)})
    (tmp_path / "o.safetensors").write_bytes(b"\x00" * 5)
    with pytest.raises(OptimizerStateError, match=r"o\.safetensors: unreadable"):
        load_state(tmp_path / "o")
