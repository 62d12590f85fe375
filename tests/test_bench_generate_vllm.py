"""`populora bench generate` measures the HF and vLLM engines in one run (tiny model, vLLM's CPU build).

The benchmark runs in a subprocess (the CLI): an in-process vLLM engine on CPU replaces
``torch.set_num_threads`` and seeds the global random state for the rest of its process, which must
not leak into the other tests. vLLM missing: skipped, unless ``POPULORA_REQUIRE_VLLM=1``, where it
fails (a CI job that installed vLLM must run this test).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import subprocess
import sys

import pytest

from populora.bench import generate as bench

ARMS = ("mixed", "one_adapter", "base", "per_adapter")


def _need_vllm() -> None:
    if os.environ.get("POPULORA_REQUIRE_VLLM") == "1":
        if importlib.util.find_spec("vllm") is None:
            pytest.fail("POPULORA_REQUIRE_VLLM=1 but vLLM is not installed (make setup-vllm)")
    else:
        pytest.importorskip("vllm")


def _float(cell: str) -> float:
    return float(cell.rstrip("x"))


def test_default_engines_include_vllm_when_installed():
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    args = p.parse_args([])  # what `populora bench all` passes
    expected = ["hf", "vllm"] if importlib.util.find_spec("vllm") is not None else ["hf"]
    assert bench.engines(args.engines) == expected
    assert bench.engines("vllm,hf") == ["vllm", "hf"]


@pytest.mark.slow
def test_bench_generate_runs_both_engines_and_vllm_matches_hf_greedy_tokens():
    _need_vllm()
    cmd = [sys.executable, "-m", "populora.cli", "bench", "generate", "--models", "tiny", "--engines", "hf,vllm",
           "--adapters", "2", "--prompts-per-adapter", "2", "--new-tokens", "8", "--repeats", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    lines = out.splitlines()
    assert not [ln for ln in lines if ln.startswith("warning:")], out

    # table 1: one row per engine, tokens/s of every arm and the three ratios, all finite and > 0
    header = next(ln for ln in lines if ln.startswith("model ") and "engine" in ln)
    for arm in ARMS:
        assert f"{arm} tok/s" in header
    for ratio in ("mixed/one_adapter", "mixed/base", "mixed/per_adapter"):
        assert ratio in header
    rows = {ln.split()[1]: ln.split() for ln in lines if ln.startswith("tiny ") and len(ln.split()) == 14}
    assert set(rows) == {"hf", "vllm"}, out
    for engine, cells in rows.items():
        assert cells[2] == "cpu" and cells[4] == "4" and cells[5] == "8", cells  # device, requests, new tokens
        figures = [_float(c) for c in cells[7:]]  # 4 arms' tok/s, then 3 ratios
        assert all(math.isfinite(f) and f > 0 for f in figures), (engine, cells)

    # table 2: vLLM/HF per arm, and the same greedy tokens for the same requests (float32 on CPU)
    cross = {ln.split()[1]: ln.split() for ln in lines if ln.startswith("tiny ") and ln.rstrip().endswith("requests")}
    assert set(cross) == set(ARMS), out
    for arm, cells in cross.items():
        assert math.isfinite(_float(cells[4])) and _float(cells[4]) > 0, cells  # vllm/hf
        assert cells[5] == "4/4", f"{arm}: vLLM's greedy tokens differ from HF's: {cells}"
    assert "runs through an all-zero adapter" in out  # the CPU base arm is said to pay the LoRA work

    # table 3 (HF only): the preallocated KV cache against transformers' DynamicCache, same tokens
    (kv,) = [ln.split() for ln in lines if ln.startswith("tiny ") and ln.split()[2:3] == ["preallocated"]]
    assert kv[1] == "hf" and _float(kv[5]) > 0 and kv[6] == "4/4", kv
    assert sum("multi-LoRA goal" in ln for ln in lines) == 2
