"""The part of vLLM's Python API the vLLM engine uses, per vLLM version, read from vLLM's source.

vLLM changes its API often (engine arguments appear and are renamed, output fields move, the LoRA
ranks it serves grow). The engine (``vllm_engine.py``, its start in ``vllm_launch.py``) passes
keyword arguments to ``vllm.LLM`` (which forwards unknown ones to ``EngineArgs``),
``SamplingParams`` and ``LoRARequest``, and reads fields of the outputs. ``data/vllm_api.json``
records, for each vLLM release listed there, the names those take and the LoRA ranks it serves,
taken from the release's own source files (parsed, never imported); ``tests/test_policy_vllm.py``
checks that every keyword and field the engine uses is in the table for every version in the range
the project declares (``SUPPORTED``), so a version error is caught without vLLM or a GPU. At run
time the engine also checks the installed vLLM (``engine_kwargs`` drops or refuses what it lacks,
naming the option).

Regenerate the table from unpacked wheels (``pip download vllm==X --no-deps``; unzip ``vllm/`` of
each into ``DIR/<version>/``)::

    python -m populora.policy.vllm_api build DIR > populora/policy/data/vllm_api.json
"""

from __future__ import annotations

import ast
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).parent / "data" / "vllm_api.json"
# The releases the project claims to support (pyproject's `vllm` extra says the same): from the
# first release with sleep mode, raw log-probabilities and 320/512 ranks in the table below.
SUPPORTED = (">=", "0.10.2")


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


@lru_cache(maxsize=1)
def table() -> dict[str, dict[str, list]]:
    return json.loads(TABLE.read_text())


def supported_versions() -> list[str]:
    lo = version_key(SUPPORTED[1])
    return sorted((v for v in table() if version_key(v) >= lo), key=version_key)


def supported_lora_ranks() -> list[int]:
    """The LoRA ranks every supported release serves."""
    sets = [set(table()[v]["lora_ranks"]) for v in supported_versions()]
    return sorted(set.intersection(*sets))


# -- building the table from source (no import of vLLM) ----------------------------------------------
def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)


def _fields(cls: ast.ClassDef) -> list[str]:
    """Annotated class attributes (dataclass / msgspec / NamedTuple fields), or ``__init__`` params."""
    names = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
             and not n.target.id.startswith("_")]
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is not None:
        args = init.args
        names += [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg != "self"]
    return sorted(set(names))


def _method_params(cls: ast.ClassDef, method: str) -> list[str] | None:
    fns = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method]
    if not fns:
        return None
    args = fns[-1].args  # overloads first, the implementation last
    return sorted({a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} - {"self"})


def _lora_ranks(root: Path) -> list[int]:
    for path in [root / "config.py", *sorted((root / "config").glob("*.py"))]:
        if not path.is_file():
            continue
        text = path.read_text()
        m = re.search(r"possible_max_ranks\s*=\s*\(([\d,\s]+)\)", text) or re.search(
            r"MaxLoRARanks\s*=\s*Literal\[([\d,\s]+)\]", text)
        if m:
            return sorted(int(x) for x in re.findall(r"\d+", m.group(1)))
    return []


def describe(root: Path) -> dict[str, list]:
    """The API surface of one unpacked vLLM release (``root`` is its ``vllm/`` directory)."""
    def tree(rel: str) -> ast.Module:
        return ast.parse((root / rel).read_text())

    llm = _class(tree("entrypoints/llm.py"), "LLM")
    out = {
        "LLM": _method_params(llm, "__init__") or [],
        "LLM.generate": _method_params(llm, "generate") or [],
        "LLM.methods": sorted(n.name for n in llm.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")),
        "EngineArgs": _fields(_class(tree("engine/arg_utils.py"), "EngineArgs")),
        "SamplingParams": _fields(_class(tree("sampling_params.py"), "SamplingParams")),
        "LoRARequest": _fields(_class(tree("lora/request.py"), "LoRARequest")),
        "CompletionOutput": _fields(_class(tree("outputs.py"), "CompletionOutput")),
        "RequestOutput": _fields(_class(tree("outputs.py"), "RequestOutput")),
        "lora_ranks": _lora_ranks(root),
    }
    return out


def build(source_dir: Path) -> dict[str, dict[str, list]]:
    versions = sorted((d for d in Path(source_dir).iterdir() if (d / "vllm").is_dir()), key=lambda d: version_key(d.name))
    return {d.name: describe(d / "vllm") for d in versions}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "build":
        print("usage: python -m populora.policy.vllm_api build DIR_OF_UNPACKED_RELEASES", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(build(Path(sys.argv[2])), indent=1, sort_keys=True))
