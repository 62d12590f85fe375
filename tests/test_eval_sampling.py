"""Sampled evaluation (``populora eval --samples N``): the decoding record and its command-line
errors, every sample stored with its number and a stable seeding index (so chunking, shards and
resuming draw the same samples), merge that wants every sample, score rows with pass@1..N, avg@N and
per-item solve rates; and on the real `tiny` engine, that a re-run (another chunk size) gives the same
samples and another seed other ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.benchmarks import Item, benchmarks_dir
from eval.benchmarks.families import ScoredAnswer
from eval.runner.decoding import SAMPLED_TEMPERATURE, SAMPLED_TOP_P, Decoding, request_index
from eval.runner.generate import (
    ShardError,
    generate_shard,
    load_merged_samples,
    make_plan,
    merge,
    read_records,
    shard_dir,
    write_or_check_plan,
)
from eval.runner.pipeline import score_rows
from eval.runner.runs import EvalAdapter
from eval.stats import pass_at_k
from populora.cli import main
from populora.policy.base import Completion, GenerationResult

REPO = Path(__file__).resolve().parent.parent
DATA = benchmarks_dir()  # the shipped test sets (eval/data), or $POPULORA_BENCHMARKS_DIR
SAMPLED = Decoding(4, 0.7, 0.9, 11)


# -- the decoding ----------------------------------------------------------------------------------
def test_decoding_defaults_and_labels():
    assert Decoding.resolve() == Decoding(1, 0.0, 1.0, 0) and Decoding().greedy
    assert Decoding.resolve(8) == Decoding(8, SAMPLED_TEMPERATURE, SAMPLED_TOP_P, 0)
    assert Decoding.resolve(1, 0.8) == Decoding(1, 0.8, SAMPLED_TOP_P, 0)  # one sampled pass
    assert Decoding.resolve(8, 1.0, 1.0, 3) == Decoding(8, 1.0, 1.0, 3)
    assert Decoding().label() == "greedy (temperature 0), pass@1" and Decoding().plan_value() == "greedy"
    assert "temperature 0.6, top-p 0.95, 8 samples per item, seed 0" in Decoding.resolve(8).label()
    for d in (Decoding(), SAMPLED):
        assert Decoding.from_json(d.plan_value()) == d and Decoding.from_json(d.to_json()) == d
    assert Decoding.from_json("greedy (temperature 0), pass@1") == Decoding()


@pytest.mark.parametrize("kwargs, words", [
    (dict(samples=8, temperature=0.0), "--samples 8 with --temperature 0"),
    (dict(samples=0), "--samples must be a whole number >= 1"),
    (dict(samples=2, temperature=0.5, top_p=0.0), "--top-p must be in (0, 1]"),
    (dict(samples=1, temperature=0.0, top_p=0.9), "--top-p 0.9 with greedy decoding"),
    (dict(samples=2, temperature=-1.0), "--temperature must be a number >= 0"),
])
def test_bad_decodings_are_one_clear_line(kwargs, words):
    with pytest.raises(ValueError, match="^" + words.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        Decoding.resolve(**kwargs)


@pytest.mark.parametrize("argv, words", [
    (["--samples", "8", "--temperature", "0"], "--samples 8 with --temperature 0"),
    (["--top-p", "1.5"], "argument --top-p: must be in (0, 1]"),
    (["--samples", "0"], "argument --samples: must be >= 1"),
    (["--temperature", "hot"], "argument --temperature: must be a number >= 0"),
])
def test_cli_refuses_bad_sampling_flags_in_one_line(tmp_path, capsys, argv, words):
    try:
        rc = main(["eval", "--runs", str(tmp_path), *argv, "--workdir", str(tmp_path / "w")])
    except SystemExit as e:  # argparse
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "w").exists()


# -- generation with a scripted engine --------------------------------------------------------------
class SamplingBackend:
    """Test double: ``n`` completions per request, each naming the adapter, the request's seeding index
    and the sample number (what a seeded engine's draw depends on)."""

    tokenizer = None

    def __init__(self):
        self.calls = []

    def generate(self, requests, sampling):
        self.calls.append((len(requests), sampling))
        return [GenerationResult([1], [Completion([1] * (j + 1), f"{r.adapter}|{r.index}|{j}", [0.0] * (j + 1), "stop")
                                       for j in range(sampling.n)]) for r in requests]


def _items():
    return {"gsm8k": [Item("gsm8k", str(i), f"question {i}", str(i)) for i in range(3)]}


def _adapters():
    return [EvalAdapter("r", "t0", "teacher", Path("/x/t0")), EvalAdapter.base()]


def _gen(root, backend, decoding=SAMPLED, chunk_size=0):
    items, adapters = _items(), _adapters()
    write_or_check_plan(root, make_plan(adapters, items, template="base", max_new_tokens={"gsm8k": 8}, shards=1,
                                        slice_size=2, model="scripted", decoding=decoding))
    return generate_shard(backend, adapters, items, root, template="base", max_new_tokens={"gsm8k": 8},
                          slice_size=2, chunk_size=chunk_size, decoding=decoding)


def test_every_sample_is_stored_and_seeded_by_item_whatever_the_chunks(tmp_path):
    be = SamplingBackend()
    assert _gen(tmp_path / "a", be, chunk_size=0) == 2 * 3 * 4
    assert be.calls[0][0] == 6  # all samples of all adapters in one call: 6 requests of n = 4
    sp = be.calls[0][1]
    assert (sp.n, sp.temperature, sp.top_p, sp.seed) == (4, 0.7, 0.9, 11)
    merge(tmp_path / "a")
    recs = load_merged_samples(tmp_path / "a", "r__t0", "gsm8k")
    assert list(recs) == ["0", "1", "2"] and [r["sample"] for r in recs["1"]] == [0, 1, 2, 3]
    assert recs["1"][2]["completion"] == f"r__t0|{request_index('gsm8k', '1')}|2"
    base = load_merged_samples(tmp_path / "a", "base", "gsm8k")
    assert base["1"][2]["completion"] == f"None|{request_index('gsm8k', '1')}|2"  # same draw index for every adapter
    _gen(tmp_path / "b", SamplingBackend(), chunk_size=1)
    merge(tmp_path / "b")
    again = load_merged_samples(tmp_path / "b", "r__t0", "gsm8k")
    assert [[r["completion"] for r in v] for v in again.values()] == [[r["completion"] for r in v] for v in recs.values()]


def test_resume_keeps_the_samples_it_has_and_merge_wants_every_sample(tmp_path):
    _gen(tmp_path, SamplingBackend())
    f = shard_dir(tmp_path, 0, 1) / "r__t0" / "gsm8k.jsonl"
    lines = f.read_text().splitlines(keepends=True)
    f.write_text("".join(lines[:-2]) + lines[-2][:20])  # item 2 lost samples 2, 3 (one half-written)
    with pytest.raises(ShardError, match=r"r__t0/gsm8k lacks 1 of 3 items \(of 4 samples each\)"):
        merge(tmp_path)
    be = SamplingBackend()
    assert _gen(tmp_path, be) == 2  # only the two missing samples are added
    assert be.calls[0][0] == 1
    recs = read_records(f)
    assert sorted((r["item_id"], r["sample"]) for r in recs) == [(i, j) for i in "012" for j in range(4)]
    merge(tmp_path)


def test_a_changed_decoding_is_refused_naming_it(tmp_path):
    _gen(tmp_path, SamplingBackend())
    with pytest.raises(ShardError, match="decoding differs from this invocation"):
        _gen(tmp_path, SamplingBackend(), decoding=Decoding())


# -- scores ----------------------------------------------------------------------------------------
def test_score_rows_carry_pass_at_k_avg_and_solve_rates():
    verdicts = {"a": [True, False, False, False], "b": [False] * 4, "c": [True, True, True, False]}
    rows = score_rows(EvalAdapter("r", "t0", "teacher", Path("/x")), "gsm8k",
                      {i: [ScoredAnswer({"acc": v}) for v in vs] for i, vs in verdicts.items()})
    [row] = rows
    assert row["samples"] == 4 and row["n"] == 3
    assert row["value"] == row["avg_at_n"] == pytest.approx((1 + 0 + 3) / 12)
    assert row["solve_rates"] == {"a": 0.25, "b": 0.0, "c": 0.75}
    for k in range(1, 5):
        assert row["pass_at_k"][str(k)] == pytest.approx((pass_at_k(4, 1, k) + 0 + pass_at_k(4, 3, k)) / 3)
    greedy = score_rows(EvalAdapter("r", "t0", "teacher", Path("/x")), "gsm8k",
                        {"a": ScoredAnswer({"acc": True}), "b": ScoredAnswer({"acc": False})})[0]
    assert (greedy["value"], greedy["passed"], greedy["samples"], greedy["pass_at_k"]) == (0.5, 1, 1, {"1": 0.5})
    with pytest.raises(ValueError, match="different numbers of samples"):
        score_rows(EvalAdapter("r", "t0", "teacher", Path("/x")), "gsm8k",
                   {"a": [ScoredAnswer({"acc": True})], "b": [ScoredAnswer({"acc": True})] * 2})


# -- the real engine ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_sampled_eval_is_reproducible_and_gives_pass_at_k(tmp_path, capsys):
    from eval.runner.engine import make_engine
    from eval.runner.runs import init_run
    from eval.runner.settings import EvalSettings
    from populora.policy.config import PolicyConfig

    probe = make_engine(EvalSettings(policy=PolicyConfig(model="tiny")), [])
    shapes = probe.module_shapes()
    probe.close()
    init_run(tmp_path / "pop", shapes, [("t0", "teacher"), ("s0", "student")], seed=1)
    init_run(tmp_path / "single", shapes, [("b0", "baseline")], seed=2)
    common = ["eval", "--runs", str(tmp_path / "pop"), str(tmp_path / "single"), "--benchmarks", "gsm8k",
              "--limit", "2", "--samples", "3", "--max-new-tokens=gsm8k=6", "--data-dir", str(DATA)]

    def completions(work):
        return {k: [r["completion"] for r in read_records(work / "merged" / k / "gsm8k.jsonl")]
                for k in ("pop__t0", "pop__s0", "single__b0", "base")}

    assert main([*common, "--workdir", str(tmp_path / "w1")]) == 0
    out = capsys.readouterr().out
    assert "pass@1 = avg@3" in out and "pass@3" in out
    rows = json.loads((tmp_path / "pop" / "eval" / "scores.json").read_text())["rows"]
    assert {r["key"] for r in rows} == {"pop__t0", "pop__s0", "base"}
    assert all(set(r["pass_at_k"]) == {"1", "2", "3"} and set(r["solve_rates"]) == {"0", "1"} for r in rows)
    prov = json.loads((tmp_path / "pop" / "eval" / "scores.json").read_text())["provenance"]
    assert prov["sampling"]["samples"] == 3 and prov["sampling"]["temperature"] == SAMPLED_TEMPERATURE
    first = completions(tmp_path / "w1")
    assert all(len(v) == 2 * 3 for v in first.values())
    assert len(set(first["pop__t0"][:3])) > 1  # three different samples of item 0
    assert main([*common, "--workdir", str(tmp_path / "w2"), "--chunk-size", "1"]) == 0
    assert completions(tmp_path / "w2") == first  # the same samples, whatever the batches
    assert main([*common, "--workdir", str(tmp_path / "w3"), "--seed", "1"]) == 0
    assert completions(tmp_path / "w3") != first
    verdict = json.loads((tmp_path / "w1" / "verdicts" / "pop__s0" / "gsm8k.jsonl").read_text().splitlines()[5])
    assert (verdict["item_id"], verdict["sample"]) == ("1", 2) and "metrics" in verdict
