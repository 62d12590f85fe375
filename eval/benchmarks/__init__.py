"""The benchmarks: this package is their registry and loaders; its modules are the families that
own the benchmarks (``families``: the interface and its registry; ``evalplus``, ``livecodebench`` with
``lcb_harness``, ``math_answers``: one module per family) and the prompt templates (``prompts``).

Every benchmark is a ``BenchmarkSpec``: its group on the leaderboard (``code`` or ``math``), its
family (``evalplus``, ``livecodebench``, ``math``: the ``eval.benchmarks.families`` class that owns its prompts,
stop strings, extraction and scorer), its leaderboard columns, the file it is read from (relative
to the benchmarks directory, or a user-given path), the sha256 of the official file where known,
and how an item's gold answer is read. ``load_items(name)`` returns ``Item`` records in file
order; item ids are stable strings (the dataset's own id where it has one, else the line number).

The test sets ship with the package (``eval/data/``, one folder per benchmark; source, version,
sha256 and licence of every file in ``eval/data/provenance.json`` and ``eval/data/README.md``), so a
clone or an installed package evaluates with nothing beside it. A user's copy overrides them:
``--data-dir`` (``explicit``), else ``$POPULORA_BENCHMARKS_DIR``, else ``/opt/populora/benchmarks``
when something is bound there (a container job), else the shipped ``eval/data``; a benchmark whose
file is missing from a user's directory is read from the shipped copy. Each benchmark's file can also
be given explicitly (``paths={"gsm8k": "/data/gsm8k.jsonl"}``). LiveCodeBench lives in
:mod:`eval.benchmarks.livecodebench`: its test cases are too large to ship and are the one documented download
(``DOWNLOADS``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_DIR = "POPULORA_BENCHMARKS_DIR"
# The test sets shipped with the package (package data; provenance.json says where each file comes from).
PACKAGED_DIR = Path(__file__).resolve().parents[1] / "data"
# Where a container job finds a user's copy bound over the shipped one (docs/hpc.md); the image keeps
# the directory empty, so without a bind the shipped data is read.
IMAGE_DIR = Path("/opt/populora/benchmarks")
# Benchmarks whose data the project does not ship, with the reason and where the download is documented.
# Tests that need one are marked ``download("<name>")`` (tests/conftest.py) and skip, naming it, without it.
DOWNLOADS = {
    "livecodebench": "LiveCodeBench's test cases (about 4.4 GB, published only on the Hugging Face hub): "
                     "docs/evaluation.md, 'LiveCodeBench data'",
}


class BenchmarkDataError(RuntimeError):
    """A benchmark file is missing or malformed; the message names the file and how to fix it."""


@dataclass(frozen=True)
class Item:
    """One benchmark question.

    ``question`` is the text the prompt templates wrap (the EvalPlus ``prompt``, the problem
    statement of a math item). ``gold`` is the gold answer as LaTeX/plain text for math items and
    ``None`` for code items (those are scored by running tests). ``meta`` carries what scorers need
    (``entry_point`` for EvalPlus, test cases for LiveCodeBench, ``unit`` for OlympiadBench).
    """

    benchmark: str
    item_id: str
    question: str
    gold: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    group: str  # leaderboard group: "code" | "math"
    relpath: str  # inside the benchmarks directory
    version: str  # what the leaderboard's provenance prints
    sha256: str | None  # of the stored file, from the benchmarks README; None: not checked
    max_new_tokens: int  # default generation budget
    reader: Callable[[str, int, dict], Item] | None = None  # (benchmark, line_no, row) -> Item
    family: str = "math"  # the eval.benchmarks.families entry that owns prompts, stops, extraction and scoring
    columns: tuple[tuple[str, str], ...] = ()  # (metric, leaderboard column); default: (("acc", name),)
    average_metric: str = "acc"  # the metric that enters the group average
    options: Mapping[str, Any] = field(default_factory=dict)  # family-specific (EvalPlus dataset name)
    loader: str | None = None  # "module:function" for data that is not one JSONL file (LiveCodeBench)

    def column_names(self) -> tuple[tuple[str, str], ...]:
        return self.columns or ((self.average_metric, self.name),)

    def average_column(self) -> str:
        return dict(self.column_names())[self.average_metric]


# -- gold answers of the math sets ----------------------------------------------------------------
def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced.

    Hand-written (a dozen lines) because lm-eval's equivalent lives in a module that refuses to
    import unless antlr4 4.11 is installed, which conflicts with math-verify's antlr4 4.13.
    """
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def _clean_latex(s: str) -> str:
    """A gold answer without ``$`` delimiters or a trailing full stop (``"$(-\\infty, 0)$."``)."""
    return s.replace("$", "").strip().rstrip(".").strip()


def _aime(bench: str, i: int, row: dict) -> Item:
    # AIME answers are integers 0..999 stored as (sometimes zero-padded) strings: "025" -> "25".
    return Item(bench, str(row["id"]), row["problem"], str(int(str(row["answer"]).strip())))


def _amc(bench: str, i: int, row: dict) -> Item:
    value = float(row["answer"])  # stored as floats: 27.0
    gold = str(int(value)) if value.is_integer() else repr(value)
    return Item(bench, str(row["id"]), row["problem"], gold)


def _math500(bench: str, i: int, row: dict) -> Item:
    return Item(bench, row["unique_id"], row["problem"], row["answer"], {"subject": row["subject"], "level": row["level"]})


def _minerva(bench: str, i: int, row: dict) -> Item:
    gold = last_boxed(row["solution"])
    if gold is None:
        raise BenchmarkDataError(f"{bench} item idx={row.get('idx')}: no \\boxed{{}} answer in 'solution'")
    # one solution has a stray "$ $" inside its box (a transcription artifact): dropped
    return Item(bench, str(row["idx"]), row["problem"], _clean_latex(gold))


def _gsm8k(bench: str, i: int, row: dict) -> Item:
    if "####" not in row["answer"]:
        raise BenchmarkDataError(f"{bench} line {i + 1}: no '####' final answer in 'answer'")
    gold = row["answer"].split("####")[-1].strip().replace(",", "")  # "1,000" -> "1000"
    return Item(bench, str(i), row["question"], gold)


def _olympiad(bench: str, i: int, row: dict) -> Item:
    # final_answer is a list of LaTeX strings; answers of multiple-answer items share one string,
    # sometimes split by "$,$" ("$221,$8$"). The gold is the answers joined by ", " (math-verify
    # compares sets and tuples of values).
    answers = [_clean_latex(a) for a in row["final_answer"]]
    if row.get("is_multiple_answer"):
        answers = [re.sub(r"\s*,\s*", ", ", a) for a in answers]
    question = row["question"] if not row.get("context") else f"{row['context']}\n\n{row['question']}"
    meta = {"unit": row.get("unit"), "answer_type": row.get("answer_type"), "multiple": bool(row.get("is_multiple_answer"))}
    return Item(bench, str(row["id"]), question, ", ".join(answers), meta)


def _evalplus(bench: str, i: int, row: dict) -> Item:
    return Item(bench, row["task_id"], row["prompt"], None, {"entry_point": row["entry_point"]})


# -- the registry ---------------------------------------------------------------------------------
_HE = dict(family="evalplus", columns=(("base", "HumanEval"), ("plus", "HumanEval+")), average_metric="plus",
           options={"dataset": "humaneval"})
_MBPP = dict(family="evalplus", columns=(("base", "MBPP"), ("plus", "MBPP+")), average_metric="plus",
             options={"dataset": "mbpp"})
_LCB = dict(family="livecodebench", columns=(("pass", "LiveCodeBench"),), average_metric="pass",
            loader="eval.benchmarks.livecodebench:load_livecodebench")
BENCHMARKS: dict[str, BenchmarkSpec] = {
    s.name: s
    for s in (
        BenchmarkSpec("humaneval_plus", "code", "humaneval_plus/HumanEvalPlus-v0.1.10.jsonl.gz", "HumanEval+ v0.1.10",
                      "272720b90ac375502c8ed23cd791c2a93dfb22a911641a494da74a426c09f101", 768, _evalplus, **_HE),
        BenchmarkSpec("mbpp_plus", "code", "mbpp_plus/MbppPlus-v0.2.0.jsonl.gz", "MBPP+ v0.2.0",
                      "af43697e8791c4c149bdfd6b489d8b5412507551ac20e28a439f650b8225db63", 768, _evalplus, **_MBPP),
        BenchmarkSpec("livecodebench", "code", "livecodebench/code_generation_lite", "LiveCodeBench code_generation_lite",
                      None, 4096, None, **_LCB),
        BenchmarkSpec("aime24", "math", "aime24/test.jsonl", "AIME 2024 (30)",
                      "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac", 4096, _aime),
        BenchmarkSpec("aime25", "math", "aime25/test.jsonl", "AIME 2025 (30)",
                      "20c1ca392758d96bd1e28af15d9f30df5660257927cacc9eac7301c29f677d1a", 4096, _aime),
        BenchmarkSpec("amc23", "math", "amc23/test.jsonl", "AMC 2023 (40)",
                      "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4", 4096, _amc),
        BenchmarkSpec("math500", "math", "math500/test.jsonl", "MATH-500 (PRM800K split)",
                      "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132", 2048, _math500),
        BenchmarkSpec("minerva_math", "math", "minerva_math/test.jsonl", "Minerva OCWCourses (272)",
                      "0e656b430d3a0a1dab6aa853f453ba3805e28e2cabe4fc72486a897cc09d8ba2", 2048, _minerva),
        BenchmarkSpec("gsm8k", "math", "gsm8k/test.jsonl", "GSM8K test (1319)",
                      "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", 1024, _gsm8k),
        BenchmarkSpec("olympiadbench", "math", "olympiadbench/test.jsonl", "OlympiadBench OE_TO_maths_en_COMP (675)",
                      "bb8c1e38a16ea9eacb77530315a674d883f267fbff79183effc53681b4fcc416", 2048, _olympiad),
    )
}
CODE_BENCHMARKS = tuple(n for n, s in BENCHMARKS.items() if s.group == "code")
MATH_BENCHMARKS = tuple(n for n, s in BENCHMARKS.items() if s.group == "math")


def resolve_benchmarks(text: str) -> list[str]:
    """``"code,math"`` / ``"gsm8k,humaneval_plus"`` -> registry names (groups ``code``, ``math``, ``all``)."""
    out: list[str] = []
    for tok in (t.strip() for t in text.split(",") if t.strip()):
        names = {"code": CODE_BENCHMARKS, "math": MATH_BENCHMARKS, "all": tuple(BENCHMARKS)}.get(tok, (tok,))
        for n in names:
            if n not in BENCHMARKS:
                raise ValueError(f"--benchmarks: unknown benchmark {n!r} (known: code, math, all, {', '.join(BENCHMARKS)})")
            if n not in out:
                out.append(n)
    return out


def _has_entries(directory: Path) -> bool:
    try:
        return directory.is_dir() and any(directory.iterdir())
    except OSError:  # unreadable: nothing usable is bound there
        return False


def benchmarks_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The benchmarks directory: ``explicit``, else ``$POPULORA_BENCHMARKS_DIR``, else
    :data:`IMAGE_DIR` when a copy is bound there (a container job), else the shipped
    :data:`PACKAGED_DIR`."""
    if explicit:
        return Path(explicit)
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    return IMAGE_DIR if _has_entries(IMAGE_DIR) else PACKAGED_DIR


def benchmark_path(name: str, data_dir: str | os.PathLike | None = None, path: str | os.PathLike | None = None) -> Path:
    """Where ``name``'s file is: ``path``, else in the benchmarks directory, else the shipped copy;
    errors say which file is missing and how to provide it."""
    spec = BENCHMARKS[name]
    if path:
        p = Path(path)
    else:
        p = benchmarks_dir(data_dir) / spec.relpath
        if not p.exists() and (PACKAGED_DIR / spec.relpath).is_file():
            p = PACKAGED_DIR / spec.relpath  # shipped: a user's directory need not hold every benchmark
    if not p.exists():
        raise BenchmarkDataError(
            f"{spec.version}: file {p} not found. Put the official file there, set ${ENV_DIR} to the "
            f"directory that holds '{spec.relpath}', or pass its path explicitly (--data {name}=PATH)."
        )
    return p


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_checksum(name: str, path: Path) -> str:
    """sha256 of ``path``; raises when it differs from the official file's recorded checksum."""
    digest = sha256_file(path)
    expected = BENCHMARKS[name].sha256
    if expected and digest != expected:
        raise BenchmarkDataError(
            f"{path}: sha256 {digest} differs from the official {BENCHMARKS[name].version} file ({expected}); "
            "the file was modified or is another version (pass verify=False to use it anyway)"
        )
    return digest


def read_jsonl_rows(path: Path) -> list[dict]:
    """Rows of a ``.jsonl`` or ``.jsonl.gz`` file; a bad line names the file and line number."""
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise BenchmarkDataError(f"{path}: line {i + 1} is not valid JSON ({e})") from e
    return rows


def load_items(
    name: str,
    *,
    data_dir: str | os.PathLike | None = None,
    path: str | os.PathLike | None = None,
    verify: bool = True,
    **options: Any,
) -> list[Item]:
    """All items of benchmark ``name`` in file order (a spec with a ``loader`` reads its own layout)."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r} (known: {', '.join(BENCHMARKS)})")
    spec = BENCHMARKS[name]
    if spec.loader:
        return _resolve(spec.loader)(path or benchmarks_dir(data_dir) / spec.relpath, **options)
    p = benchmark_path(name, data_dir, path)
    if verify:
        verify_checksum(name, p)
    items = []
    for i, row in enumerate(read_jsonl_rows(p)):
        try:
            items.append(spec.reader(name, i, row))
        except KeyError as e:
            raise BenchmarkDataError(f"{p}: line {i + 1} lacks field {e.args[0]!r} expected for {spec.version}") from e
    ids = [it.item_id for it in items]
    if len(set(ids)) != len(ids):
        raise BenchmarkDataError(f"{p}: duplicated item ids")
    return items


def data_fingerprint(name: str, data_dir: str | os.PathLike | None = None, path: str | os.PathLike | None = None,
                     **options: Any) -> dict:
    """Version and sha256 of the file a benchmark was read from (for the leaderboard's provenance)."""
    spec = BENCHMARKS[name]
    if spec.loader:
        module = spec.loader.split(":")[0]
        return _resolve(f"{module}:fingerprint")(path or benchmarks_dir(data_dir) / spec.relpath, **options)
    p = benchmark_path(name, data_dir, path)
    return {"benchmark": name, "version": spec.version, "file": p.name, "sha256": sha256_file(p)}


def _resolve(ref: str):
    import importlib

    module, attr = ref.split(":")
    return getattr(importlib.import_module(module), attr)
