"""Library output of a training run goes to ``RUN_DIR/train.log``, not into the progress display.

Python warnings (``warnings.warn``: deprecations of transformers, torch, peft) and the
``transformers`` logger are written to the run's log file while the run trains; the libraries'
own progress bars ("Loading weights", downloads) are switched off, so the terminal shows the
run's progress bar (or nothing with ``--quiet``) and the run's messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from populora.run_dir import RunDir


def route_library_output(rd: Path) -> Callable[[], None]:
    """Send warnings and library logs to ``rd/train.log``; returns the function that undoes it."""
    handler = logging.FileHandler(RunDir(rd).log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    warned = logging.getLogger("py.warnings")
    old_propagate = warned.propagate
    logging.captureWarnings(True)
    warned.addHandler(handler)
    warned.propagate = False
    undo: list[Callable[[], None]] = []
    try:
        from transformers.utils import logging as tlog

        tlog.disable_default_handler()
        tlog.add_handler(handler)
        tlog.disable_progress_bar()
        undo.append(lambda: (tlog.remove_handler(handler), tlog.enable_default_handler(), tlog.enable_progress_bar()))
    except ImportError:  # transformers not installed: nothing of its to route
        pass
    try:
        from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

        disable_progress_bars()
        undo.append(enable_progress_bars)
    except ImportError:
        pass

    def restore() -> None:
        for step in reversed(undo):
            step()
        warned.removeHandler(handler)
        warned.propagate = old_propagate
        logging.captureWarnings(False)
        handler.close()

    return restore
