"""Run-file JSON lines: a torn last line is skipped, damage elsewhere is named; truncation is atomic."""

import pytest

from populora.jsonl import (
    JsonlError,
    read_json_object,
    read_jsonl,
    step_of,
    truncate_jsonl,
    truncate_jsonl_files,
)


def test_torn_last_line_is_skipped_unless_strict(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3, "x"')
    assert read_jsonl(p) == [{"step": 1}, {"step": 2}]
    with pytest.raises(JsonlError, match=r"metrics.jsonl:4: invalid JSON"):
        read_jsonl(p, strict=True)


def test_damage_before_the_last_line_names_file_and_line(tmp_path):
    p = tmp_path / "lineage.jsonl"
    p.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(JsonlError, match=r"lineage.jsonl:2: invalid JSON"):
        read_jsonl(p)
    assert read_jsonl(tmp_path / "absent.jsonl") == []


def test_truncate_keeps_selected_rows_and_drops_a_torn_line(tmp_path):
    p = tmp_path / "examples.jsonl"
    p.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4')
    truncate_jsonl(p, lambda row: row["step"] <= 2)
    assert p.read_text() == '{"step": 1}\n{"step": 2}\n'
    assert not (tmp_path / "examples.jsonl.tmp").exists()
    truncate_jsonl(tmp_path / "absent.jsonl", lambda row: True)  # nothing to do, no file made
    assert not (tmp_path / "absent.jsonl").exists()


def test_status_names_a_damaged_metrics_file(tmp_path, capsys):
    from populora.cli import main

    (tmp_path / "config.yaml").write_text("name: x\n")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, oops\n{"step": 3}\n')
    assert main(["status", str(tmp_path)]) == 2
    assert "metrics.jsonl:2: invalid JSON" in capsys.readouterr().err


def test_a_line_that_is_not_an_object_is_named(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1}\n[1, 2]\n{"step": 3}\n')
    with pytest.raises(JsonlError, match=r"metrics.jsonl:2: invalid JSON \(a JSON array where an object is expected\)"):
        read_jsonl(p)


def test_non_utf8_and_deep_lines_are_named_not_replaced(tmp_path):
    p = tmp_path / "tasks.jsonl"
    p.write_bytes(b'{"step": 1}\n{"program": "\xff"}\n{"step": 3}\n')
    with pytest.raises(JsonlError, match=r"tasks.jsonl:2: invalid UTF-8"):
        read_jsonl(p)
    p.write_bytes(b'{"step": 1}\n' + b"[" * 200_000 + b"]" * 200_000 + b'\n{"step": 3}\n')
    with pytest.raises(JsonlError, match=r"tasks.jsonl:2: invalid JSON \(nested too deeply\)"):
        read_jsonl(p)


def test_truncation_refuses_a_malformed_line_and_changes_no_file(tmp_path):
    good = tmp_path / "lineage.jsonl"
    bad = tmp_path / "metrics.jsonl"
    good.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n')
    bad.write_text('{"step": 1}\n{"step": 2, oops\n{"step": 3}\n')
    before = {p: p.read_bytes() for p in (good, bad)}
    with pytest.raises(JsonlError, match=r"metrics.jsonl:2: invalid JSON"):
        truncate_jsonl_files([good, bad], lambda row: step_of(row) <= 1)
    assert {p: p.read_bytes() for p in (good, bad)} == before  # the good file was not cut either
    bad.write_text('{"step": 1}\n{"step": "2"}\n')
    with pytest.raises(JsonlError, match=r"metrics.jsonl:2: 'step' must be an integer"):
        truncate_jsonl_files([good, bad], lambda row: step_of(row) <= 1)
    assert good.read_bytes() == before[good]


def test_read_json_object_names_the_file(tmp_path):
    p = tmp_path / "summary.json"
    assert read_json_object(p) is None
    p.write_text("[1, 2]")
    with pytest.raises(JsonlError, match=r"summary.json: invalid run summary \(a JSON array"):
        read_json_object(p, what="run summary")
    p.write_text("{")
    with pytest.raises(JsonlError, match=r"summary.json: invalid JSON object"):
        read_json_object(p)
    p.write_text('{"status": "finished"}')
    assert read_json_object(p) == {"status": "finished"}


@pytest.mark.parametrize(
    "name, content, where",
    [
        ("metrics.jsonl", '{"step": 1}\n[1, 2]\n{"step": 3}\n', "metrics.jsonl:2"),
        ("summary.json", "[1, 2]", "summary.json"),
        ("summary.json", "{", "summary.json"),
        ("lineage.jsonl", '{"event": "founder"}\n"text"\n{}\n', "lineage.jsonl:2"),
    ],
)
def test_status_names_a_damaged_file_in_one_line(tmp_path, capsys, name, content, where):
    from populora.cli import main

    (tmp_path / "config.yaml").write_text("name: x\n")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    (tmp_path / name).write_text(content)
    assert main(["status", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert where in err and err.count("\n") == 1 and "Traceback" not in err
    assert (tmp_path / name).read_text() == content
