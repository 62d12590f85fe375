"""Shared pytest setup: markers that skip what this machine cannot run (never fake it)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def _has_slurm() -> bool:
    if not shutil.which("sinfo"):
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except Exception:
        return False


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def chromium_binary() -> str | None:
    """Debian's headless Chromium (``apt-get install chromium``), if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing_download(name: str) -> str | None:
    """Why a test marked ``download(name)`` cannot run here (None: the data is there). Only the data
    listed in ``eval.benchmarks.DOWNLOADS`` may be missing; everything else ships with the project."""
    from eval.benchmarks import DOWNLOADS

    if name not in DOWNLOADS:
        raise pytest.UsageError(f"download({name!r}): not a documented download (eval.benchmarks.DOWNLOADS)")
    if name == "livecodebench":
        from eval.benchmarks.livecodebench import DEFAULT_RELEASE, lcb_dir, release_files

        if all((lcb_dir() / f).is_file() for f in release_files(DEFAULT_RELEASE)):
            return None
    return f"needs the download {name!r}, not shipped with the project: {DOWNLOADS[name]}"


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: needs headless Chromium (Debian package chromium); skipped elsewhere "
                                       "unless POPULORA_REQUIRE_BROWSER=1")
    config.addinivalue_line("markers", "download(name): needs data the project does not ship (eval.benchmarks.DOWNLOADS); "
                                       "skipped, naming the download, where it is absent")
    config.addinivalue_line("markers", "vllm: needs vLLM (the CUDA build, or the CPU build from `make setup-vllm`); "
                                       "skipped elsewhere unless POPULORA_REQUIRE_VLLM=1 (then a missing vLLM fails)")


def pytest_collection_modifyitems(config, items):
    cuda = _has_cuda()
    slurm = _has_slurm() or os.environ.get("POPULORA_REQUIRE_SLURM") == "1"
    browser = chromium_binary() is not None or os.environ.get("POPULORA_REQUIRE_BROWSER") == "1"
    vllm = _has_vllm() or os.environ.get("POPULORA_REQUIRE_VLLM") == "1"
    skip_vllm = pytest.mark.skip(reason="needs vLLM: `make setup-vllm` (marker: vllm)")
    skip_browser = pytest.mark.skip(reason="needs headless Chromium: apt-get install chromium (marker: browser)")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (marker: gpu)")
    skip_slurm = pytest.mark.skip(reason="needs the test cluster from slurm/testing/ (marker: slurm)")
    for item in items:
        for mark in item.iter_markers("download"):
            reason = missing_download(*mark.args)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
        if "gpu" in item.keywords and not cuda:
            item.add_marker(skip_gpu)
        if "slurm" in item.keywords and not slurm:
            item.add_marker(skip_slurm)
        if "browser" in item.keywords and not browser:
            item.add_marker(skip_browser)
        if "vllm" in item.keywords and not vllm:
            item.add_marker(skip_vllm)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the workers collect, the controller deals
        _longest_first(config.rootpath, items)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown, and unused, where it is not installed
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (``make test``), with the modules that use the test cluster as one unit.

    A test module is one unit of work, so that its module- and session-scoped fixtures (a trained run
    that several tests compare against) are built once, on one worker; every module on the test
    cluster shares one unit, as two jobs on its one node would wait for each other and time out.
    pytest-xdist's ``loadgroup`` with ``xdist_group`` markers would express this, but under pytest
    9.2 it groups nothing: it renames ``item._nodeid``, which pytest no longer reads, so a module's
    tests were spread over both workers (measured: 23 and 15 of one module's 38). The units go out in
    the order the workers collected them (``_longest_first``; with ``--no-loadscope-reorder``)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    root = config.rootpath

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(root, nodeid)

    return ModuleScheduling(config, log)


def _unit(root, nodeid: str) -> str:
    """The unit of work of a test: its module, or "slurm" for every module on the test cluster."""
    path = nodeid.split("::", 1)[0]
    return "slurm" if _uses_test_cluster(root, path) else path


@functools.cache
def _uses_test_cluster(root, path: str) -> bool:
    """Whether a test module is marked ``slurm`` (its ``pytestmark``), read from its source: the
    controller of pytest-xdist deals out test ids without collecting the tests."""
    try:
        return "pytest.mark.slurm" in (root / path).read_text(errors="replace")
    except OSError:
        return False


def _longest_first(root, items) -> None:
    """Order the tests by unit of work (``_unit``), longest first by the seconds recorded in
    ``tests/durations.json`` (``tests/record_durations.py``): the longest-processing-time rule, so
    that the longest unit does not start last and leave the other worker idle at the end, and the
    quick modules fill the last minutes. docs/benchmarks/ci.md has the measurements."""
    seconds = _recorded_seconds()
    cost: dict[str, float] = {}
    for path in {item.nodeid.split("::")[0] for item in items}:
        unit = _unit(root, path)
        cost[unit] = cost.get(unit, 0.0) + seconds.get(path, 0.0)
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-cost[_unit(root, item.nodeid)], _unit(root, item.nodeid), order[id(item)]))


def _recorded_seconds() -> dict[str, float]:
    """``tests/durations.json``: seconds per test module, as last measured (0 for a module not there)."""
    import json
    from pathlib import Path

    try:
        return {str(k): float(v) for k, v in json.loads(Path(__file__).with_name("durations.json").read_text()).items()}
    except (OSError, ValueError, AttributeError) as exc:
        print(f"tests/durations.json unreadable ({exc}): modules run in collection order")
        return {}


@pytest.fixture
def package_tree(tmp_path):
    """A private copy of the ``populora`` package (configs linked) for a test that adds a module to it.

    Returns ``(root, env)``: run subprocesses with ``cwd=root`` and ``env``, and they import the copy
    (the current directory and ``PYTHONPATH`` come before the editable install's finder). The checkout
    is never written, so a second test job on it never sees the added module.
    """
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    root = tmp_path / "tree"
    shutil.copytree(repo / "populora", root / "populora", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "configs").symlink_to(repo / "configs")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return root, env
