"""The house: the import graph drawn from the source has no circle and no arrow running back up the
floors written down in docs/architecture.md (every import counts, at module level or in a function)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("populora", "eval", "jobs")


def modules() -> dict[str, Path]:
    out = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (``from a import b`` counts ``a.b`` when that is a
    module, else ``a``)."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names]
            else:
                continue
            for t in targets:
                r = resolve(t)
                if r is not None and r != name and r.split(".")[0] in PACKAGES:
                    found.add(r)
        graph[name] = found
    return graph


def floors() -> dict[str, int]:
    """Room -> floor, from the table in docs/architecture.md."""
    out = {}
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|(.*?)\|", line)
        if m:
            for room in re.findall(r"`([\w.]+)`", m.group(2)):
                out[room] = int(m.group(1))
    return out


def room_of(module: str, rooms: dict[str, int]) -> str:
    """The longest room name that is the module or a package above it."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in rooms:
            return ".".join(parts[:n])
    raise AssertionError(f"module {module} is in no room of docs/architecture.md: add its room to the table")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_modules():
    assert cycles(imports(modules())) == []


def test_every_arrow_goes_down_the_floors():
    rooms = floors()
    assert rooms, "docs/architecture.md has no floor table"
    graph = imports(modules())
    wrong = []
    for src, targets in sorted(graph.items()):
        a = room_of(src, rooms)
        for dst in sorted(targets):
            b = room_of(dst, rooms)
            if a != b and rooms[a] <= rooms[b]:
                wrong.append(f"{src} (floor {rooms[a]}, {a}) -> {dst} (floor {rooms[b]}, {b})")
    assert not wrong, "imports that run sideways or back up:\n" + "\n".join(wrong)


def test_the_checker_finds_a_circle_and_a_room_without_a_floor():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    try:
        room_of("nowhere.module", {"populora": 0})
    except AssertionError as e:
        assert "no room" in str(e)
    else:
        raise AssertionError("a module outside every room was accepted")


def test_eval_reads_as_its_three_parts():
    """Every module of eval/ lives in benchmarks/, runner/ or leaderboard/ (or lm-eval's tasks/), except
    the package itself and the statistics the runner and the leaderboard share; each part is a room."""
    loose = sorted(m for m in modules() if m.startswith("eval") and m.split(".")[:2][-1] not in
                   ("benchmarks", "runner", "leaderboard", "tasks") and m not in ("eval", "eval.stats"))
    assert loose == [], f"modules of eval/ outside its parts: {loose}"
    rooms = floors()
    assert rooms["eval.benchmarks"] < rooms["eval.runner"] < rooms["eval.leaderboard"]
