"""`populora evolve OP --parents DIR [DIR] --out DIR [--seed N] [key=value ...]` and `populora evolve --list`.

Applies one weight-space operator to PEFT adapter directories and writes the child as a PEFT
directory (loadable by peft and vLLM). Parents are given fitter first for crossovers.

``--out`` must be a new or empty directory. ``--force`` lets it replace an existing adapter
directory (a parent included); it never deletes a directory that holds anything but an adapter.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

_PARAM = re.compile(r"^[A-Za-z_]\w*=")


class _TakeParams(argparse.Action):
    """An option whose trailing ``key=value`` words are operator parameters, not option values.

    argparse cannot put positionals after options into a ``nargs="*"`` positional that already
    matched nothing, so ``--out DIR drop=0.3`` is split here: ``DIR`` to the option, the rest to
    ``params``. ``single`` options take exactly one value (converted with ``convert``).
    """

    def __init__(self, *args, single: bool = False, convert=str, **kwargs):
        self.single, self.convert = single, convert
        super().__init__(*args, nargs="+", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        own = [v for v in values if not _PARAM.match(v)]
        extra = [v for v in values if _PARAM.match(v)]
        if self.single and len(own) != 1:
            parser.error(f"{option_string} takes one value, got {own}")
        try:
            own = [self.convert(v) for v in own]
        except ValueError:
            parser.error(f"{option_string}: invalid value {own}")
        setattr(namespace, self.dest, own[0] if self.single else own)
        namespace.params = list(getattr(namespace, "params", None) or []) + extra


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evolve",
        help="make a child adapter from PEFT parent directories with a weight-space operator",
        description=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("operator", nargs="?", help="operator name (see --list)")
    p.add_argument("params", nargs="*", metavar="key=value", help="operator parameters overriding the defaults")
    p.add_argument("--parents", action=_TakeParams, metavar="DIR", help="parent adapter directories (fitter first)")
    p.add_argument("--out", action=_TakeParams, single=True, metavar="DIR", help="directory for the child adapter")
    p.add_argument(
        "--seed", action=_TakeParams, single=True, convert=int, default=0, metavar="N",
        help="seed of the operator's random draws (default 0)",
    )
    p.add_argument("--force", action="store_true",
                   help="replace --out when it is an existing adapter directory (a parent included)")
    p.add_argument("--list", action="store_true", help="print the operator registry with defaults and exit")
    p.set_defaults(func=run)


def _parse_params(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"operator parameter {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def format_registry() -> str:
    from populora.population.operators import OPERATORS

    lines = [f"{'operator':<15} {'kind':<10} {'parents':<8} parameters (default, range)"]
    for spec in OPERATORS.values():
        params = ", ".join(f"{k}={v} {spec.bounds[k].text}" for k, v in spec.defaults.items()) or "-"
        lines.append(f"{spec.name:<15} {spec.kind:<10} {spec.parents:<8} {params}")
        lines.append(f"{'':<15} {spec.summary}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.list:
        print(format_registry())
        return 0
    if not args.operator or not args.parents or not args.out:
        print("populora evolve: give OP, --parents DIR [DIR] and --out DIR (or --list)", file=sys.stderr)
        return 2
    from populora.policy.adapters import AdapterFormatError, AdapterMismatchError, AdapterWeights
    from populora.population.operators import make_child, resolve_params
    from populora.population.validation import ConfigError

    refusal = out_refusal(Path(args.out), [Path(p) for p in args.parents], args.force)
    if refusal:
        print(f"populora evolve: {refusal}", file=sys.stderr)
        return 2
    try:
        params = resolve_params(args.operator, _parse_params(args.params))
        parents = [AdapterWeights.load_peft(d) for d in args.parents]
        child = make_child(args.operator, parents, seed=args.seed, **params)
    except (ConfigError, ValueError, AdapterFormatError, AdapterMismatchError) as e:
        print(f"populora evolve: {e}", file=sys.stderr)
        return 2
    base = _base_model_of(args.parents[0])
    try:
        child.save_peft(args.out, base_model_name_or_path=base)
    except OSError as e:
        print(f"populora evolve: cannot write --out {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(json.dumps({"operator": args.operator, "params": params, "seed": args.seed,
                      "parents": list(args.parents), "out": str(args.out)}))
    return 0


# What an adapter directory may hold for --force to replace it (PEFT writes a README.md too).
ADAPTER_FILES = frozenset({"adapter_config.json", "adapter_model.safetensors", "README.md"})


def out_refusal(out: Path, parents: list[Path], force: bool) -> str | None:
    """Why the child may not be written to ``out`` (None when it may): never over a file, a parent
    or a non-empty directory unless ``force``, and never over anything but an adapter directory."""
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file, not a directory"
    target = out.resolve()
    for p in parents:
        if target in p.resolve().parents:
            return f"--out {out} contains parent {p}; writing there would delete it"
    if not out.exists():
        return None
    entries = sorted(e.name for e in out.iterdir())
    if not entries:
        return None
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    if not force:
        parent = next((p for p in parents if p.resolve() == target), None)
        if parent is not None:
            return f"--out {out} is parent {parent}; the child would replace it (give another --out, or --force)"
        return f"--out {out} is a non-empty directory ({shown}); give a new or empty one, or --force to replace an adapter"
    extra = [e for e in entries if e not in ADAPTER_FILES or (out / e).is_dir()]
    if extra or "adapter_config.json" not in entries:
        return f"--out {out} is not an adapter directory ({shown}); --force replaces only an adapter directory"
    return None


def _base_model_of(parent_dir: str) -> str | None:
    """The parent's ``base_model_name_or_path``, carried over so the child loads on the same base."""
    from populora.policy.adapters import CONFIG_NAME

    try:
        return json.loads((Path(parent_dir) / CONFIG_NAME).read_text()).get("base_model_name_or_path")
    except (OSError, json.JSONDecodeError):
        return None
