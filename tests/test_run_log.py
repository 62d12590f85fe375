"""Library warnings and logs of a training run go to RUN_DIR/train.log, not into the progress display."""

from __future__ import annotations

import warnings
from pathlib import Path

from populora.selfplay.run_log import route_library_output


def test_warnings_and_transformers_logs_go_to_the_run_log(tmp_path, capfd):
    from transformers.utils import logging as tlog

    restore = route_library_output(tmp_path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("`past_key_values` is deprecated", FutureWarning, stacklevel=1)
        tlog.get_logger("transformers.modeling_utils").warning("is_gradient_checkpointing is deprecated")
        assert not tlog.is_progress_bar_enabled()  # no "Loading weights" bars
    finally:
        restore()
    text = (tmp_path / "train.log").read_text()
    assert "past_key_values" in text and "is_gradient_checkpointing" in text
    err = capfd.readouterr().err
    assert "past_key_values" not in err and "is_gradient_checkpointing" not in err
    assert tlog.is_progress_bar_enabled()  # restored after the run


def test_a_run_says_it_is_starting_before_the_slow_part(tmp_path, capsys):
    """The base model, the sandbox and the buffers take seconds before the progress bar: a line first."""
    import pytest

    from populora.distributed.comm import LocalComm
    from populora.selfplay.runner import _train, prepare_run

    class SlowStart:
        def __init__(self, cfg, rd, comm):
            raise RuntimeError("stop here")

    tiny = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
    cfg, rd = prepare_run(str(tiny), [], tmp_path / "run", False)
    with pytest.raises(RuntimeError, match="stop here"):
        _train(cfg, rd, False, LocalComm(), SlowStart, handle_signals=False, progress=True)
    assert capsys.readouterr().err.startswith(f"starting {rd}: loading the base model")
    with pytest.raises(RuntimeError):
        _train(cfg, rd, False, LocalComm(), SlowStart, handle_signals=False, progress=False)  # --quiet
    assert "starting" not in capsys.readouterr().err
