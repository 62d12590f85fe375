"""`populora bench distributed` runs end to end: one rank and two ranks (gloo), side by side."""

from __future__ import annotations

import argparse
import re

import pytest

from populora.bench import distributed as bench


@pytest.mark.slow
def test_bench_prints_step_phase_and_adapter_figures(capsys):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    args = p.parse_args(["--steps", "1", "--repeats", "1", "--teachers", "1", "--students", "1"])
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert re.match(r"config \S*tiny\.yaml, 1T\+1S, 1 timed steps x 1 runs each", out), out
    for world in (1, 2):  # a row per size: step seconds, collective seconds, their share
        assert re.search(rf"^{world}\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+%$", out, re.M), out
    assert re.search(r"^speed-up of 2 ranks over 1: [0-9.]+x per step$", out, re.M), out
    header = re.search(r"^median seconds per phase \(rank 0\):\s+(.*)$", out, re.M)
    assert header.group(1).split() == list(bench.PHASES)
    assert re.search(r"^  2 rank\(s\)(\s+[0-9.]+){6}$", out, re.M), out
    # the two sizes trained the same adapters (docs/distributed.md: within 1e-5), so they did equal work
    diff = re.search(r"^final adapters, 2 ranks vs 1: max \|difference\| = (\S+)$", out, re.M)
    assert diff and float(diff.group(1)) <= 1e-5, out
