"""The project stands alone: the benchmark test sets ship with it (provenance checked file by file), the
only data a test may skip for is the documented download, and nothing in the project reads a path
outside its own tree except documented, user-given locations."""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import tomllib

from eval.benchmarks import BENCHMARKS, DOWNLOADS, PACKAGED_DIR, load_items

REPO = Path(__file__).resolve().parent.parent
PROVENANCE = json.loads((PACKAGED_DIR / "provenance.json").read_text())


def test_every_shipped_file_has_its_provenance_and_checksum():
    listed = {f["file"]: f for f in PROVENANCE["files"]}
    on_disk = {p.relative_to(PACKAGED_DIR).as_posix() for p in PACKAGED_DIR.rglob("*") if p.is_file()}
    assert on_disk - {"README.md", "provenance.json"} == set(listed)
    readme = (PACKAGED_DIR / "README.md").read_text()
    for rel, entry in listed.items():
        data = (PACKAGED_DIR / rel).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"] and len(data) == entry["bytes"], rel
        assert set(entry["source"]) == {"repository", "commit", "path"} and re.fullmatch(r"[0-9a-f]{40}", entry["source"]["commit"])
        assert entry["licence"] and entry["version"] and entry["sha256"] in readme
        spec = BENCHMARKS[entry["benchmark"]]  # the loader's registry agrees with the provenance
        assert (spec.relpath, spec.sha256, spec.version) == (rel, entry["sha256"], entry["version"])


def test_every_benchmark_but_the_downloads_is_shipped_and_loads():
    shipped = {f["benchmark"]: f["items"] for f in PROVENANCE["files"]}
    assert set(shipped) | set(DOWNLOADS) == set(BENCHMARKS) and not set(shipped) & set(DOWNLOADS)
    for name, count in shipped.items():
        assert len(load_items(name, data_dir=PACKAGED_DIR)) == count, name


def test_the_package_data_globs_take_every_shipped_file():
    """A wheel (the container image installs one) carries eval/data: pyproject's package-data globs
    match every file under it."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["eval"]
    for path in PACKAGED_DIR.rglob("*"):
        if path.is_file():
            rel = path.relative_to(REPO / "eval").as_posix()
            assert any(fnmatch.fnmatchcase(rel, g) and rel.count("/") == g.count("/") for g in globs), rel


def _download_marks() -> set[str]:
    names = set()
    for path in (REPO / "tests").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "download"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    return names


def test_the_only_data_a_test_may_skip_for_is_the_documented_download():
    # every documented download has a test that uses it when it is there, and no test names another
    assert _download_marks() == set(DOWNLOADS) == {"livecodebench"}
    docs = (REPO / "docs" / "evaluation.md").read_text()
    assert "eval.benchmarks.DOWNLOADS" in docs and 'download("livecodebench")' in docs
    # no test skips on its own for benchmark data (the old "benchmark files not in ..." skips)
    pattern = re.compile(r"skip(if)?\(.*(benchmark files|benchmark data|files missing|DATA\b)", re.I)
    offenders = [f"{p.name}:{n}" for p in (REPO / "tests").glob("*.py") if p.name != Path(__file__).name
                 for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []


@pytest.mark.download("livecodebench")
def test_the_downloaded_livecodebench_files_give_the_v5_window():
    """With the official files: the default window (release_v5, 2024-08-01 .. 2025-02-01) is the 279
    problems that QwQ's and AZR's "LiveCodeBench v5" evaluations list, each with test cases."""
    items = load_items("livecodebench")
    assert len(items) == 279 and len({it.item_id for it in items}) == 279
    assert all(it.meta["tests"] for it in items)


# -- nothing is read outside the tree -------------------------------------------------------------
OUTSIDE = re.compile(r"\.\./shared|shared/benchmarks")
UP = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?((?:\.parent)+|\.parents\[(\d+)\])")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [REPO / p for p in out if (REPO / p).is_file()]


def test_nothing_in_the_project_reaches_outside_its_tree():
    """No tracked source, script or config names a sibling folder of the checkout, and every path built
    from ``Path(__file__)`` stays inside the repository (the documented outside locations are user-given:
    $POPULORA_BENCHMARKS_DIR, --data-dir, model paths, /opt/populora/benchmarks in the image)."""
    suffixes = {".py", ".sh", ".yaml", ".yml", ".toml", ".def", ".cfg", ".txt", ""}
    problems = []
    for path in _tracked():
        if path.suffix not in suffixes or PACKAGED_DIR in path.parents:
            continue
        rel = path.relative_to(REPO)
        text = path.read_text(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line) and path != Path(__file__).resolve():
                problems.append(f"{rel}:{n}: {line.strip()}")
            for m in UP.finditer(line):
                levels = int(m.group(2)) + 1 if m.group(2) else m.group(1).count(".parent")
                if levels > len(rel.parts):  # above the repository root
                    problems.append(f"{rel}:{n}: {m.group(0)} leaves the repository")
    assert problems == []
