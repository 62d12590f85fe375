"""LiveCodeBench ``code_generation_lite``: loader (official JSONL) and scorer (LCB semantics).

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

Scoring follows LiveCodeBench's ``testing_util``: a problem passes only if every test (public and
private) passes, each test with its own timeout (LCB: 6 s). ``stdin`` tests feed the input to the
program and compare stdout line by line after stripping, falling back to numeric comparison of
whitespace-separated tokens (exact ``Decimal`` equality, as LCB: ``2.5`` = ``2.5000``); ``functional`` tests parse each input line as JSON, call
``Solution().<func_name>(*args)`` and compare with the JSON output (tuples read as lists). Every
candidate runs in the project's sandbox (``populora.sandbox``), one process per test.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import os
import pickle
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path

from eval.benchmarks import ENV_DIR, BenchmarkDataError, Item, benchmarks_dir, sha256_file

# release_v5 default window: the one AZR and QwQ report as "LiveCodeBench v5" (2024-08-01 .. 2025-02-01).
DEFAULT_RELEASE = "release_v5"
DEFAULT_START = "2024-08-01"
DEFAULT_END = "2025-02-01"
TEST_TIMEOUT_S = 6.0
_FILES = {n: ("test.jsonl" if n == 1 else f"test{n}.jsonl") for n in range(1, 7)}

HOW_TO_GET = (
    "The official LiveCodeBench files with test cases are not available offline. On a machine with "
    "Hugging Face hub access run `huggingface-cli download livecodebench/code_generation_lite --repo-type "
    "dataset --local-dir DIR` (or copy test.jsonl .. test6.jsonl from an existing snapshot), then pass "
    f"`--data livecodebench=DIR` or put the files in ${ENV_DIR}/livecodebench/code_generation_lite/ "
    "(`populora eval --skip-missing` evaluates the other benchmarks without it)."
)

# LiveCodeBench prepends these imports to every candidate (its testing_util ``import_string``).
PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\n"
    "import math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport operator\n"
    "import io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n"
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
    """LiveCodeBench problems of ``release`` with ``start <= contest_date < end`` (ISO dates)."""
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
                    if (lo and date < lo) or (hi and date >= hi):
                        continue
                    tests = decode_test_cases(row["public_test_cases"], f"{where} public_test_cases")
                    tests += decode_test_cases(row["private_test_cases"], f"{where} private_test_cases")
                    meta = json.loads(row.get("metadata") or "{}")
                except (KeyError, ValueError) as e:
                    raise BenchmarkDataError(f"{where}: not in the code_generation_lite format ({e!r})") from e
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
                        },
                    )
                )
    if not items:
        raise BenchmarkDataError(f"LiveCodeBench {release} in {root}: no problem dated in [{start}, {end})")
    return items


def lcb_fingerprint(path: str | os.PathLike | None = None, release: str = DEFAULT_RELEASE) -> dict:
    root = lcb_dir(path)
    files = {f: sha256_file(root / f) for f in release_files(release) if (root / f).is_file()}
    return {"benchmark": "livecodebench", "version": f"code_generation_lite {release}", "files": files}


# -- scoring ---------------------------------------------------------------------------------------
@dataclass
class LCBResult:
    passed: bool
    reason: str  # "ok" or the first failure ("wrong_answer", "timeout", "runtime_error:ValueError", ...)
    tests_run: int


def test_programs(code: str, item: Item) -> list:
    """One sandbox ``Program`` per test case of ``item`` for the candidate ``code``."""
    from populora.sandbox import Program

    programs = []
    for t in item.meta["tests"]:
        if t["testtype"] == "stdin":
            programs.append(Program(PRELUDE + code, entry=None, stdin=t["input"]))
        else:
            harness = (
                f"{PRELUDE}{code}\n\n"
                "def __populora_lcb_call(input_text):\n"
                "    args = [json.loads(line) for line in input_text.split('\\n')]\n"
                f"    out = Solution().{item.meta['func_name']}(*args)\n"
                "    return json.dumps(list(out) if isinstance(out, tuple) else out)\n"
            )
            programs.append(Program(harness, entry="__populora_lcb_call", calls=(repr(t["input"]),)))
    return programs


def stdout_matches(got: str, expected: str) -> bool:
    """LCB's stdin comparison: stripped lines equal, else numerically equal token by token."""
    g = [ln.strip() for ln in got.strip().split("\n")]
    e = [ln.strip() for ln in expected.strip().split("\n")]
    if g == e:
        return True
    if len(g) != len(e):
        return False
    for gl, el in zip(g, e):
        if gl == el:
            continue
        gt, et = gl.split(), el.split()
        if len(gt) != len(et):
            return False
        try:
            if any(Decimal(a) != Decimal(b) for a, b in zip(gt, et)):
                return False
        except InvalidOperation:
            return False
    return True


def functional_matches(value_repr: str, expected: str) -> bool:
    try:
        got = json.loads(ast.literal_eval(value_repr))
        return got == json.loads(expected)
    except (ValueError, SyntaxError, json.JSONDecodeError):
        return False


def judge(item: Item, outcomes: Sequence) -> LCBResult:
    """Verdict for one problem from the sandbox outcomes of its tests (in test order)."""
    if not item.meta["tests"]:
        raise ValueError(f"livecodebench item {item.item_id}: no test cases")
    for n, (t, o) in enumerate(zip(item.meta["tests"], outcomes)):
        if not o.ok:
            return LCBResult(False, o.reason or o.status, n + 1)
        good = stdout_matches(o.stdout, t["output"]) if t["testtype"] == "stdin" else functional_matches(o.values[0], t["output"])
        if not good:
            return LCBResult(False, "wrong_answer", n + 1)
    if len(outcomes) < len(item.meta["tests"]):
        return LCBResult(False, "not_run", len(outcomes))
    return LCBResult(True, "ok", len(outcomes))


def score_livecodebench(candidates: Sequence[tuple[Item, str]], *, timeout_s: float = TEST_TIMEOUT_S, workers=None) -> list[LCBResult]:
    """Judge ``(item, code)`` pairs; all tests of all candidates go through one ``Sandbox.run_many``."""
    from populora.sandbox import Sandbox, SandboxLimits

    limits = SandboxLimits(
        wall_seconds=timeout_s, cpu_seconds=max(1, int(timeout_s)), memory_mb=2048,
        max_output_chars=10_000_000, max_stdout_chars=10_000_000,
    )
    # Two rounds, like LCB's early exit: every candidate's first test, then the remaining tests of
    # the candidates that passed it (a wrong program costs one execution, not one per test).
    all_programs = [test_programs(code, item) for item, code in candidates]
    outcomes: list[list] = [[] for _ in candidates]
    with Sandbox(limits=limits, workers=workers) as sb:
        for first_round in (True, False):
            batch, owners = [], []
            for k, progs in enumerate(all_programs):
                if first_round:
                    chosen = progs[:1]
                elif judge(candidates[k][0], outcomes[k]).reason == "not_run":  # no failure yet
                    chosen = progs[1:]
                else:
                    chosen = []
                batch.extend(chosen)
                owners.extend([k] * len(chosen))
            for k, o in zip(owners, sb.run_many(batch) if batch else []):
                outcomes[k].append(o)
    return [judge(item, outs) for (item, _), outs in zip(candidates, outcomes)]
