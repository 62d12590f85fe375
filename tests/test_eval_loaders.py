"""Benchmark loaders: the shipped files (counts, checksums, gold fields), clear errors, and the
LiveCodeBench loader on the toy fixture in the official format (including a refused malicious pickle)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import shutil
import zlib
from pathlib import Path

import pytest

from eval import benchmarks
from eval.benchmarks import (
    BENCHMARKS,
    ENV_DIR,
    PACKAGED_DIR,
    BenchmarkDataError,
    benchmark_path,
    benchmarks_dir,
    last_boxed,
    load_items,
    resolve_benchmarks,
)
from eval.benchmarks.livecodebench import (
    UnsafePickleError,
    decode_test_cases,
    load_livecodebench,
    release_files,
)

REPO = Path(__file__).resolve().parent.parent
DATA = benchmarks_dir()  # the shipped test sets (eval/data), or $POPULORA_BENCHMARKS_DIR
LCB_FIXTURE = REPO / "tests" / "fixtures" / "livecodebench"

COUNTS = {"humaneval_plus": 164, "mbpp_plus": 378, "aime24": 30, "aime25": 30, "amc23": 40, "math500": 500,
          "minerva_math": 272, "gsm8k": 1319, "olympiadbench": 675}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_every_shipped_file_loads_with_its_checksum(name):
    items = load_items(name, data_dir=DATA)  # verify=True: the sha256 of provenance.json
    assert len(items) == COUNTS[name]
    assert len({it.item_id for it in items}) == len(items)
    if BENCHMARKS[name].group == "math":
        assert all(it.gold and it.gold.strip() == it.gold for it in items)
        if name in ("minerva_math", "olympiadbench"):  # delimiters stripped (math500 has literal \$ amounts)
            assert all("$" not in it.gold for it in items)
    else:
        assert all(it.meta["entry_point"] in it.question for it in items)


def test_answer_fields_of_each_set():
    aime24 = {it.item_id: it.gold for it in load_items("aime24", data_dir=DATA)}
    assert aime24["60"] == "204"  # Aya's walk
    assert "25" in aime24.values()  # stored zero-padded as "025"
    assert not any(g.startswith("0") and g != "0" for g in aime24.values())
    amc = load_items("amc23", data_dir=DATA)
    assert amc[0].gold == "27"  # stored as the float 27.0
    gsm = load_items("gsm8k", data_dir=DATA)
    assert gsm[0].gold == "18" and all("," not in it.gold for it in gsm)  # after '####', "1,000" -> "1000"
    minerva = load_items("minerva_math", data_dir=DATA)
    assert minerva[0].gold == "1.6"  # \boxed{1.6} of the first solution
    oly = {it.item_id: it for it in load_items("olympiadbench", data_dir=DATA)}
    assert oly["1606"].gold == "2"
    multi = [it for it in oly.values() if it.meta["multiple"]]
    assert len(multi) == 94
    assert oly["2349"].gold == "221, 8"  # "$221,$8$": two answers
    assert any(it.meta["unit"] for it in oly.values())


def test_last_boxed_balances_braces():
    assert last_boxed(r"so \boxed{1} then \boxed{\frac{1}{2}} done") == r"\frac{1}{2}"
    assert last_boxed("no box") is None
    assert last_boxed(r"\boxed{unclosed") is None


def test_resolve_benchmarks_groups_and_errors():
    assert resolve_benchmarks("code") == ["humaneval_plus", "mbpp_plus", "livecodebench"]
    assert resolve_benchmarks("gsm8k,math")[0] == "gsm8k" and len(resolve_benchmarks("math")) == 7
    with pytest.raises(ValueError, match="unknown benchmark 'gsm9k'"):
        resolve_benchmarks("gsm9k")


def test_missing_file_error_names_path_and_remedy(tmp_path):
    with pytest.raises(BenchmarkDataError) as e:
        load_items("gsm8k", path=tmp_path / "gsm8k" / "test.jsonl")
    msg = str(e.value)
    assert str(tmp_path / "gsm8k" / "test.jsonl") in msg and ENV_DIR in msg and "--data gsm8k=PATH" in msg


def test_a_users_directory_overrides_the_shipped_copy_file_by_file(tmp_path):
    # not in the user's directory: the shipped file; in it: the user's file
    assert benchmark_path("gsm8k", data_dir=tmp_path) == PACKAGED_DIR / "gsm8k" / "test.jsonl"
    (tmp_path / "gsm8k").mkdir()
    shutil.copy(PACKAGED_DIR / "gsm8k" / "test.jsonl", tmp_path / "gsm8k" / "test.jsonl")
    assert benchmark_path("gsm8k", data_dir=tmp_path) == tmp_path / "gsm8k" / "test.jsonl"


def test_without_a_user_copy_the_shipped_data_is_read(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_DIR, raising=False)
    monkeypatch.setattr(benchmarks, "IMAGE_DIR", tmp_path / "image-mount-point")
    assert benchmarks_dir() == PACKAGED_DIR  # no image directory
    (tmp_path / "image-mount-point").mkdir()
    assert benchmarks_dir() == PACKAGED_DIR  # the image's empty mount point: nothing bound
    (tmp_path / "image-mount-point" / "gsm8k").mkdir()
    assert benchmarks_dir() == tmp_path / "image-mount-point"  # a bound copy


def test_modified_file_fails_checksum(tmp_path):
    (tmp_path / "aime25").mkdir()
    text = (DATA / "aime25" / "test.jsonl").read_text().replace('"answer":"70"', '"answer":"71"')
    (tmp_path / "aime25" / "test.jsonl").write_text(text)
    with pytest.raises(BenchmarkDataError, match="sha256"):
        load_items("aime25", data_dir=tmp_path)
    assert load_items("aime25", data_dir=tmp_path, verify=False)[0].gold == "71"


def test_benchmarks_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    assert benchmarks_dir() == tmp_path


# -- LiveCodeBench ------------------------------------------------------------------------------------
def test_lcb_release_v5_window_default():
    items = load_livecodebench(LCB_FIXTURE)
    assert [it.item_id for it in items] == ["toy001", "toy002", "toy003", "toy004"]  # toy005 is older
    pair = items[1]
    assert pair.meta["func_name"] == "maxPairSum"
    assert [t["testtype"] for t in pair.meta["tests"]] == ["functional"] * 3  # 1 public + 2 private
    assert items[0].meta["tests"][1] == {"input": "-5 10\n", "output": "5\n", "testtype": "stdin"}


def test_lcb_release_and_window_configurable():
    assert release_files("release_v2") == ["test.jsonl", "test2.jsonl"] and release_files("v6") == ["test6.jsonl"]
    everything = load_livecodebench(LCB_FIXTURE, release="release_v6", start=None, end=None)
    assert [it.item_id for it in everything] == ["toy005", "toy001", "toy002", "toy003", "toy004", "toy006"]
    only_v5 = load_livecodebench(LCB_FIXTURE, release="v5", start="2024-11-01", end="2025-01-01")
    assert [it.item_id for it in only_v5] == ["toy002", "toy004"]
    with pytest.raises(ValueError, match="unknown release"):
        release_files("release_v9")


def test_lcb_missing_files_explain_how_to_get_them(tmp_path):
    with pytest.raises(BenchmarkDataError) as e:
        load_livecodebench(tmp_path)
    assert "test5.jsonl" in str(e.value) and "livecodebench/code_generation_lite" in str(e.value)
    assert "--data livecodebench=DIR" in str(e.value)


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/populora_pwned_pickle",))


def test_lcb_private_tests_refuse_malicious_pickle():
    ok = base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "1", "output": "2", "testtype": "stdin"}]))))
    assert decode_test_cases(ok.decode()) == [{"input": "1", "output": "2", "testtype": "stdin"}]
    evil = base64.b64encode(zlib.compress(pickle.dumps(_Boom()))).decode()
    with pytest.raises(UnsafePickleError, match="posix.system|os.system"):
        decode_test_cases(evil)
    assert not Path("/tmp/populora_pwned_pickle").exists()
    sneaky = base64.b64encode(zlib.compress(pickle.dumps([{"input": "1", "output": Path("x"), "testtype": "stdin"}]))).decode()
    with pytest.raises(UnsafePickleError):
        decode_test_cases(sneaky)


def test_lcb_malformed_row_names_file_and_line(tmp_path):
    for f in release_files("release_v5"):
        shutil.copy(LCB_FIXTURE / f, tmp_path / f)
    with open(tmp_path / "test5.jsonl", "a") as fh:
        fh.write(json.dumps({"question_id": "x", "contest_date": "2024-09-01T00:00:00"}) + "\n")
    with pytest.raises(BenchmarkDataError, match=r"test5.jsonl: line 4"):
        load_livecodebench(tmp_path)
