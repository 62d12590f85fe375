"""`populora eval --backend vllm` against `--backend hf` on the real vLLM engine (its CPU build here).

Same runs, benchmarks, items and token budgets through both engines, greedy and float32 on both:
every generation record (base model and every adapter, item by item) must be the same text, with
the same finish reason and token count, and the verdicts and scores must be equal. The adapters are
made strong on purpose (random B with std 0.08, rank 16, not the preset default, in two runs): each
changes the base's greedy text on every item and the adapters' texts differ from each other, so a
request served with the wrong adapter (vLLM 0.32's CPU LoRA ops gave base rows the last slot's
adapter) or with a wrong LoRA scale would show up as a different text. The test asserts that strength
first, otherwise equal texts would prove nothing.

Each `populora eval` runs in a subprocess, as a user runs it (vLLM run inside the pytest process
changes process-wide state: environment, ``torch.set_num_threads``, registered torch ops, and then
failed to start after other tests had run there). On vLLM's CPU build its engine runs inside that
subprocess (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: it starts faster); about 60 s on 2 cores. With a CUDA build of vLLM both engines run float32 on the GPU.
Skipped only when vLLM is not installed, and then not with ``POPULORA_REQUIRE_VLLM=1`` (a missing vLLM
fails the test there). Needs the benchmark files, as the other end-to-end evaluation tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest
from test_eval_e2e import DATA, _budgets  # tests/ is on sys.path (as for conftest)

MODEL = "smollm2-135m"
BENCHES = ("humaneval_plus", "gsm8k")  # one code and one math benchmark
LIMIT = 2
NEW_TOKENS = 24
B_STD = 0.08  # measured: std 0.05 at rank 8 left some base texts unchanged; 0.08 at rank 16 changes every item
COMPARED = ("item_id", "prompt", "completion", "finish_reason", "completion_tokens", "template",
            "max_new_tokens", "stop")


def require_vllm() -> None:
    """Skip when vLLM is missing, unless POPULORA_REQUIRE_VLLM=1: then a missing vLLM is a failure."""
    if os.environ.get("POPULORA_REQUIRE_VLLM") == "1":
        try:
            import vllm  # noqa: F401
        except ImportError as e:
            pytest.fail(f"POPULORA_REQUIRE_VLLM=1 but vLLM cannot be imported ({e}); run `make setup-vllm`")
    else:
        pytest.importorskip("vllm", reason="vLLM is not installed (`make setup-vllm` installs its CPU build)")


def strong_runs(root: Path) -> list[Path]:
    """Two runs on SmolLM2-135M: ``pop`` (t0, s0) and ``single`` (b0), rank 16 (one rank: the HF engine
    serves one uniform rank)."""
    from eval.runner.engine import make_engine
    from eval.runner.runs import init_run
    from eval.runner.settings import EvalSettings
    from populora.policy.config import PolicyConfig

    probe = make_engine(EvalSettings(policy=PolicyConfig(model=MODEL)), [])
    shapes = probe.module_shapes()
    probe.close()
    init_run(root / "pop", shapes, [("t0", "teacher"), ("s0", "student")], rank=16, alpha=32.0, seed=11,
             b_std=B_STD, base_model=MODEL)
    init_run(root / "single", shapes, [("b0", "baseline")], rank=16, alpha=32.0, seed=12, b_std=B_STD,
             base_model=MODEL)
    return [root / "pop", root / "single"]


def generations(workdir: Path) -> dict[str, dict[str, list[dict]]]:
    """``{adapter key: {benchmark: [record, ...]}}`` from the merged generation files."""
    out: dict[str, dict[str, list[dict]]] = {}
    for path in sorted((workdir / "merged").glob("*/*.jsonl")):
        out.setdefault(path.parent.name, {})[path.stem] = [json.loads(line) for line in path.read_text().splitlines()]
    return out


def verdicts(workdir: Path) -> dict[str, list[dict]]:
    return {f"{p.parent.name}/{p.stem}": [json.loads(line) for line in p.read_text().splitlines()]
            for p in sorted((workdir / "verdicts").glob("*/*.jsonl"))}


@pytest.mark.slow
def test_vllm_backend_generates_what_the_hf_backend_generates(tmp_path):
    require_vllm()
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # the engine in the eval's process: starts faster
    runs = strong_runs(tmp_path / "runs")
    budgets = [a for a in _budgets(NEW_TOKENS) if a.split("=")[1] in BENCHES]
    common = [sys.executable, "-m", "populora.cli", "eval", "--runs", *map(str, runs), "--benchmarks", ",".join(BENCHES), "--limit", str(LIMIT),
              "--model", MODEL, "--dtype", "float32", "--data-dir", str(DATA), "--cache-dir", str(tmp_path / "cache"),
              "--policy", "vllm.enforce_eager=true", "--policy", f"vllm.adapter_dir={tmp_path / 'lora'}", *budgets]
    for backend in ("hf", "vllm"):
        done = subprocess.run([*common, "--backend", backend, "--workdir", str(tmp_path / backend)], env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{backend}: {done.stderr[-3000:]}"
    hf, vl = generations(tmp_path / "hf"), generations(tmp_path / "vllm")
    keys = {"base", "pop__t0", "pop__s0", "single__b0"}
    assert set(hf) == set(vl) == keys
    for gens in (hf, vl):
        assert all(set(gens[k]) == set(BENCHES) and all(len(gens[k][b]) == LIMIT for b in BENCHES) for k in keys)

    # the adapters are strong: each changes the base's greedy text on every item, and no two agree
    def texts(key):
        return [r["completion"] for b in BENCHES for r in hf[key][b]]

    adapters = sorted(keys - {"base"})
    for a in adapters:
        same = [i for i, (x, y) in enumerate(zip(texts(a), texts("base"))) if x == y]
        assert not same, f"adapter {a} leaves the base's greedy text unchanged on items {same}: too weak to test"
    for a, b in combinations(adapters, 2):
        same = sum(x == y for x, y in zip(texts(a), texts(b)))
        assert same <= LIMIT * len(BENCHES) // 2, f"adapters {a} and {b} agree on {same} items: too alike to test"

    # item by item, every field the engine decides is the same
    mismatches = []
    for key in sorted(keys):
        for bench in BENCHES:
            for r_hf, r_vl in zip(hf[key][bench], vl[key][bench]):
                diff = {f: (r_hf[f], r_vl[f]) for f in COMPARED if r_hf[f] != r_vl[f]}
                if diff:
                    mismatches.append(f"{key}/{bench}/{r_hf['item_id']}: " + "; ".join(
                        f"{f}: hf {a!r} vs vllm {b!r}" for f, (a, b) in diff.items()))
    assert not mismatches, "vLLM and HF generations differ:\n" + "\n".join(mismatches)

    # hence the same verdicts and scores, and the vLLM run really went through vLLM
    assert verdicts(tmp_path / "hf") == verdicts(tmp_path / "vllm")
    s_hf, s_vl = (json.loads((tmp_path / b / "scores.json").read_text()) for b in ("hf", "vllm"))
    assert s_hf["rows"] == s_vl["rows"] and {r["key"] for r in s_hf["rows"]} == keys
    assert (s_hf["provenance"]["backend"], s_vl["provenance"]["backend"]) == ("hf", "vllm")
