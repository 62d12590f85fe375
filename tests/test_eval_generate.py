"""Multi-adapter generation store: mixed batches, resume after interruption (including a truncated
last line), shards and the merge that refuses incomplete or duplicated shards.

The backend here is a scripted test double (it answers ``<adapter>:<item>``) so that the storage
logic is tested exactly; the real HF backend runs in test_eval_e2e.py and the lm-eval test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.benchmarks import Item
from eval.runner.generate import (
    ShardError,
    generate_shard,
    load_merged,
    make_plan,
    merge,
    parse_shard,
    plan_units,
    read_records,
    shard_dir,
    shard_units,
    write_or_check_plan,
)
from eval.runner.runs import EvalAdapter
from populora.policy.base import Completion, GenerationResult


class ScriptedBackend:
    """Test double of PolicyBackend.generate: the completion names the adapter and the prompt."""

    tokenizer = None

    def __init__(self, fail_after: int | None = None):
        self.calls: list[list] = []
        self.fail_after = fail_after

    def generate(self, requests, sampling):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        assert sampling.greedy
        self.calls.append([(r.adapter, r.prompt) for r in requests])
        self.samplings = getattr(self, "samplings", []) + [sampling]
        return [GenerationResult([1], [Completion([1, 2], f"{r.adapter}|{r.prompt[:12]}", [0.0, 0.0], "length")])
                for r in requests]


def _items(n=5):
    return {"gsm8k": [Item("gsm8k", str(i), f"question {i}", str(i)) for i in range(n)],
            "aime24": [Item("aime24", f"a{i}", f"aime {i}", "1") for i in range(3)]}


def _adapters():
    return [EvalAdapter("r", "t0", "teacher", Path("/x/t0")), EvalAdapter("r", "s0", "student", Path("/x/s0")), EvalAdapter.base()]


def _gen(root, backend, shard=(0, 1), **kw):
    items, adapters = _items(), _adapters()
    budgets = {"gsm8k": 8, "aime24": 8}
    write_or_check_plan(root, make_plan(adapters, items, template="base", max_new_tokens=budgets, shards=shard[1],
                                        slice_size=2, model="scripted"))
    return generate_shard(backend, adapters, items, root, template="base", max_new_tokens=budgets, shard=shard,
                          slice_size=2, **kw)


def test_mixed_adapter_batches_and_base_as_none(tmp_path):
    be = ScriptedBackend()
    n = _gen(tmp_path, be, chunk_size=6)
    assert n == 3 * 5 + 3 * 3
    first = be.calls[0]
    assert {a for a, _ in first} == {"r__t0", "r__s0", None}  # one call serves every adapter and the base
    merge(tmp_path)
    recs = load_merged(tmp_path, "r__t0", "gsm8k")
    assert list(recs) == ["0", "1", "2", "3", "4"]
    r = recs["3"]
    assert r["completion"].startswith("r__t0|") and r["prompt"].startswith("Question: question 3")
    assert r["max_new_tokens"] == 8 and r["template"] == "base" and r["finish_reason"] == "length"
    assert load_merged(tmp_path, "base", "aime24")["a0"]["completion"].startswith("None|")


def test_a_refused_request_is_recorded_as_no_answer_not_a_crash(tmp_path):
    """A prompt over policy.max_prompt_tokens gets no completion (GenerationResult.refused): the item
    is stored with an empty completion and the reason, so it scores as wrong and is not generated again."""

    class Refusing(ScriptedBackend):
        def generate(self, requests, sampling):
            out = super().generate(requests, sampling)
            return [GenerationResult([1] * 9, [], refused="prompt_too_long:9") if "question 3" in r.prompt else o
                    for r, o in zip(requests, out)]

    _gen(tmp_path, Refusing())
    merge(tmp_path)
    rec = load_merged(tmp_path, "r__t0", "gsm8k")["3"]
    assert rec["completion"] == "" and rec["finish_reason"] == "refused:prompt_too_long:9"
    assert rec["completion_tokens"] == 0
    assert load_merged(tmp_path, "r__t0", "gsm8k")["2"]["completion"].startswith("r__t0|")


def test_resume_skips_done_items_and_drops_truncated_line(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _gen(tmp_path, ScriptedBackend(fail_after=2), chunk_size=4)
    f = shard_dir(tmp_path, 0, 1) / "r__t0" / "gsm8k.jsonl"
    before = read_records(f)
    assert 0 < len(before) < 5
    with open(f, "ab") as fh:  # a crash in the middle of writing a record
        fh.write(b'{"adapter": "r__t0", "item_id": "4", "compl')
    assert len(read_records(f)) == len(before)
    be = ScriptedBackend()
    _gen(tmp_path, be, chunk_size=4)
    done_before = 8  # two chunks of 4 were written before the interruption
    assert sum(len(c) for c in be.calls) == 3 * 5 + 3 * 3 - done_before
    merge(tmp_path)
    assert list(load_merged(tmp_path, "r__t0", "gsm8k")) == ["0", "1", "2", "3", "4"]
    # a second run generates nothing
    be2 = ScriptedBackend()
    assert _gen(tmp_path, be2) == 0 and be2.calls == []


def test_corrupt_middle_line_is_an_error(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text('{"item_id": "1"}\nnot json\n{"item_id": "2"}\n')
    with pytest.raises(ShardError, match="corrupt record"):
        read_records(f)


def test_shards_partition_the_units_and_merge(tmp_path):
    units = plan_units(["a", "b"], {"gsm8k": [str(i) for i in range(5)]}, slice_size=2)
    assert len(units) == 6
    parts = [shard_units(units, i, 4) for i in range(4)]
    assert {u for p in parts for u in p} == set(units) and sum(map(len, parts)) == 6
    for i in range(3):
        _gen(tmp_path, ScriptedBackend(), shard=(i, 3))
    merged = merge(tmp_path)
    assert sorted(p.name for p in merged.iterdir()) == ["base", "r__s0", "r__t0"]
    assert len(load_merged(tmp_path, "r__s0", "gsm8k")) == 5


def test_merge_refuses_incomplete_shards(tmp_path):
    _gen(tmp_path, ScriptedBackend(), shard=(0, 3))
    _gen(tmp_path, ScriptedBackend(), shard=(2, 3))
    with pytest.raises(ShardError, match="incomplete"):
        merge(tmp_path)


def test_merge_refuses_duplicates(tmp_path):
    for i in range(2):
        _gen(tmp_path, ScriptedBackend(), shard=(i, 2))
    a = shard_dir(tmp_path, 0, 2) / "r__t0" / "gsm8k.jsonl"
    b = shard_dir(tmp_path, 1, 2) / "r__t0" / "gsm8k.jsonl"
    rec = read_records(a)[0]
    with open(b, "a") as fh:
        fh.write(json.dumps({**rec, "shard": "1/2"}) + "\n")
    with pytest.raises(ShardError, match="duplicated"):
        merge(tmp_path)


def test_merge_refuses_foreign_shard_dirs(tmp_path):
    _gen(tmp_path, ScriptedBackend(), shard=(0, 1))
    (tmp_path / "shards" / "000-of-002").mkdir()
    with pytest.raises(ShardError, match="do not belong"):
        merge(tmp_path)


def test_plan_mismatch_is_refused(tmp_path):
    _gen(tmp_path, ScriptedBackend())
    items, adapters = _items(), _adapters()
    other = make_plan(adapters, items, template="base", max_new_tokens={"gsm8k": 99, "aime24": 8}, shards=1,
                      slice_size=2, model="scripted")
    with pytest.raises(ShardError, match="max_new_tokens"):
        write_or_check_plan(tmp_path, other)


def test_parse_shard():
    assert parse_shard("3/8") == (3, 8)
    for bad in ("8/8", "x", "1/0"):
        with pytest.raises(ValueError):
            parse_shard(bad)


def test_all_pending_requests_in_one_call_with_the_benchmarks_stops(tmp_path):
    """chunk_size 0 (the vLLM default): one generate call per benchmark holding every pending request."""
    be = ScriptedBackend()
    stops = {"gsm8k": ("\nQuestion:",), "aime24": ("</answer>",)}
    n = _gen(tmp_path, be, chunk_size=0, stops=stops, stop_ids=(7,))
    assert n == 3 * 5 + 3 * 3 and [len(c) for c in be.calls] == [15, 9]
    assert [s.stop for s in be.samplings] == [("\nQuestion:",), ("</answer>",)]
    # the policy's SamplingParams has no stop_token_ids field yet: the ids are not passed
    assert not hasattr(be.samplings[0], "stop_token_ids")
    rec = load_merged(tmp_path, "r__t0", "gsm8k") if merge(tmp_path) else None
    assert rec["0"]["stop"] == ["\nQuestion:"]


def test_stop_token_ids_reach_engines_that_take_them():
    from dataclasses import dataclass

    from eval.runner.generate import sampling_params

    @dataclass(frozen=True)
    class WithIds:
        temperature: float = 1.0
        max_new_tokens: int = 8
        stop: tuple = ()
        stop_token_ids: tuple = ()

    assert sampling_params(WithIds, 5, ["x"], [3]) == WithIds(0.0, 5, ("x",), (3,))


def test_engine_is_sized_for_the_adapters_rank(tmp_path):
    from eval.runner.engine import adapter_rank
    from eval.runner.runs import init_run

    [a] = init_run(tmp_path / "r", {"model.layers.0.self_attn.q_proj": (8, 8)}, [("s0", "student")], rank=64)
    assert adapter_rank(a) == 64  # not the preset default of 32
    (a.adapter_dir / "adapter_config.json").write_text('{"r": "big"}')
    with pytest.raises(ValueError, match="adapter_config.json: LoRA rank 'r' must be a positive integer"):
        adapter_rank(a)
