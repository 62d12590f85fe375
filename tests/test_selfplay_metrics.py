"""The step's metrics as typed values: what the stages made, flattened once under the stable names."""

from __future__ import annotations

import math

from populora.selfplay.budget import Usage
from populora.selfplay.metrics import StepMetrics, Stopwatch, last_rates, without_timings
from populora.selfplay.records import StageError


def test_row_flattens_every_part_under_its_stable_name():
    m = StepMetrics(
        seeding={"seeds/source": "handwritten"},
        errors=[StageError("validate", "OSError: down")],
        games={"match/t0/s0": 1.0},
        training={"t0": {"loss": 0.5, "nan_restored": 0}},
        rates={"teacher/code_o/valid_rate": 0.25},
        ratings={"t0": (26.0, 8.0)},
        population={"t9": (25.0, 8.3)},
        usage={"t0": Usage(sequences=6, proposals=6, optimizer_steps=1)},
        counts={"buffer/added": 2},
        timings={"generate": 1.5, "collectives": 0.0},
    )
    row = m.row()
    assert row["seeds/source"] == "handwritten"
    assert row["errors/validate"] == 1 and row["errors/validate_reason"] == "OSError: down"
    assert row["match/t0/s0"] == 1.0 and row["train/t0/loss"] == 0.5 and row["train/t0/nan_restored"] == 0
    assert row["member/t0/mu"] == 26.0 and row["member/t0/sigma"] == 8.0
    assert row["population/t9/mu"] == 25.0 and row["teacher/code_o/valid_rate"] == 0.25
    assert row["adapter/t0/sequences"] == 6 and row["adapter/t0/optimizer_steps"] == 1 and row["adapter/t0/rollouts"] == 0
    assert row["buffer/added"] == 2 and row["time/generate_s"] == 1.5 and row["time/collectives_s"] == 0.0
    assert "time/generate_s" not in without_timings(row)


def test_an_empty_step_has_no_metrics_and_errors_of_two_ranks_keep_the_last_reason():
    assert StepMetrics().row() == {}
    row = StepMetrics(errors=[StageError("check", "rank 0"), StageError("check", "rank 1")]).row()
    assert row == {"errors/check": 1, "errors/check_reason": "rank 1"}


def test_stage_error_of_an_exception_is_one_bounded_line():
    err = StageError.of("check", OSError("x" * 500))
    assert err.reason.startswith("OSError: x") and len(err.reason) == len("OSError: ") + 200


def test_stopwatch_times_named_phases_and_reports_each_to_the_display():
    seen = []
    watch = Stopwatch(seen.append)
    with watch.phase("propose", "generate"):
        pass
    with watch.phase("ratings", timing=""):
        pass
    with watch.phase("train"):
        pass
    assert seen == ["propose", "ratings", "train"]
    assert set(watch.seconds) == {"generate", "train"} and all(s >= 0 for s in watch.seconds.values())


def test_last_rates_keep_the_rates_only_and_nan_as_none():
    row = {"teacher/code_o/valid_rate": 0.5, "student/code_o/solve_rate": math.nan, "member/s0/solve_rate": 1.0,
           "teacher/code_o/reward_mean": 0.1, "time/step_s": 2.0}
    assert last_rates(row) == {"teacher/code_o/valid_rate": 0.5, "student/code_o/solve_rate": None,
                               "member/s0/solve_rate": 1.0}
