"""Checkpoints without a model: no pickle on load, old layouts read safely, damaged files named, rotation."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from populora.checkpoint import (
    LEGACY_OPTIMIZER,
    MANIFEST,
    OPTIMIZER,
    CheckpointError,
    _sha256,
    find_latest,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    set_aside,
)
from populora.policy.adapters import AdapterWeights

SHAPES = {"model.layers.0.self_attn.q_proj": (8, 8)}


def _payload(seed: int = 0):
    weights = AdapterWeights.init(SHAPES, 2, 4, b_init="random", seed=seed)
    a, b = weights.tensors["model.layers.0.self_attn.q_proj"]
    params = [torch.nn.Parameter(a.clone()), torch.nn.Parameter(b.clone())]
    opt = torch.optim.AdamW(params, lr=1e-3)
    (params[0].sum() + params[1].pow(2).sum()).backward()
    opt.step()
    return {"t0": weights}, {"t0": opt.state_dict()}, {"members": [], "buffers": {}}


def _rehash(ckpt: Path) -> None:
    """Rewrite the manifest for the files now present (what a crafted run directory would do)."""
    files = {p.relative_to(ckpt).as_posix(): {"sha256": _sha256(p), "bytes": p.stat().st_size}
             for p in sorted(ckpt.rglob("*")) if p.is_file() and p.name != MANIFEST}
    step = json.loads((ckpt / MANIFEST).read_text())["step"]
    (ckpt / MANIFEST).write_text(json.dumps({"step": step, "files": files}))


def test_round_trip_writes_no_pickle(tmp_path):
    adapters, opts, state = _payload()
    path = save_checkpoint(tmp_path, 3, adapters, opts, state)
    assert not (path / LEGACY_OPTIMIZER).exists()
    assert sorted(p.name for p in (path / OPTIMIZER).iterdir()) == ["t0.json", "t0.safetensors"]
    ck = load_checkpoint(path)
    assert ck.step == 3 and ck.adapters["t0"].equal(adapters["t0"])
    want, got = opts["t0"], ck.optimizer_states["t0"]
    assert got["param_groups"] == want["param_groups"]
    assert all(torch.equal(got["state"][i][k], v) for i, s in want["state"].items() for k, v in s.items())


def test_adapter_names_must_be_file_names(tmp_path):
    adapters, opts, state = _payload()
    with pytest.raises(CheckpointError, match="cannot be a file name"):
        save_checkpoint(tmp_path, 1, {"../x": adapters["t0"]}, {"../x": opts["t0"]}, state)


def _to_legacy(path: Path, obj) -> None:
    for f in (path / OPTIMIZER).iterdir():
        f.unlink()
    (path / OPTIMIZER).rmdir()
    torch.save(obj, path / LEGACY_OPTIMIZER)
    _rehash(path)


def test_legacy_optimizer_pt_of_plain_tensors_still_loads(tmp_path):
    adapters, opts, state = _payload()
    path = save_checkpoint(tmp_path, 2, adapters, opts, state)
    _to_legacy(path, opts)
    got = load_checkpoint(path).optimizer_states["t0"]
    assert torch.equal(got["state"][0]["exp_avg"], opts["t0"]["state"][0]["exp_avg"])


class _Payload:
    """A pickle that runs code when loaded with the full unpickler."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_crafted_optimizer_pickle_is_refused_and_never_runs(tmp_path):
    adapters, opts, state = _payload()
    path = save_checkpoint(tmp_path / "ck", 2, adapters, opts, state)
    marker = tmp_path / "code-ran"
    _to_legacy(path, {"t0": _Payload(str(marker))})
    with open(path / LEGACY_OPTIMIZER, "rb") as f:  # the file really is a code-running pickle
        assert b"mkdir" in f.read()
    with pytest.raises(CheckpointError, match=r"optimizer\.pt: refused"):
        load_checkpoint(path)
    assert not marker.exists()
    # and a resume scan skips it like any unusable checkpoint, naming why
    ck, skipped = find_latest(tmp_path / "ck")
    assert ck is None and "refused" in skipped[0].reason and not marker.exists()
    # the plain pickle module would have run it: the test's payload is real
    pickle.loads(pickle.dumps(_Payload(str(marker))))
    assert marker.exists()


@pytest.mark.parametrize(
    "manifest, match",
    [
        ("[]", "expected an object"),
        ('{"step": 1, "files": []}', "expected an object"),
        ('{"step": 1, "files": {"../../etc/passwd": {"bytes": 1, "sha256": "x"}}}', "outside the checkpoint"),
        ('{"step": 1, "files": {"state.json": 5}}', "needs 'bytes'"),
        ("\xff\xfe", "invalid JSON"),
    ],
)
def test_malformed_manifest_is_named(tmp_path, manifest, match):
    adapters, opts, state = _payload()
    path = save_checkpoint(tmp_path, 1, adapters, opts, state)
    (path / MANIFEST).write_bytes(manifest.encode("latin-1"))
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(path)


def test_state_json_that_is_not_an_object_is_named(tmp_path):
    adapters, opts, state = _payload()
    path = save_checkpoint(tmp_path, 1, adapters, opts, state)
    (path / "state.json").write_text("[1, 2]")
    _rehash(path)
    with pytest.raises(CheckpointError, match=r"state\.json: expected a JSON object"):
        load_checkpoint(path)


def test_find_latest_reports_unusable_and_set_aside_keeps_them(tmp_path):
    adapters, opts, state = _payload()
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, adapters, opts, state, keep=3)
    (tmp_path / "step_000003" / MANIFEST).unlink()
    ck, skipped = find_latest(tmp_path)
    assert ck.step == 2 and [u.step for u in skipped] == [3] and "missing" in skipped[0].reason
    moved = set_aside(skipped)
    assert [p.name for p in moved] == ["unusable-step_000003"] and moved[0].is_dir()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1, 2]
    # a second set-aside of the same step does not overwrite the first
    save_checkpoint(tmp_path, 3, adapters, opts, state, keep=3)
    (tmp_path / "step_000003" / MANIFEST).unlink()
    assert [p.name for p in set_aside(find_latest(tmp_path)[1])] == ["unusable-step_000003-1"]


def test_rotation_never_deletes_a_good_checkpoint_for_newer_unusable_ones(tmp_path):
    adapters, opts, state = _payload()
    for step in (4, 5, 6):
        save_checkpoint(tmp_path, step, adapters, opts, state, keep=3)
    for step in (5, 6):
        (tmp_path / f"step_{step:06d}" / MANIFEST).unlink()
    assert find_latest(tmp_path)[0].step == 4
    save_checkpoint(tmp_path, 5, adapters, opts, state, keep=2)  # the run resumed from 4 saves step 5
    steps = [s for s, _ in list_checkpoints(tmp_path)]
    assert 4 in steps and 5 in steps  # keep=2 counts checkpoints up to 5 only: 4 survives the stale 6
    assert find_latest(tmp_path)[0].step == 5
