"""`populora bench scale`: its arithmetic on made-up timings, and the phases it counts (milliseconds)."""

from __future__ import annotations

import pytest

from populora.bench import scale

STAGE_PHASES = {p for phases in scale.STAGES.values() for p in phases}


def _run(members: int, per_member: dict[str, float], fixed: float = 0.0, steps: int = 2, block: int = 1) -> dict:
    """A size's result with every phase costing ``per_member[phase] x members`` (+ ``fixed``) each step."""
    step = {p: per_member.get(p, 0.001) * members + fixed for p in STAGE_PHASES}
    return {"members": members, "cpu": [dict(step) for _ in range(steps)], "wall": [dict(step) for _ in range(steps)],
            "block": block, "checkpoint_bytes": 1000 * members, "resume_s": 0.01 * members,
            "resume_cpu_s": 0.01 * members, "peak_rss_mb": 900.0}


def test_linear_stages_grow_1x_and_a_quadratic_one_is_named_worst():
    runs = {n: _run(n, {"train": 0.5, "propose": 0.2}) for n in (8, 64)}
    assert scale.growth(runs, "training") == pytest.approx(1.0)
    quadratic = {n: _run(n, {"train": 0.5}) for n in (8, 64)}
    for n, run in quadratic.items():  # evolution costing members^2 x 1 ms
        for s in run["cpu"]:
            s["evolve"] = 0.001 * n * n
    assert scale.growth(quadratic, "evolution") == pytest.approx(8.0)
    assert scale.worst_line(quadratic) == "per-member growth 8->64 members: evolution 8.00x"


def test_a_stage_under_one_percent_of_the_64_member_step_is_shown_not_judged():
    runs = {n: _run(n, {"train": 1.0}) for n in (8, 64)}
    for n, run in runs.items():
        for s in run["cpu"]:
            s["matchmaking"] = 1e-6 * n * n  # quadratic, and 0.006% of the step at 64
    assert "matchmaking" not in scale.judged(runs) and "training" in scale.judged(runs)
    assert scale.growth(runs, "matchmaking") == pytest.approx(8.0)
    assert scale.worst_line(runs).startswith("per-member growth 8->64 members: ") and "matchmaking" not in scale.worst_line(runs)
    table = "\n".join(scale.table(runs))
    assert "no (<1% of the step)" in table and "8->64" in table


def test_a_size_costs_the_median_over_blocks_of_the_mean_within_a_block():
    run = _run(8, {"train": 1.0}, steps=4, block=2)
    for s, v in zip(run["cpu"], (1.0, 3.0, 2.0, 100.0)):
        s["train"] = v
    assert scale.stage_costs(run)["training"] == pytest.approx((2.0 + 51.0) / 2)  # blocks (1, 3) and (2, 100)
    assert scale.block_steps(8, 32) == 4 and scale.block_steps(64, 32) == 1 and scale.block_steps(6, 32) == 6


def test_the_stage_clock_splits_cpu_time_by_phase():
    clock = scale.StageClock()
    clock.on_stage("train")
    sum(i * i for i in range(200_000))  # some CPU in "train"
    clock.on_stage("evolve")
    clock.close()
    assert clock.cpu["train"] > clock.cpu["evolve"] >= 0 and set(clock.wall) == {"train", "evolve"}


def test_every_phase_the_bench_counts_is_one_the_loop_reports():
    """The loop's progress hook names the phases (``Stopwatch.phase``); a renamed phase would fall out of
    its stage silently, so the bench's phases are checked against the loop's source."""
    import re

    loop = (scale.ROOT / "populora" / "selfplay" / "loop.py").read_text()
    reported = set(re.findall(r'watch\.phase\("([a-z_]+)"', loop))
    own = {"metrics_log", "checkpoint_save", "checkpoint_load"}  # timed by the bench around the step
    assert STAGE_PHASES - own <= reported and STAGE_PHASES & own == own
