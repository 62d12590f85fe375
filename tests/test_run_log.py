"""Library warnings and logs of a training run go to RUN_DIR/train.log, not into the progress display."""

from __future__ import annotations

import warnings

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
