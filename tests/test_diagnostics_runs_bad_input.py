"""Reading a damaged run directory for `report`/`status`: every error names the file (and line), no traceback."""

from __future__ import annotations

import pytest
from test_diagnostics_report import make_run

from populora.cli import main
from populora.diagnostics.runs import RunDirError, load_run


@pytest.mark.parametrize(
    "name, line, match",
    [
        ("metrics.jsonl", "[1, 2]", r"metrics.jsonl:7: invalid JSON \(a JSON array where an object is expected\)"),
        ("metrics.jsonl", '{"step": "7"}', r"metrics.jsonl:7: 'step' must be an integer"),
        ("metrics.jsonl", '{"x": 1}', r"metrics.jsonl:7: 'step' must be an integer, got None"),
        ("lineage.jsonl", '{"event": "founder", "member": [1]}', r"lineage.jsonl:6: 'member' must be an object"),
        ("lineage.jsonl", '{"event": "founder", "member": {"id": "x"}}', r"lineage.jsonl:6: 'role' must be a string"),
        ("examples.jsonl", '{"step": 9, "valid": true, "program": "x"}', r"examples.jsonl:13: 'type' must be a string"),
        ("tasks.jsonl", '{"step": 1, "type": "code_o"}', r"tasks.jsonl:1: 'program' must be a string"),
    ],
)
def test_a_malformed_row_is_named_with_file_and_line(tmp_path, capsys, name, line, match):
    rd = make_run(tmp_path, "pop", baseline=False)
    with open(rd / name, "a") as f:
        f.write(line + "\n")
    with pytest.raises(RunDirError, match=match):
        load_run(rd)
    assert main(["report", str(rd), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert name in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("text, match", [
    ("- a\n- b\n", "a YAML array where a mapping of sections is expected"),
    ("name: x\npopulation: [1]\n", "'population' must be a mapping"),
    ("name: [x\n", "cannot parse"),
])
def test_a_malformed_config_yaml_is_named(tmp_path, text, match):
    rd = make_run(tmp_path, "pop", baseline=False)
    (rd / "config.yaml").write_text(text)
    with pytest.raises(RunDirError, match=match) as e:
        load_run(rd)
    assert "config.yaml" in str(e.value) and "\n" not in str(e.value)


def test_a_checkpoint_buffer_that_is_not_an_object_is_named(tmp_path):
    rd = make_run(tmp_path, "pop", baseline=False)
    (rd / "checkpoints" / "step_000006" / "state.json").write_text('{"buffers": [1, 2]}')
    with pytest.raises(RunDirError, match=r"state.json: cannot read its task buffers"):
        load_run(rd)
