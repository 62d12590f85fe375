"""Member-keyed checkpoints: each rank writes its own members, one process commits; no pickle."""

from __future__ import annotations

import torch

from populora import checkpoint
from populora.policy.adapters import AdapterWeights


def _adam_state(seed: int) -> dict:
    torch.manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(2))]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.8, 0.95))
    for _ in range(2):
        sum((p ** 2).sum() for p in params).backward()
        opt.step()
    return opt.state_dict()


def _weights(seed: int) -> AdapterWeights:
    return AdapterWeights.init({"m.q_proj": (4, 6)}, 2, 4.0, b_init="random", b_std=0.1, seed=seed)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_members_written_separately_then_committed_round_trip_exactly(tmp_path):
    root = tmp_path / "ck"
    staging = checkpoint.begin(root, 3)
    # two "ranks" write their own members into the same staging directory
    checkpoint.write_member(staging, "t0", _weights(0), _adam_state(0))
    checkpoint.write_member(staging, "s0", _weights(1), _adam_state(1))
    assert checkpoint.load_latest(root) is None  # nothing committed yet
    checkpoint.commit(root, 3, {"members": [], "note": "x"})
    ck = checkpoint.load_latest(root)
    assert ck.step == 3 and ck.state["note"] == "x" and sorted(ck.adapters) == ["s0", "t0"]
    assert ck.adapters["s0"].equal(_weights(1))
    assert _same(ck.optimizer_states["t0"], _adam_state(0))
    # nothing in a checkpoint is a pickle
    assert not [p for p in ck.path.rglob("*") if p.suffix in (".pt", ".pkl", ".bin")]


def test_a_loaded_optimizer_state_restores_adamw(tmp_path):
    root = tmp_path / "ck"
    checkpoint.save_checkpoint(root, 1, {"a": _weights(0)}, {"a": _adam_state(5)}, {"members": []})
    state = checkpoint.load_latest(root).optimizer_states["a"]
    params = [torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(2))]
    opt = torch.optim.AdamW(params, lr=1.0)
    opt.load_state_dict(state)
    assert opt.param_groups[0]["betas"] == (0.8, 0.95) and opt.param_groups[0]["lr"] == 1e-3
    assert torch.equal(opt.state[params[0]]["exp_avg"], _adam_state(5)["state"][0]["exp_avg"])
