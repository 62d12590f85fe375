"""The leaderboard's claims on synthetic sweeps (``eval_synthetic``: run directories with config.yaml
and score rows made by the pipeline's ``score_rows``): runs grouped by configuration across seeds,
across-seed means with t intervals (one seed: none), the paired comparison against the baseline as
``eval.stats.paired_test`` of the item matrices, the labels on every table (one seed: what its p-value
speaks of), and the files."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml
from eval_synthetic import make_sweep

from eval.leaderboard.claims import build_claims
from eval.leaderboard.page import read_scores, write_leaderboard
from eval.leaderboard.paired import ONE_SEED_MARK, ONE_SEED_NOTE, compare
from eval.leaderboard.seeds import adapter_scores, group_runs, identify_runs
from eval.stats import mean_interval, paired_test

CODE = ("humaneval_plus", "mbpp_plus", "livecodebench")


def test_runs_are_grouped_by_configuration_and_seed(tmp_path):
    runs = make_sweep(tmp_path, configs=(("4t4s", 8, 0.1), ("1t1s", 2, 0.0), ("baseline", 1, 0.0)), seeds=(0, 1),
                      benches=("gsm8k",), n_items=5)
    ids = identify_runs(runs)
    assert {(i.run, i.config, i.seed, i.baseline, i.source) for i in ids.values()} == {
        (f"{c}-s{s}", c, s, c == "baseline", "config.yaml") for c in ("4t4s", "1t1s", "baseline") for s in (0, 1)}
    groups = group_runs(ids)
    assert [(g.config, g.runs) for g in groups] == [("1t1s", ["1t1s-s0", "1t1s-s1"]), ("4t4s", ["4t4s-s0", "4t4s-s1"]),
                                                    ("baseline", ["baseline-s0", "baseline-s1"])]
    # a grid key that differs between runs is part of the configuration; the seed and the run name are not
    for run in runs:
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        cfg["rl"] = {"lr": 1e-5 if run.name.endswith("0") else 3e-5}
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    labels = {i.config for i in identify_runs(runs).values()}
    assert labels == {f"{c} lr={lr}" for c in ("4t4s", "1t1s", "baseline") for lr in (1e-5, 3e-5)}


def test_runs_without_a_config_are_read_from_their_names(tmp_path):
    for name, roles in (("pop-s3", ["teacher", "student"]), ("pop-s4", ["teacher", "student"]), ("adhoc", ["baseline"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "members.json").write_text(json.dumps([{"id": f"m{i}", "role": r, "adapter_dir": "x"}
                                                                  for i, r in enumerate(roles)]))
    ids = identify_runs([tmp_path / n for n in ("pop-s3", "pop-s4", "adhoc")])
    assert (ids["pop-s3"].config, ids["pop-s3"].seed, ids["pop-s3"].source) == ("pop", 3, "run name")
    assert (ids["adhoc"].config, ids["adhoc"].seed, ids["adhoc"].baseline) == ("adhoc", None, True)
    assert [g.seeds_text() for g in group_runs(ids)] == ["seeds 3, 4", "seed unknown"]


def test_two_runs_of_one_seed_are_refused(tmp_path):
    runs = make_sweep(tmp_path, configs=(("4t4s", 8, 0.1),), seeds=(0, 1), benches=("gsm8k",), n_items=3)
    (runs[1] / "config.yaml").write_text((runs[0] / "config.yaml").read_text())
    with pytest.raises(ValueError, match="configuration 4t4s: two runs share a seed"):
        group_runs(identify_runs(runs))


def _claims(tmp_path, **kw):
    runs = make_sweep(tmp_path, **kw)
    rows, provs = read_scores(runs)
    return runs, rows, build_claims(runs, rows, provs)


def test_across_seed_means_and_t_intervals(tmp_path):
    runs, rows, claims = _claims(tmp_path, benches=("gsm8k",), n_items=20)
    [(title, k, table), (title8, k8, table8)] = claims.seed_tables
    assert (title, k, title8, k8) == ("pass@1 (avg@8)", None, "pass@8", 8)
    by = {(r.config, r.stat): r for r in table}
    for stat, fn in (("population mean", np.mean), ("best member", np.max)):
        per_seed = [fn([r["value"] for r in rows if r["run"] == f"4t4s-s{s}" and r["role"] != "base"]) for s in (0, 1, 2)]
        want = mean_interval(per_seed, bounds=(0.0, 1.0))
        got = by[("4t4s", stat)].cells["gsm8k"]
        assert (got.mean, got.low, got.high, got.n) == pytest.approx((want.mean, want.low, want.high, 3))
    base_seeds = [next(r["value"] for r in rows if r["run"] == f"baseline-s{s}" and r["role"] == "baseline") for s in range(3)]
    assert by[("baseline", "baseline")].cells["gsm8k"].mean == pytest.approx(np.mean(base_seeds))
    assert by[("base", "base model")].cells["gsm8k"].low is None
    pass8 = {(r.config, r.stat): r for r in table8}[("4t4s", "population mean")].cells["gsm8k"].mean
    assert pass8 == pytest.approx(np.mean([np.mean([r["pass_at_k"]["8"] for r in rows if r["run"] == f"4t4s-s{s}"
                                                    and r["role"] != "base"]) for s in range(3)]))


def test_one_seed_has_no_interval_and_says_so(tmp_path):
    runs = make_sweep(tmp_path, seeds=(0,), benches=("gsm8k",), n_items=10)
    paths = write_leaderboard(runs, tmp_path / "out")
    md, page = paths["md"].read_text(), paths["html"].read_text()
    assert "| 4t4s population mean | 1 |" in md and "(1 seed)" in md and "One seed: no interval exists" in md
    assert "no interval" in page
    cells = json.loads(paths["claims_json"].read_text())["seed_tables"][0]["rows"][0]["cells"]["gsm8k"]
    assert cells["n"] == 1 and cells["low"] is None and cells["high"] is None
    # the paired test still runs, over items only, and every place that shows its p-value says it is about
    # these two runs on these items, not about the method
    paired = json.loads(paths["claims_json"].read_text())["paired"]["comparisons"]
    assert paired[0]["seeds_a"] == 1 and 0 < paired[0]["p_value"] <= 1
    assert paired[0]["about"] == "these runs on these items" and paired[0]["note"] == ONE_SEED_NOTE
    p = paired[0]["p_value"]
    p_cell = ("< 0.001" if p < 0.001 else f"{p:.3f}") + f" {ONE_SEED_MARK}"
    assert f"| {p_cell} | 10 | 1 / 1 | {ONE_SEED_NOTE} |" in md
    assert f"{ONE_SEED_MARK} one seed per arm: the p-value is about these two runs on these items only, not about the method" in md
    assert page.count("<tr class='one-seed'>") == len(paired) and f"<td>{p_cell}</td>" in page
    forest = page[page.index('<svg id="forest"'):page.index("</svg>")]
    assert f"gsm8k {ONE_SEED_MARK}</text>" in forest and 'stroke-dasharray="5 3"' in forest
    assert f"{ONE_SEED_MARK} (dashed) {ONE_SEED_NOTE}" in forest
    row = next(csv.DictReader(paths["paired_csv"].open()))
    assert (row["p about"], row["note"]) == ("these runs on these items", ONE_SEED_NOTE)


def test_with_two_seeds_nothing_is_marked_and_one_seed_of_one_arm_says_whose_spread_is_used(tmp_path):
    runs = make_sweep(tmp_path, seeds=(0, 1), benches=("gsm8k",), n_items=10)
    page = write_leaderboard(runs, tmp_path / "out")["html"].read_text()
    assert "one-seed" not in page and ONE_SEED_MARK not in page
    groups = group_runs(identify_runs(runs[:1] + runs[2:]))  # 4t4s seed 0 only, baseline seeds 0 and 1
    rows, _ = read_scores(runs[:1] + runs[2:])
    [c] = compare(groups, adapter_scores(rows), ["gsm8k"])
    assert (c.test.seeds_a, c.test.seeds_b, c.test.about_runs) == (1, 2, False)
    assert c.note == ("one population seed: the spread between runs is measured on the baseline's 2 seeds only, "
                      "assumed the same for both")


def test_paired_comparison_is_the_paired_test_of_the_item_matrices(tmp_path):
    runs, rows, claims = _claims(tmp_path, benches=(*CODE, "gsm8k"), n_items=15)
    scores = adapter_scores(rows)
    groups = group_runs(identify_runs(runs))
    comps = {c.column: c for c in compare(groups, scores, ["HumanEval+", "MBPP+", "LiveCodeBench", "gsm8k"])}
    assert set(comps) == {"HumanEval+", "MBPP+", "LiveCodeBench", "gsm8k", "code avg"}  # no math avg: 1 of 7 sets

    def matrix(config, role, col):
        out = []
        for s in range(3):
            rates = [r["solve_rates"] for r in rows if r["run"] == f"{config}-s{s}" and r["role"] in role and r["column"] == col]
            out.append([np.mean([x[f"q{i}"] for x in rates]) for i in sorted(range(15), key=lambda i: f"q{i}")])
        return np.array(out)

    a, b = matrix("4t4s", ("teacher", "student"), "gsm8k"), matrix("baseline", ("baseline",), "gsm8k")
    assert comps["gsm8k"].test == paired_test(a, b)
    code = paired_test(groups=[(matrix("4t4s", ("teacher", "student"), c), matrix("baseline", ("baseline",), c))
                               for c in ("HumanEval+", "MBPP+", "LiveCodeBench")])
    assert comps["code avg"].test == code
    assert comps["code avg"].test.difference == pytest.approx(np.mean([comps[c].test.difference
                                                                       for c in ("HumanEval+", "MBPP+", "LiveCodeBench")]))


def test_no_baseline_or_no_per_item_data_is_explained(tmp_path):
    runs, rows, claims = _claims(tmp_path, configs=(("4t4s", 8, 0.1),), seeds=(0, 1), benches=("gsm8k",), n_items=5)
    assert [(c.test, c.reason) for c in claims.comparisons] == [(None, "no baseline run on the leaderboard")]
    for r in rows:
        r.pop("solve_rates", None)
    groups = group_runs(identify_runs(runs))
    groups[0].baseline = True  # pretend: a baseline without per-item data
    comps = compare([*groups, group_runs(identify_runs(runs))[0]], adapter_scores(rows), ["gsm8k"])
    assert comps and all(c.test is None and "no per-item solve rates for gsm8k" in c.reason for c in comps)
    one = make_sweep(tmp_path / "one", seeds=(0,), benches=("gsm8k",), n_items=1)
    rows, provs = read_scores(one)
    [c] = build_claims(one, rows, provs).comparisons
    assert (c.test, c.reason) == (None, "one seed per arm and one item per benchmark: nothing to estimate a variance from")


@pytest.mark.slow
def test_leaderboard_of_three_seeds_per_configuration(tmp_path):
    runs = make_sweep(tmp_path, configs=(("4t4s", 8, 0.12), ("1t1s", 2, 0.0), ("baseline", 1, 0.0)),
                      benches=(*CODE, "gsm8k"), n_items=30)
    paths = write_leaderboard(runs, tmp_path / "out")
    for kind in ("md", "html", "csv", "png", "seeds_csv", "paired_csv", "passk_csv", "claims_json",
                 "passk_evalplus", "passk_livecodebench", "passk_math"):
        assert paths[kind].is_file(), kind
    assert paths["passk_evalplus"].read_bytes()[:4] == b"\x89PNG"
    md = paths["md"].read_text()
    for label in ("T=0.6, top-p 0.95, N=8 samples per item (sampling seed 0)", "4t4s: seeds 0, 1, 2 (3 runs)",
                  "HumanEval+ v0.1.10: 30 items", "LiveCodeBench code_generation_lite release_v5: 30 items "
                  "(contest dates 2024-08-01 to 2025-02-01, inclusive)", "GSM8K test (1319): 30 items",
                  "linear mixed model of items and runs, paired by item", "## Across seeds: pass@8 in %"):
        assert label in md, label
    captions = md.count("*decoding: T=0.6")
    assert captions >= 5  # the page, two across-seed tables, the paired table, pass@k, the per-run table
    paired = list(csv.DictReader(paths["paired_csv"].open()))
    big = next(r for r in paired if r["configuration"] == "4t4s" and r["column"] == "code avg")
    assert float(big["difference"]) > 0.05 and float(big["p"]) < 0.05 and float(big["ci95 low"]) > 0
    assert f"| 4t4s − baseline | code avg | {100 * float(big['difference']):+.1f} |" in md
    page = paths["html"].read_text()
    tested = sum(1 for r in paired if r["difference"])
    assert page.count("class=\"forest-row\"") == tested == 10  # 2 configurations x (4 benchmarks + code avg)
    for tid in ("id='seeds'", "id='seeds-pass8'", "id='paired'", "id=\"forest\"", "id='passk-evalplus'", 'id="leaderboard"'):
        assert tid in page
    data = json.loads(paths["claims_json"].read_text())
    curves = data["passk"]["evalplus"]["HumanEval+"]
    assert {c["kind"] for c in curves} == {"base model", "baseline", "population mean", "best member"}
    assert all(list(c["points"]) == [str(k) for k in range(1, 9)] for c in curves)


def test_the_cli_refuses_two_runs_of_one_seed_in_one_line(tmp_path, capsys):
    from populora.cli import main

    runs = make_sweep(tmp_path, configs=(("4t4s", 8, 0.1),), seeds=(0, 1), benches=("gsm8k",), n_items=3)
    (runs[1] / "config.yaml").write_text((runs[0] / "config.yaml").read_text())
    assert main(["leaderboard", *map(str, runs), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("populora leaderboard: configuration 4t4s: two runs share a seed") and "\n" not in err
    # a sweep whose seed lives under another key names it, and the sweep's leaderboard job passes it on
    for s, run in enumerate(runs):
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        cfg["rl"] = {"seed": s}
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["leaderboard", *map(str, runs), "--out", str(tmp_path / "out"), "--seed-key", "rl.seed"]) == 0
    from jobs.evaluate import LeaderboardJob

    job = LeaderboardJob(["a", "b"], "gsm8k", 2, "out", ["--samples", "8"], ["--seed-key", "rl.seed"])
    assert job.commands()[-1] == ["leaderboard", "a", "b", "--out", "out", "--seed-key", "rl.seed"]
    assert job.commands()[0][-2:] == ["--samples", "8"]
