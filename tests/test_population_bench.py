"""`populora bench operators` runs end to end on a one-layer slice of the 7B shapes."""

from __future__ import annotations

import argparse
import re

import pytest

from populora.bench import operators as bench
from populora.population.operators import OPERATORS


def test_module_shapes_are_qwen25_7b():
    shapes = bench.module_shapes(28)
    assert len(shapes) == 28 * 7
    assert shapes["model.layers.0.self_attn.q_proj"] == (3584, 3584)
    assert shapes["model.layers.3.self_attn.k_proj"] == (3584, 512)
    assert shapes["model.layers.27.mlp.up_proj"] == (3584, 18944)
    assert shapes["model.layers.5.mlp.down_proj"] == (18944, 3584)
    # rank 32 on all of it: 80.7 M parameters per adapter
    assert sum(32 * (i + o) for i, o in shapes.values()) == 80_740_352


@pytest.mark.slow
def test_bench_prints_every_operator_and_the_side_by_side_figures(capsys):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    args = p.parse_args(["--layers", "1", "--repeats", "1", "--dtypes", "float32", "--threads", "1"])
    bench.run(args)
    out = capsys.readouterr().out
    for name in OPERATORS:
        assert re.search(rf"^\| {name} \| \w+ \| [0-9.]+ \| [0-9.]+ \| (yes|NO) \|$", out, re.M), name
    assert re.search(r"^\| k_proj \(512 x 3584\) \| [0-9.]+ \| [0-9.]+ \| \d+x \|", out, re.M)
    gauge = re.search(r"^\| same deltas, other gauge \| ([0-9.e+-]+) \| ([0-9.e+-]+) \|", out, re.M)
    assert float(gauge.group(1)) < 1e-4 and float(gauge.group(2)) > 0.5
