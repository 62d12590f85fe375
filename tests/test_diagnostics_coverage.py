"""CVT coverage archive: seeded centroids, fixed normalisation, monotone cumulative coverage."""

from types import SimpleNamespace

import numpy as np
import pytest

from populora.diagnostics.coverage import (
    DEFAULT_CELLS,
    DESCRIPTOR_BOUNDS,
    Coverage,
    descriptor,
    load_centroids,
    make_centroids,
    save_centroids,
)

PROGRAMS = [
    "def f(x):\n    return x\n",
    "def f(x):\n    if x:\n        return 1\n    return 0\n",
    "def f(a, b):\n    t = 0\n    for i in range(a):\n        if i > b and i % 2:\n            t += i\n    return t\n",
    "def f(s):\n    return ''.join(sorted(set(s)))\n",
    "def f(n):\n    r = []\n    while n:\n        n, d = divmod(n, 10)\n        r.append(d)\n    return r\n",
]


@pytest.fixture(scope="module")
def cov():
    return Coverage()  # the report's defaults: 256 cells, seed 0


def test_centroids_are_seeded(cov):
    assert cov.centroids.shape == (DEFAULT_CELLS, len(DESCRIPTOR_BOUNDS))
    assert np.array_equal(make_centroids(32, seed=3, samples=2000), make_centroids(32, seed=3, samples=2000))
    assert not np.array_equal(make_centroids(32, seed=3, samples=2000), make_centroids(32, seed=4, samples=2000))
    assert cov.centroids.min() >= 0 and cov.centroids.max() <= 1


def test_descriptor_uses_fixed_bounds():
    # identity: depth 3, cyclomatic 1, loc 2, variables 1 over bounds (2,20) (1,15) (1,30) (0,15)
    np.testing.assert_allclose(descriptor(PROGRAMS[0]), [1 / 18, 0.0, 1 / 29, 1 / 15])
    huge = "def f(x):\n" + "".join(f"    v{i} = x + {i}\n" for i in range(60)) + "    return x\n"
    d = descriptor(huge)
    assert d[2] == 1.0 and d[3] == 1.0  # clipped at the upper bound, not rescaled per run
    assert descriptor("def f(:") is None


def test_centroid_falls_in_its_own_cell(cov):
    idx = [0, 17, 200]
    assert cov.cells_of(cov.centroids[idx]).tolist() == idx


def test_coverage_is_cumulative_and_monotone(cov):
    tasks = [SimpleNamespace(step=s, program=p) for s, p in [(1, PROGRAMS[0]), (1, PROGRAMS[1]), (2, PROGRAMS[0]),
                                                            (3, PROGRAMS[2]), (3, PROGRAMS[3]), (5, PROGRAMS[4])]]
    s = cov.series(tasks, [1, 2, 3, 4, 5])
    assert all(b >= a for a, b in zip(s.coverage, s.coverage[1:]))
    assert s.new_cells[1] == 0 and s.new_cells[3] == 0  # step 2 repeats a program; step 4 has none
    n_cells = len(set(cov.cells_of(np.array([descriptor(p) for p in PROGRAMS])).tolist()))
    assert sum(s.new_cells) == n_cells == int((s.occupied > 0).sum())
    assert s.coverage[-1] == pytest.approx(n_cells / DEFAULT_CELLS)
    assert cov.archive_coverage() == pytest.approx(s.coverage[-1])  # ribs agrees
    assert s.programs == 6
    again = cov.series(tasks, [1, 2, 3, 4, 5])  # the archive is cleared between runs
    assert again.coverage == s.coverage


def test_centroids_round_trip(tmp_path, cov):
    save_centroids(tmp_path / "c.npy", cov.centroids)
    c = load_centroids(tmp_path / "c.npy")
    assert np.array_equal(c, cov.centroids)
    np.save(tmp_path / "bad.npy", np.zeros((4, 2)))
    with pytest.raises(ValueError, match="bad.npy"):
        load_centroids(tmp_path / "bad.npy")
