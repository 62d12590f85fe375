"""`populora plan`'s largest population per GPU: pure arithmetic over the plan (milliseconds), and the
command's line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from populora.config import load_config
from populora.plan import plan, plan_inputs
from populora.plan.memory import GIB, adapters_optimizer_bytes, trainer_bytes
from populora.plan.population import largest_population, population_costs

ROOT = Path(__file__).resolve().parents[1]


def _inputs(*overrides):
    return plan_inputs(load_config(ROOT / "configs" / "4t4s-7b.yaml", list(overrides)))


def test_the_largest_population_fits_and_one_more_does_not():
    p = _inputs()
    fit = largest_population(p, 80.0)
    assert fit.largest > 8  # the preset's own 8 fit, with room to spare
    assert plan(p.with_(adapters=fit.largest, fused_members=fit.largest), 80.0).fits
    assert not plan(p.with_(adapters=fit.largest + 1, fused_members=fit.largest + 1), 80.0).fits
    assert largest_population(p, 141.0).largest > fit.largest  # an H200 holds more
    assert largest_population(p, 30.0).largest == 0  # the shared part alone does not fit


def test_per_member_and_shared_costs_add_up_to_the_plan():
    p = _inputs()
    per, shared = population_costs(p, 80.0)
    for n in (2, 5, 11):
        peak = plan(p.with_(adapters=n, fused_members=n), 80.0, with_fixes=False).peak_gib
        assert abs(peak - (shared + n * per)) < 1e-6
    # a member's adapter with its float32 masters and AdamW moments is the bulk of its cost
    one = adapters_optimizer_bytes(p.with_(adapters=1)) / GIB
    assert one <= per < 2 * one


def test_a_fused_pass_holds_every_members_gradients():
    fused, sequential = _inputs(), _inputs("rl.update_strategy=sequential")
    assert fused.fused_members == 8 and sequential.fused_members == 1
    grads = fused.adapter_params * fused.ad
    assert trainer_bytes(fused) - trainer_bytes(sequential) >= 7 * grads
    assert largest_population(sequential, 80.0).largest >= largest_population(fused, 80.0).largest


def test_populora_plan_prints_the_largest_population():
    out = subprocess.run([sys.executable, "-m", "populora.cli", "plan", "--config", str(ROOT / "configs" / "4t4s-7b.yaml"),
                          "--gpu-gib", "80"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("largest population on one 80 GiB GPU: ") and "GiB per member" in last and "shared" in last


@pytest.mark.parametrize("preset,members,trained", [("16t16s-7b", 32, 4), ("32t32s-7b", 64, 8)])
def test_the_node_presets_plan_one_rank_of_eight_and_fit_80_gib(preset, members, trained, capsys):
    """Every rank holds every member's bf16 weights, and the masters and AdamW moments of its own share."""
    from populora.plan import check_plan
    from populora.plan.memory import adapters_optimizer_bytes, host_masters_bytes

    cfg = load_config(ROOT / "configs" / f"{preset}.yaml")
    result = check_plan(cfg, 80.0)
    p = result.inputs
    assert (p.ranks, p.adapters, p.trained_here, p.fused_members) == (8, members, trained, trained) and result.fits
    assert adapters_optimizer_bytes(p) == p.adapter_params * (members * 2 + trained * (4 + 8))
    assert host_masters_bytes(p) == p.adapter_params * 4 * (members - trained)
    assert result.details["lora_slots"] == members  # a slot for every member: no swapping
    assert not check_plan(cfg, 80.0, ranks=1).fits  # one GPU cannot hold them (`populora train` refuses it)
    from populora.cli import main

    path = str(ROOT / "configs" / f"{preset}.yaml")
    assert main(["plan", path] if preset.startswith("32") else ["plan", "--config", path]) == 0  # both forms
    out = capsys.readouterr().out
    assert f"on one rank of 8, each 80 GiB GPU: {members} members, {trained} trained per rank" in out
    assert f"({members} slots for {members} members: no swapping)" in out
    assert "largest population on 8 GPUs of 80 GiB: " in out


def test_plan_without_a_preset_says_how_to_give_one(capsys):
    from populora.cli import main

    assert main(["plan", "selfplay.steps=2"]) == 2
    assert "populora plan: no preset: give its YAML" in capsys.readouterr().err


def test_the_plan_says_when_vllm_swaps_adapters():
    from populora.plan import check_plan

    cfg = load_config(ROOT / "configs" / "32t32s-7b.yaml", ["policy.vllm.max_loras=16"])
    plan16 = check_plan(cfg, 80.0)
    assert plan16.details["lora_slots"] == 16
    assert "16 slots for 64 members: a generate call that names more than 16 members swaps" in plan16.engine.what
    assert "published files" in plan16.engine.what  # the host cache (32) holds fewer than 64
    full = check_plan(load_config(ROOT / "configs" / "32t32s-7b.yaml"), 80.0)
    assert full.items["engine"] == plan16.items["engine"]  # the share is the share: slots give way to KV cache
    assert plan16.details["kv_cache_tokens"] > full.details["kv_cache_tokens"]
