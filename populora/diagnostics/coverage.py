"""Coverage of program space: a CVT archive over behaviour descriptors of valid programs.

The paper's claim is that the population keeps discovering new kinds of programs while the single
agent stagnates. We measure it as in quality-diversity work: the descriptor space of programs is
cut into ``cells`` regions by a centroidal Voronoi tessellation (CVT, Vassiliades et al. 2018; the
``ribs`` library's ``CVTArchive`` and ``k_means_centroids``), and coverage is the fraction of
cells that hold at least one valid program. Coverage over time is cumulative: a cell counts from
the first step a program landed in it.

Descriptors are four complexity features (``complexity.py``), each mapped linearly onto [0, 1]
with the FIXED bounds of ``DESCRIPTOR_BOUNDS`` and clipped (a program deeper than the upper bound
lands in the boundary cells). The bounds are constants, not data-driven, so that two runs (or two
reports) place the same program in the same cell. The centroids are k-means centroids of
``samples`` uniform points, seeded (``seed``); with the same seed and library versions they are
identical, and ``save_centroids``/``load_centroids`` pin them exactly for comparisons made later
or elsewhere. Within one report every run uses the same archive.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from populora.tasks.complexity import program_complexity

# feature -> (lower, upper): program sizes typical of AZR-style tasks (a 1-30 line function);
# changing them changes every coverage figure: they are part of the metric's definition.
DESCRIPTOR_BOUNDS: dict[str, tuple[float, float]] = {
    "ast_depth": (2.0, 20.0),
    "cyclomatic": (1.0, 15.0),
    "loc": (1.0, 30.0),
    "variables": (0.0, 15.0),
}
DEFAULT_CELLS = 256
DEFAULT_SEED = 0
DEFAULT_SAMPLES = 20_000


def descriptor(program: str) -> np.ndarray | None:
    """The normalised descriptor of a program in [0, 1]^4 (None if it does not parse)."""
    c = program_complexity(program)
    if c is None:
        return None
    return normalise([getattr(c, f) for f in DESCRIPTOR_BOUNDS])


def normalise(values: Sequence[float]) -> np.ndarray:
    lo = np.array([b[0] for b in DESCRIPTOR_BOUNDS.values()])
    hi = np.array([b[1] for b in DESCRIPTOR_BOUNDS.values()])
    return np.clip((np.asarray(values, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)


def make_centroids(cells: int = DEFAULT_CELLS, seed: int = DEFAULT_SEED, samples: int = DEFAULT_SAMPLES) -> np.ndarray:
    """Seeded CVT centroids over the unit descriptor cube, ``[cells, 4]``."""
    from ribs.archives import k_means_centroids

    centroids, _ = k_means_centroids(centroids=cells, ranges=[(0.0, 1.0)] * len(DESCRIPTOR_BOUNDS),
                                     samples=samples, seed=seed)
    return np.asarray(centroids, dtype=np.float64)


def save_centroids(path: str | os.PathLike, centroids: np.ndarray) -> None:
    np.save(path, centroids)


def load_centroids(path: str | os.PathLike) -> np.ndarray:
    c = np.load(path)
    if c.ndim != 2 or c.shape[1] != len(DESCRIPTOR_BOUNDS):
        raise ValueError(f"{path}: centroids must have shape [cells, {len(DESCRIPTOR_BOUNDS)}], got {c.shape}")
    return c


@dataclass
class CoverageSeries:
    steps: list[int]
    coverage: list[float]  # cumulative fraction of occupied cells after each step
    new_cells: list[int]  # cells first occupied at that step
    occupied: np.ndarray  # final occupancy counts per cell
    programs: int


class Coverage:
    """A CVT archive (``ribs.archives.CVTArchive``) over program descriptors with fixed centroids."""

    def __init__(self, centroids: np.ndarray | None = None, cells: int = DEFAULT_CELLS, seed: int = DEFAULT_SEED):
        from ribs.archives import CVTArchive

        self.centroids = make_centroids(cells, seed) if centroids is None else np.asarray(centroids, dtype=np.float64)
        self.archive = CVTArchive(solution_dim=1, centroids=self.centroids,
                                  ranges=[(0.0, 1.0)] * self.centroids.shape[1], seed=seed)

    @property
    def cells(self) -> int:
        return len(self.centroids)

    def cells_of(self, descriptors: np.ndarray) -> np.ndarray:
        """The CVT cell (nearest centroid) of each descriptor row."""
        if len(descriptors) == 0:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self.archive.index_of(np.asarray(descriptors, dtype=np.float64)), dtype=np.int64)

    def series(self, tasks: Iterable, steps: Sequence[int]) -> CoverageSeries:
        """Cumulative coverage at each of ``steps`` from tasks with ``.step`` and ``.program``.

        The archive is cleared and then filled with every program (objective 0: coverage only
        counts occupied cells), so ``self.archive`` afterwards holds this run's final archive.
        """
        rows = [(t.step, d) for t in tasks if (d := descriptor(t.program)) is not None]
        self.archive.clear()
        cells = self.cells_of(np.array([d for _, d in rows])) if rows else np.zeros(0, dtype=np.int64)
        task_steps = np.array([s for s, _ in rows], dtype=np.int64)
        first_seen: dict[int, int] = {}
        for s, c in sorted(zip(task_steps.tolist(), cells.tolist())):
            first_seen.setdefault(c, s)
        out_cov, out_new = [], []
        for s in steps:
            out_cov.append(sum(1 for v in first_seen.values() if v <= s) / self.cells)
            out_new.append(sum(1 for v in first_seen.values() if v == s))
        if rows:
            measures = np.array([d for _, d in rows])
            self.archive.add(np.zeros((len(rows), 1)), np.zeros(len(rows)), measures)
        occupied = np.bincount(cells, minlength=self.cells)
        return CoverageSeries(list(steps), out_cov, out_new, occupied, len(rows))

    def archive_coverage(self) -> float:
        """Coverage of the archive as ribs counts it (equals the last value of ``series``)."""
        return float(self.archive.stats.coverage)
