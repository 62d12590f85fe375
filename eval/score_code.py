"""Code scoring with EvalPlus (HumanEval+ / MBPP+), offline, in a subprocess.

``score_evalplus`` writes one EvalPlus ``samples.jsonl`` holding the solutions of every adapter
(EvalPlus accepts several samples per task; the i-th sample of a task is the i-th adapter), runs
``evalplus.evaluate`` once, and reads the per-sample ``base_status`` / ``plus_status`` back: base
pass@1 and plus pass@1 (plus = base and extra tests) per adapter.

EvalPlus quirks and how they are handled:

- It reads its data from ``HUMANEVAL_OVERRIDE_PATH`` / ``MBPP_OVERRIDE_PATH`` (uncompressed jsonl)
  at import time, so it runs in a child process whose environment points at a decompressed copy in
  the cache directory. When only a slice of the tasks is evaluated, the copy holds exactly those
  lines of the official file (byte for byte), because EvalPlus asserts a sample for every task.
- Its expected outputs are computed once per dataset hash and cached under ``XDG_CACHE_HOME``
  (pointed at the cache directory, so nothing is written to the user's home).
- ``evaluate`` starts a non-daemon "stuck checker" thread that sleeps 20 s between checks, so the
  process lingers ~20 s after the results are written. The child calls ``os._exit(0)`` right after
  ``evaluate`` returns (the results file is closed by then), which removes the linger; a timeout
  bounds the whole call.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from eval.benchmarks import BENCHMARKS, benchmark_path, sha256_file

_DATASET = {"humaneval_plus": ("humaneval", "HUMANEVAL_OVERRIDE_PATH"), "mbpp_plus": ("mbpp", "MBPP_OVERRIDE_PATH")}

_CHILD = """
import json, os, sys
from evalplus.evaluate import evaluate
evaluate(sys.argv[1], samples=sys.argv[2], parallel=int(sys.argv[3]), i_just_wanna_run=True,
         min_time_limit=float(sys.argv[4]), gt_time_limit_factor=float(sys.argv[5]))
os._exit(0)  # skip EvalPlus's non-daemon stuck-checker thread (sleeps 20 s)
"""


class EvalPlusError(RuntimeError):
    """The EvalPlus child failed or timed out; the message carries the tail of its output."""


def default_cache_dir() -> Path:
    root = os.environ.get("POPULORA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "populora")
    return Path(root) / "evalplus"


def sanitize_solution(code: str, entry_point: str) -> str:
    """EvalPlus's own sanitizer: keep the entry point, its dependencies and imports."""
    from evalplus.sanitize import sanitize

    return sanitize(code, entry_point)


def _dataset_copy(benchmark: str, task_ids: Sequence[str], cache_dir: Path, data_dir=None, path=None) -> Path:
    """Uncompressed lines of the official file for ``task_ids`` (all of them: the whole file)."""
    src = benchmark_path(benchmark, data_dir, path)
    digest = sha256_file(src)
    with gzip.open(src, "rb") as f:
        lines = [ln for ln in f.read().splitlines(keepends=True) if ln.strip()]
    wanted = set(task_ids)
    kept = [ln for ln in lines if json.loads(ln)["task_id"] in wanted]
    found = {json.loads(ln)["task_id"] for ln in kept}
    if found != wanted:
        raise ValueError(f"{src}: unknown task ids {sorted(wanted - found)[:5]}")
    import hashlib

    subset = hashlib.sha256("\n".join(sorted(wanted)).encode()).hexdigest()[:12]
    name = f"{benchmark}-{digest[:12]}-{'all' if len(kept) == len(lines) else subset}.jsonl"
    out = cache_dir / name
    if not out.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(b"".join(kept))
        os.replace(tmp, out)
    return out


def score_evalplus(
    benchmark: str,
    solutions: Mapping[str, Mapping[str, str]],
    *,
    cache_dir: str | os.PathLike | None = None,
    data_dir=None,
    path=None,
    parallel: int | None = None,
    min_time_limit: float = 1.0,
    gt_time_limit_factor: float = 4.0,
    max_memory_gb: float | None = None,
    timeout_s: float = 3600.0,
) -> dict[str, dict]:
    """Score ``solutions[adapter][task_id] = full program`` on ``benchmark``.

    Every adapter must cover the same task ids. Returns ``{adapter: {"base": pass@1, "plus":
    pass@1, "n": tasks, "items": {task_id: {"base": bool, "plus": bool}}}}``. ``min_time_limit``
    and ``gt_time_limit_factor`` are EvalPlus's per-test time limits (its defaults: 1 s and 4x the
    canonical solution's time); raise them on a loaded machine, where correct programs can time out.
    ``max_memory_gb`` sets EvalPlus's address-space limit per test process (its default: 4 GiB).
    That limit counts the virtual memory the test process inherits from its parent, which holds all
    expected outputs; Mbpp/255's largest plus input returns 1.7 million tuples (about 1 GB), so even
    the canonical solution fails under the default limit.
    """
    if benchmark not in _DATASET:
        raise ValueError(f"EvalPlus scores humaneval_plus and mbpp_plus, not {benchmark!r}")
    adapters = list(solutions)
    if not adapters:
        return {}
    task_ids = list(solutions[adapters[0]])
    for a in adapters[1:]:
        if set(solutions[a]) != set(task_ids):
            raise ValueError(f"{benchmark}: adapter {a!r} covers other tasks than {adapters[0]!r}")
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    data_copy = _dataset_copy(benchmark, task_ids, cache, data_dir, path)
    dataset, env_key = _DATASET[benchmark]
    with tempfile.TemporaryDirectory(prefix=f"evalplus-{benchmark}-") as tmp:
        samples = Path(tmp) / "samples.jsonl"
        with open(samples, "w") as f:
            for tid in task_ids:
                for a in adapters:
                    f.write(json.dumps({"task_id": tid, "solution": solutions[a][tid]}) + "\n")
        env = dict(os.environ, **{env_key: str(data_copy), "XDG_CACHE_HOME": str(cache / "xdg")})
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if max_memory_gb is not None:
            env["EVALPLUS_MAX_MEMORY_BYTES"] = str(int(max_memory_gb * 1024**3))
        cmd = [sys.executable, "-c", _CHILD, dataset, str(samples), str(parallel or os.cpu_count() or 1),
               str(min_time_limit), str(gt_time_limit_factor)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise EvalPlusError(f"evalplus on {benchmark} timed out after {timeout_s:.0f}s") from e
        result_file = Path(tmp) / "samples_eval_results.json"
        if proc.returncode != 0 or not result_file.is_file():
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise EvalPlusError(f"evalplus on {benchmark} failed (exit {proc.returncode}):\n{tail}")
        results = json.loads(result_file.read_text())["eval"]
    out = {a: {"items": {}} for a in adapters}
    for tid in task_ids:
        rows = results[tid]
        if len(rows) != len(adapters):
            raise EvalPlusError(f"evalplus returned {len(rows)} results for {tid}, expected {len(adapters)}")
        for a, row in zip(adapters, rows):
            base = row["base_status"] == "pass"
            out[a]["items"][tid] = {"base": base, "plus": base and row["plus_status"] == "pass"}
    for a in adapters:
        items = out[a]["items"]
        out[a].update(
            n=len(items),
            base=sum(v["base"] for v in items.values()) / len(items),
            plus=sum(v["plus"] for v in items.values()) / len(items),
        )
    return out


def canonical_solutions(benchmark: str, data_dir=None, path=None) -> dict[str, str]:
    """``{task_id: prompt + canonical_solution}`` (the self-check's reference programs)."""
    from eval.benchmarks import read_jsonl_rows

    assert BENCHMARKS[benchmark].kind == "code"
    rows = read_jsonl_rows(benchmark_path(benchmark, data_dir, path))
    return {r["task_id"]: r["prompt"] + r["canonical_solution"] for r in rows}
