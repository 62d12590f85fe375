"""Run-file JSON lines: a torn last line is skipped, damage elsewhere is named; truncation is atomic."""

import pytest

from populora.jsonl import JsonlError, read_jsonl, truncate_jsonl


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
