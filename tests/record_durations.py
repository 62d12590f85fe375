"""Write ``tests/durations.json`` (seconds per test module) from pytest's ``--durations=0`` output.

``tests/conftest.py`` hands the modules to the two pytest-xdist workers longest first (the
longest-processing-time rule), so that the longest module does not start last and leave one core
idle at the end. Refresh after tests change a lot:

    pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=0 | tee log
    python tests/record_durations.py log

Modules missing from the file count as 0 s (they go last, in collection order).
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:call|setup|teardown)\s+(tests/[^:\s]+\.py)::")


def module_seconds(lines) -> dict[str, float]:
    """Seconds per module: the sum of its setup, call and teardown durations."""
    seconds: dict[str, float] = defaultdict(float)
    for line in lines:
        match = LINE.match(line.strip())
        if match:
            seconds[match.group(2)] += float(match.group(1))
    return {path: round(s, 1) for path, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/record_durations.py PYTEST_LOG", file=sys.stderr)
        return 2
    seconds = module_seconds(Path(argv[0]).read_text(errors="replace").splitlines())
    if not seconds:
        print(f"{argv[0]}: no '--durations=0' lines found", file=sys.stderr)
        return 1
    out = Path(__file__).with_name("durations.json")
    out.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{out}: {len(seconds)} modules, {sum(seconds.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
