"""HumanEval+ / MBPP+: the EvalPlus benchmark family (prompts, stops, extraction) and its scorer,
EvalPlus itself, offline, in a subprocess.

Program preparation (``prepare_program``): a candidate that already parses as a module and defines
the entry point at top level is scored as written, minus top-level statements that are not
definitions (test calls, prints, asserts); every definition is kept. Only a candidate that does not
parse or lacks the entry point goes through EvalPlus's sanitizer (which extracts the longest
parsable code from prose). Why: EvalPlus's sanitizer also drops top-level functions without
``return`` (a ``yield``-only helper, as in Mbpp/630's canonical solution), decorated functions and
``async def``, so a correct program fails with ``NameError``.

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

import ast
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from eval.benchmarks import BENCHMARKS, benchmark_path, sha256_file
from eval.benchmarks.families import BenchmarkFamily, ScoredAnswer


def evalplus_default_parallel() -> int:
    """EvalPlus's own default worker count (``evalplus.evaluate``: ``cpu_count() // 2``, at least 1)."""
    return max(1, (os.cpu_count() or 2) // 2)


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


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
                ast.AnnAssign, ast.AugAssign)


def _is_definition(node: ast.stmt) -> bool:
    if isinstance(node, _DEFINITIONS):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # docstrings
        return True
    # `if __name__ == "__main__":` never runs under EvalPlus (the program is not __main__): harmless
    return isinstance(node, ast.If) and ast.unparse(node.test).replace('"', "'") == "__name__ == '__main__'"


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def prepare_program(code: str, entry_point: str) -> tuple[str, tuple[str, ...]]:
    """The program EvalPlus runs for a candidate, and how it was obtained (see the module docstring)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is None or not _defines(tree, entry_point):
        return sanitize_solution(code, entry_point), ("sanitized",)
    dropped = [n for n in tree.body if not _is_definition(n)]
    if not dropped:
        return code, ()
    lines = code.split("\n")
    cut = set()
    for n in dropped:
        cut.update(range(n.lineno - 1, n.end_lineno))
    return "\n".join(line for i, line in enumerate(lines) if i not in cut), ("dropped_top_level_statements",)


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

    ``parallel``: EvalPlus's worker count (None: EvalPlus's own default, ``cpu_count // 2``).
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
    # each distinct program of a task runs once: the samples of a sampled evaluation (and adapters
    # that learned the same answer) repeat programs, whose verdicts are the same by construction
    distinct = {tid: list(dict.fromkeys(solutions[a][tid] for a in adapters)) for tid in task_ids}
    with tempfile.TemporaryDirectory(prefix=f"evalplus-{benchmark}-") as tmp:
        samples = Path(tmp) / "samples.jsonl"
        with open(samples, "w") as f:
            for tid in task_ids:
                for program in distinct[tid]:
                    f.write(json.dumps({"task_id": tid, "solution": program}) + "\n")
        env = dict(os.environ, **{env_key: str(data_copy), "XDG_CACHE_HOME": str(cache / "xdg")})
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if max_memory_gb is not None:
            env["EVALPLUS_MAX_MEMORY_BYTES"] = str(int(max_memory_gb * 1024**3))
        cmd = [sys.executable, "-c", _CHILD, dataset, str(samples), str(parallel or evalplus_default_parallel()),
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
        if len(rows) != len(distinct[tid]):
            raise EvalPlusError(f"evalplus returned {len(rows)} results for {tid}, expected {len(distinct[tid])}")
        verdicts = dict(zip(distinct[tid], rows))
        for a in adapters:
            row = verdicts[solutions[a][tid]]
            base = row["base_status"] == "pass"
            out[a]["items"][tid] = {"base": base, "plus": base and row["plus_status"] == "pass",
                                    "base_status": row["base_status"], "plus_status": row["plus_status"]}
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

    assert BENCHMARKS[benchmark].group == "code"
    rows = read_jsonl_rows(benchmark_path(benchmark, data_dir, path))
    return {r["task_id"]: r["prompt"] + r["canonical_solution"] for r in rows}


# -- the benchmark family ----------------------------------------------------------------------------
# EvalPlus's stop lists (evalplus 0.3.1, evalplus/provider/utility.py and provider/vllm.py)
EVALPLUS_EOS = ("<|endoftext|>", "<|endofmask|>", "</s>", "\nif __name__", "\ndef main(", "\nprint(")
DIRECT_COMPLETION_EOS = {"humaneval": ("\ndef ", "\nclass ", "\nimport ", "\nfrom ", "\nassert "),
                         "mbpp": ('\n"""', "\nassert")}
CHAT_EOS = ("\n```",)  # EvalPlus: "\n```\n"; without the newline, a closing fence followed by EOS stops too


class EvalPlusFamily(BenchmarkFamily):
    """HumanEval+ and MBPP+: EvalPlus's prompts and stop lists, extraction, EvalPlus scoring."""

    name = "evalplus"

    def prompt(self, item, template: str, tokenizer=None) -> str:
        from eval.benchmarks.prompts import (
            EVALPLUS_INSTRUCTION,
            EVALPLUS_RESPONSE,
            chat_prompt,
            check_template,
            r1_prompt,
        )

        check_template(template)
        if template == "base":
            return item.question.rstrip()  # EvalPlus continues the signature and docstring
        instruction = f"{EVALPLUS_INSTRUCTION}\n```\n{item.question.strip()}\n```"
        if template == "r1":
            return r1_prompt(instruction)
        return chat_prompt([{"role": "user", "content": instruction}], tokenizer) + EVALPLUS_RESPONSE + "\n```python"

    def stop(self, spec, template: str, tokenizer=None) -> tuple[str, ...]:
        from eval.benchmarks.prompts import template_stops

        if template == "base":
            return EVALPLUS_EOS + DIRECT_COMPLETION_EOS[spec.options["dataset"]]
        if template == "chat":
            return tuple(dict.fromkeys(EVALPLUS_EOS + CHAT_EOS + template_stops(template, tokenizer)))
        return template_stops(template, tokenizer)

    def answer(self, item, record) -> str:
        return solution_source(item, record["prompt"], record["completion"], record["template"])

    def answer_from_sample(self, item, sample) -> str:
        if "solution" in sample:
            return str(sample["solution"])
        return item.question + str(sample["completion"])  # EvalPlus: prompt + completion

    def score(self, spec, items, answers, settings) -> dict:
        programs, notes = {}, {}
        for who, per_item in answers.items():
            programs[who] = {}
            for it in items:
                programs[who][it.item_id], notes[(who, it.item_id)] = prepare_program(per_item[it.item_id], it.meta["entry_point"])
        res = score_evalplus(spec.name, programs, cache_dir=settings.cache_dir, data_dir=settings.data_dir,
                             path=settings.data_paths.get(spec.name), parallel=settings.parallel(),
                             min_time_limit=settings.evalplus_min_time_limit,
                             gt_time_limit_factor=settings.evalplus_gt_time_limit_factor,
                             max_memory_gb=settings.evalplus_max_memory_gb)
        out: dict = {}
        for who in answers:
            out[who] = {}
            for it in items:
                v = res[who]["items"][it.item_id]
                reason = "ok" if v["plus"] else (f"base:{v['base_status']}" if not v["base"] else f"plus:{v['plus_status']}")
                out[who][it.item_id] = ScoredAnswer({"base": v["base"], "plus": v["plus"]}, reason, programs[who][it.item_id],
                                               notes[(who, it.item_id)])
        return out


def solution_source(item, prompt: str, completion: str, template: str) -> str:
    """The candidate program of a generation record, before ``prepare_program``."""
    from eval.benchmarks.prompts import answer_block, prompt_opens_fence

    if template == "base":
        return prompt + completion  # the completion continues the function body
    if prompt_opens_fence(prompt) and template != "r1":
        return completion.split("```")[0].strip("\n")  # inside the prefilled block, up to its closing fence
    text = answer_block(completion, template)
    blocks = _FENCE.findall(text)
    return blocks[-1].strip("\n") if blocks else text.strip("\n")


_FENCE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)(?:```|$)", re.S)
