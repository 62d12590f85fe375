"""LiveCodeBench ``code_generation_lite``: loader (official JSONL), extraction and scorer (LCB semantics).

Official files (Hugging Face dataset ``livecodebench/code_generation_lite``): ``test.jsonl`` ...
``test6.jsonl``; ``release_vN`` is the union of ``test.jsonl`` .. ``testN.jsonl`` and ``vN`` is the
single file of release N. Each row has ``question_title, question_content, platform, question_id,
contest_id, contest_date, starter_code, difficulty, public_test_cases, private_test_cases,
metadata``. ``public_test_cases`` is a JSON list of ``{input, output, testtype}`` with
``testtype`` ``stdin`` or ``functional``; ``private_test_cases`` is the same list either as JSON
or as ``base64(zlib(pickle(json_text)))``. ``metadata`` is JSON with ``func_name`` for
functional (LeetCode) problems.

Private tests are decoded WITHOUT unpickling arbitrary objects: ``_LiteralUnpickler`` refuses every
global lookup, so a pickle can only build str/bytes/numbers/lists/dicts/tuples; anything that
names a class or a function (``os.system``, ``builtins.eval``) raises ``UnsafePickleError``.

The date window is LCB's: ``start <= contest_date <= end`` with both dates read as midnight
(``lcb_runner/benchmarks/code_generation.py``). A problem without any test is refused when the
data is loaded (before any generation); problems whose private tests are empty are listed in
``LCBData.warnings`` (scored on their public tests only, as LCB does).

Scoring follows ``lcb_runner/evaluation/testing_util.py`` (see ``eval/benchmarks/lcb_harness.py``, which runs
inside the project's sandbox, one process per candidate and problem, like LCB's worker process).
Extraction follows ``lcb_runner/utils/extraction_utils.py``: the code between the last two lines
that contain a fence, else nothing.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from eval.benchmarks import ENV_DIR, BenchmarkDataError, Item, benchmarks_dir, sha256_file
from eval.benchmarks.families import BenchmarkFamily, ScoredAnswer

# release_v5 default window: the one AZR and QwQ report as "LiveCodeBench v5" (2024-08-01 .. 2025-02-01).
DEFAULT_RELEASE = "release_v5"
DEFAULT_START = "2024-08-01"
DEFAULT_END = "2025-02-01"
TEST_TIMEOUT_S = 6  # LCB's default per-test alarm (seconds)
_FILES = {n: ("test.jsonl" if n == 1 else f"test{n}.jsonl") for n in range(1, 7)}

HOW_TO_GET = (
    "The official LiveCodeBench files with test cases are not available offline. On a machine with "
    "Hugging Face hub access run `huggingface-cli download livecodebench/code_generation_lite --repo-type "
    "dataset --local-dir DIR` (or copy test.jsonl .. test6.jsonl from an existing snapshot), then pass "
    f"`--data livecodebench=DIR` or put the files in ${ENV_DIR}/livecodebench/code_generation_lite/ "
    "(`populora eval --skip-missing` evaluates the other benchmarks without it)."
)

class UnsafePickleError(pickle.UnpicklingError):
    """A private-test blob tried to reference a Python global (class or function)."""


class _LiteralUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # noqa: D401 - pickle hook
        raise UnsafePickleError(f"refusing to unpickle global {module}.{name}: only plain data is allowed")

    def persistent_load(self, pid):
        raise UnsafePickleError("refusing persistent ids in a test-case pickle")


def decode_test_cases(blob: str, where: str = "private_test_cases") -> list[dict]:
    """Test cases from their JSON text or the official ``base64(zlib(pickle(json)))`` encoding."""
    try:
        cases = json.loads(blob)
    except (json.JSONDecodeError, TypeError):
        try:
            raw = zlib.decompress(base64.b64decode(blob.encode("ascii")))
        except (ValueError, zlib.error) as e:
            raise BenchmarkDataError(f"{where}: neither JSON nor base64+zlib data ({e})") from e
        obj = _LiteralUnpickler(io.BytesIO(raw)).load()
        if isinstance(obj, bytes):
            obj = obj.decode("utf-8")
        cases = json.loads(obj) if isinstance(obj, str) else obj
    if not isinstance(cases, list) or not all(
        isinstance(c, dict) and isinstance(c.get("input"), str) and isinstance(c.get("output"), str) for c in cases
    ):
        raise BenchmarkDataError(f"{where}: expected a list of {{input, output, testtype}} objects")
    for c in cases:
        if c.get("testtype") not in ("stdin", "functional"):
            raise BenchmarkDataError(f"{where}: unknown testtype {c.get('testtype')!r}")
    return cases


def release_files(release: str) -> list[str]:
    """``release_v5`` -> test.jsonl .. test5.jsonl; ``v5`` -> test5.jsonl."""
    if release.startswith("release_v") and release[9:].isdigit() and int(release[9:]) in _FILES:
        return [_FILES[n] for n in range(1, int(release[9:]) + 1)]
    if release.startswith("v") and release[1:].isdigit() and int(release[1:]) in _FILES:
        return [_FILES[int(release[1:])]]
    raise ValueError(f"--lcb-release: unknown release {release!r} (release_v1..release_v6 or v1..v6)")


def lcb_dir(path: str | os.PathLike | None = None) -> Path:
    return Path(path) if path else benchmarks_dir() / "livecodebench" / "code_generation_lite"


def load_livecodebench(
    path: str | os.PathLike | None = None,
    *,
    release: str = DEFAULT_RELEASE,
    start: str | None = DEFAULT_START,
    end: str | None = DEFAULT_END,
) -> list[Item]:
    """LiveCodeBench problems of ``release`` with ``start <= contest_date <= end`` (LCB's inclusive window).

    Raises ``BenchmarkDataError`` naming the file and line of a problem without tests. Problems with
    empty private tests get ``meta["private_tests"] == 0`` (see ``empty_private_warning``).
    """
    root = lcb_dir(path)
    files = [root / f for f in release_files(release)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise BenchmarkDataError(f"LiveCodeBench {release}: missing {', '.join(missing)}. {HOW_TO_GET}")
    lo = datetime.fromisoformat(start) if start else None
    hi = datetime.fromisoformat(end) if end else None
    items: list[Item] = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for n, line in enumerate(fh):
                if not line.strip():
                    continue
                where = f"{f}: line {n + 1}"
                try:
                    row = json.loads(line)
                    date = datetime.fromisoformat(row["contest_date"])
                    if (lo and date < lo) or (hi and date > hi):
                        continue
                    tests = decode_test_cases(row["public_test_cases"], f"{where} public_test_cases")
                    private = decode_test_cases(row["private_test_cases"], f"{where} private_test_cases")
                    tests += private
                    meta = json.loads(row.get("metadata") or "{}")
                except (KeyError, ValueError) as e:
                    raise BenchmarkDataError(f"{where}: not in the code_generation_lite format ({e!r})") from e
                if not tests:
                    raise BenchmarkDataError(f"{where}: problem {row.get('question_id')!r} has no test cases "
                                             "(public and private are empty); it cannot be scored")
                functional = any(t["testtype"] == "functional" for t in tests)
                if functional and not meta.get("func_name"):
                    raise BenchmarkDataError(f"{where}: functional tests but no metadata.func_name")
                items.append(
                    Item(
                        "livecodebench",
                        row["question_id"],
                        row["question_content"],
                        None,
                        {
                            "title": row.get("question_title", ""),
                            "platform": row.get("platform", ""),
                            "contest_date": row["contest_date"],
                            "difficulty": row.get("difficulty", ""),
                            "starter_code": row.get("starter_code", ""),
                            "func_name": meta.get("func_name"),
                            "tests": tests,
                            "private_tests": len(private),
                        },
                    )
                )
    if not items:
        raise BenchmarkDataError(f"LiveCodeBench {release} in {root}: no problem dated in [{start}, {end}]")
    return items


def fingerprint(path: str | os.PathLike | None = None, release: str = DEFAULT_RELEASE, start: str | None = None,
                end: str | None = None) -> dict:
    root = lcb_dir(path)
    files = {f: sha256_file(root / f) for f in release_files(release) if (root / f).is_file()}
    return {"benchmark": "livecodebench", "version": f"code_generation_lite {release}", "files": files,
            "window": [start, end]}


def empty_private_warning(items: Sequence[Item]) -> str | None:
    """The warning for problems whose private tests are empty (LCB scores them on public tests only)."""
    empty = [it.item_id for it in items if it.meta.get("private_tests") == 0]
    if not empty:
        return None
    return (f"livecodebench: {len(empty)} of {len(items)} problems have no private tests and are scored on their "
            f"public tests only (as LCB does): {', '.join(empty[:10])}{' ...' if len(empty) > 10 else ''}")


# -- extraction ------------------------------------------------------------------------------------
def extract_code(text: str) -> str:
    """LCB's rule: the lines between the last two lines that contain a fence; "" when there are fewer."""
    lines = text.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1 : fences[-1]])


# -- scoring ---------------------------------------------------------------------------------------
@dataclass
class LCBResult:
    passed: bool
    reason: str  # "ok", "wrong_answer", "timeout", "runtime_error", "no_code" or "crashed:..." (the sandbox)
    tests_run: int


_CODES = {-2: "wrong_answer", -3: "timeout", -4: "runtime_error"}
HARNESS = Path(__file__).with_name("lcb_harness.py")


def harness_program(code: str, item: Item, timeout_s: int):
    """One sandbox ``Program`` that grades ``code`` on every test of ``item`` (see ``eval/benchmarks/lcb_harness.py``)."""
    from populora.sandbox import Program

    tests = json.dumps([{"input": t["input"], "output": t["output"]} for t in item.meta["tests"]])
    fn = item.meta.get("func_name") if any(t["testtype"] == "functional" for t in item.meta["tests"]) else None
    call = f"{code!r}, {tests!r}, {fn!r}, {int(timeout_s)}"
    return Program(HARNESS.read_text(), entry="run_lcb_tests", calls=(call,))


def judge(item: Item, outcome) -> LCBResult:
    """ScoredAnswer from the harness's outcome: pass only when every test returned 1 (LCB: all > 0)."""
    if not outcome.ok:  # the sandbox's own limits: LCB's global timeout or a dead worker, all tests failed
        return LCBResult(False, outcome.reason or outcome.status, 0)
    import ast

    codes = ast.literal_eval(outcome.values[0])
    n = len(item.meta["tests"])
    if len(codes) == n and all(c == 1 for c in codes):
        return LCBResult(True, "ok", n)
    bad = next((c for c in codes if c != 1), None)
    return LCBResult(False, _CODES.get(bad, "not_run"), len(codes))


def score_livecodebench(candidates: Sequence[tuple[Item, str]], *, timeout_s: int = TEST_TIMEOUT_S,
                        workers=None) -> list[LCBResult]:
    """Judge ``(item, code)`` pairs, one sandboxed harness process per pair, all in one ``run_many``.

    The sandbox's wall limit is LCB's global timeout, ``(timeout + 1) * tests + 5`` seconds; memory is
    capped at 4 GiB (LCB's documented figure; its guard is called without a limit).
    """
    from populora.sandbox import Sandbox, SandboxLimits

    if not candidates:
        return []
    most_tests = max(len(it.meta["tests"]) for it, _ in candidates)
    wall = (int(timeout_s) + 1) * most_tests + 5
    limits = SandboxLimits(wall_seconds=wall, cpu_seconds=wall, memory_mb=4096,
                           max_output_chars=1_000_000, max_stdout_chars=100_000)
    # each distinct program of an item runs once (sampled evaluations repeat programs); copies share its result
    first: dict[tuple[str, str], int] = {}
    for k, (item, code) in enumerate(candidates):
        if code.strip():
            first.setdefault((item.item_id, code), k)
    runnable = [(k, harness_program(candidates[k][1], candidates[k][0], timeout_s)) for k in first.values()]
    results = [LCBResult(False, "no_code", 0) for _ in candidates]
    # LCB times each test with signal.alarm and imports what it likes: a sandbox that keeps the
    # clocks, timers and stat (every other layer of isolation stays; determinism is not scored here)
    with Sandbox(limits=limits, workers=workers, deterministic=False) as sb:
        outcomes = sb.run_many([p for _, p in runnable]) if runnable else []
    for (k, _), o in zip(runnable, outcomes):
        results[k] = judge(candidates[k][0], o)
    for k, (item, code) in enumerate(candidates):
        if code.strip():
            results[k] = results[first[(item.item_id, code)]]
    return results


# -- the benchmark family ----------------------------------------------------------------------------
class LiveCodeBenchFamily(BenchmarkFamily):
    """Prompts (LCB's generic question template), stops, LCB extraction and the LCB scorer."""

    name = "livecodebench"

    def prompt(self, item: Item, template: str, tokenizer=None) -> str:
        from eval.benchmarks.prompts import LCB_SYSTEM, chat_prompt, check_template, r1_prompt

        check_template(template)
        text = lcb_question(item)
        if template == "base":  # a completion prompt that opens the code block itself
            return f"{LCB_SYSTEM}\n\n{text}\n\n```python"
        if template == "r1":
            return r1_prompt(text)
        return chat_prompt([{"role": "system", "content": LCB_SYSTEM}, {"role": "user", "content": text}], tokenizer)

    def stop(self, spec, template: str, tokenizer=None) -> tuple[str, ...]:
        from eval.benchmarks.prompts import template_stops

        # base: the prompt opened the block; the first closing fence ends the answer
        return ("\n```",) if template == "base" else template_stops(template, tokenizer)

    def answer(self, item: Item, record: Mapping) -> str:
        from eval.benchmarks.prompts import answer_block, prompt_opens_fence

        text = answer_block(record["completion"], record["template"])
        if prompt_opens_fence(record["prompt"]):
            # the response began inside the prompt's open block; a generation that stopped (closing
            # fence or EOS) closed it, one cut by the token budget did not (LCB: no block, no code)
            text = "```python" + text
            if record.get("finish_reason") == "stop":
                text += "\n```"
        return extract_code(text)

    def answer_from_sample(self, item: Item, sample: Mapping) -> str:
        if "solution" in sample:
            return str(sample["solution"])
        return extract_code(str(sample["completion"]))

    def sample_id_field(self) -> tuple[str, ...]:
        return ("task_id", "question_id")

    def warnings(self, items: Sequence[Item]) -> list[str]:
        w = empty_private_warning(items)
        return [w] if w else []

    def score(self, spec, items: Sequence[Item], answers, settings) -> dict:
        pairs = [(who, it) for who in answers for it in items]
        res = score_livecodebench([(it, answers[who][it.item_id]) for who, it in pairs], timeout_s=settings.lcb_timeout_s)
        out: dict = {who: {} for who in answers}
        for (who, it), r in zip(pairs, res):
            out[who][it.item_id] = ScoredAnswer({"pass": r.passed}, r.reason, answers[who][it.item_id])
        return out


def lcb_question(item: Item) -> str:
    """LCB's generic question template (``get_generic_question_template_answer``), without its trailing blank line."""
    from eval.benchmarks.prompts import LCB_STDIN, LCB_WITH_STARTER

    starter = item.meta.get("starter_code") or ""
    if starter:
        fmt = f"### Format: {LCB_WITH_STARTER}\n```python\n{starter}\n```"
    else:
        fmt = f"### Format: {LCB_STDIN}\n```python\n# YOUR CODE HERE\n```"
    return f"### Question:\n{item.question}\n\n{fmt}\n\n### Answer: (use the provided format with backticks)"
