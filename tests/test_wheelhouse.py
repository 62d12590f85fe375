"""populora wheelhouse's pure parts (milliseconds): the environment files, wheel tags, markers of a
target, and the walk over requirements with a fake index (the real index is exercised by
tests/test_offline_install.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from populora.wheelhouse import (
    Environment,
    Target,
    WheelhouseError,
    builtin_environment,
    is_pure,
    parse_have,
    walk,
    wheel_requires,
)


def wheel(tmp: Path, name: str, version: str, requires: list[str], tag: str = "py3-none-any") -> Path:
    path = tmp / f"{name.replace('-', '_')}-{version}-{tag}.whl"  # wheel names use underscores
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    return path


class Index:
    """A fake index: name -> [(version, requires)], newest first; records what was fetched."""

    def __init__(self, tmp: Path, packages: dict[str, list[tuple[str, list[str]]]]):
        self.tmp, self.packages, self.fetched = tmp, packages, []

    def __call__(self, name, spec, extras):
        from packaging.specifiers import SpecifierSet

        for version, requires in self.packages.get(name, []):
            if SpecifierSet(spec).contains(version):
                self.fetched.append((name, version))
                return wheel(self.tmp, name, version, requires), False
        raise WheelhouseError("No matching distribution found")


def test_environment_files():
    env = parse_have("torch==2.11.0+cu130  # the node's\nNumPy\n\n# comment\nfoo-bar @ file:///x\n", "f")
    assert env.installed == {"torch": "2.11.0+cu130", "numpy": None, "foo-bar": None}
    assert env.satisfies(Requirement("torch>=2.3")) and not env.satisfies(Requirement("torch>=2.12"))
    assert env.satisfies(Requirement("numpy>=99"))  # present, version not recorded: taken to satisfy
    assert not env.satisfies(Requirement("peft"))
    with pytest.raises(WheelhouseError, match="f: line 1"):
        parse_have("torch >= 2\n", "f")
    node = builtin_environment("gpu-node")
    assert node.installed["transformers"] == "5.17.0" and "peft" not in node.installed
    with pytest.raises(WheelhouseError, match="known: gpu-node"):
        builtin_environment("nowhere")


def test_wheel_tags_and_target_markers():
    assert is_pure("trueskill-0.4.5-py3-none-any.whl") and is_pure("six-1.17.0-py2.py3-none-any.whl")
    assert not is_pure("numpy-2.0-cp312-cp312-manylinux_2_17_x86_64.whl")
    m = Target("3.12", ("manylinux_2_28_x86_64",)).markers()
    assert m["python_version"] == "3.12" and m["python_full_version"] == "3.12.0" and m["sys_platform"] == "linux"
    assert Target("3.12").pip_args()[:4] == ["--python-version", "3.12", "--implementation", "cp"]


def test_wheel_requires_evaluates_markers_and_extras(tmp_path):
    w = wheel(tmp_path, "pkg", "1.0", ["a>=1", 'b; python_version < "3.0"', 'c; extra == "fast"'])
    target = Target("3.12").markers()
    assert [r.name for r in wheel_requires(w, frozenset(), target)] == ["a"]
    assert [r.name for r in wheel_requires(w, frozenset({"fast"}), target)] == ["a", "c"]


def test_the_walk_stops_at_what_the_environment_has(tmp_path):
    index = Index(tmp_path, {
        "omegaconf": [("2.4.0", ["pyyaml>=5.1", "antlr4-python3-runtime==4.9.*"])],
        "antlr4-python3-runtime": [("4.13.2", []), ("4.9.3", [])],
        "trueskill": [("0.4.5", ["six"])],
        "six": [("1.17.0", [])],
    })
    env = Environment("node", {"torch": "2.11.0", "pyyaml": None})
    roots = [Requirement(r) for r in ("torch>=2.3", "omegaconf>=2.3", "trueskill>=0.4.5")]
    plan = walk(roots, env, Target("3.12"), index)
    assert sorted((w.name, w.version) for w in plan.wheels.values()) == [
        ("antlr4-python3-runtime", "4.9.3"), ("omegaconf", "2.4.0"), ("six", "1.17.0"), ("trueskill", "0.4.5")]
    assert ("torch", "2.11.0") not in index.fetched and any("torch" in s for s in plan.satisfied)
    assert plan.wheels["six"].wanted_by == "trueskill 0.4.5"
    assert plan.total_bytes == sum(w.size for w in plan.wheels.values()) > 0


def test_a_later_specifier_fetches_again_and_a_missing_one_names_who_wanted_it(tmp_path):
    index = Index(tmp_path, {"a": [("1.0", ["c>=1"])], "b": [("1.0", ["c<2"])], "c": [("2.0", []), ("1.5", [])]})
    plan = walk([Requirement("a"), Requirement("b")], Environment("e", {}), Target("3.12"), index)
    assert plan.wheels["c"].version == "1.5" and ("c", "2.0") in index.fetched  # narrowed after the first fetch
    assert not (tmp_path / "c-2.0-py3-none-any.whl").exists()  # the superseded wheel is removed
    with pytest.raises(WheelhouseError, match=r"nothere>=1 \(wanted by a 1.0\)"):
        walk([Requirement("a")], Environment("e", {}), Target("3.12"),
             Index(tmp_path, {"a": [("1.0", ["nothere>=1"])]}))
