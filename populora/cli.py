"""The `populora` command line.

Each command group lives in its own small module that exposes ``register(subparsers)``; this file
only assembles them, so adding a command never means editing a giant argument parser. Modules
are imported lazily at start-up of the CLI (not of the library).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# One module per command group; each defines register(subparsers) -> None and sets
# ``func`` on its parsers (argparse's set_defaults(func=...)).
COMMAND_MODULES: tuple[str, ...] = (
    "populora.commands.tasks",
    "populora.commands.train",
    "populora.commands.bench",
    "populora.commands.models",
    "populora.commands.eval",
    "populora.commands.score",
    "populora.commands.evolve",
    "populora.commands.sweep",
    "populora.commands.report",
    "populora.commands.plan",
    "populora.commands.doctor",
    "populora.commands.wheelhouse",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line (the problem, then where the usage is) instead of the
    usage block; subcommands' parsers are of this class too (``add_subparsers`` uses the parent's)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="populora",
        description="PopuLoRA: population-based asymmetric self-play with LoRA adapters.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _one_line_warnings() -> None:
    """Warnings meant for users (deprecated config keys) print as one line, without a source line."""
    import warnings

    default = warnings.formatwarning

    def fmt(message, category, filename, lineno, line=None):
        if issubclass(category, FutureWarning):
            return f"warning: {message}\n"
        return default(message, category, filename, lineno, line)

    warnings.formatwarning = fmt


def main(argv: list[str] | None = None) -> int:
    _one_line_warnings()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides after the options (`train --config C --quiet a=1`): argparse gives a positional
    # nargs="*" list only the words before the first option, so the rest are added here
    if extra and isinstance(getattr(args, "overrides", None), list) and all(
            "=" in w and not w.startswith("-") for w in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    from populora.extras import MissingExtra

    try:
        return int(args.func(args) or 0)
    except MissingExtra as e:  # an optional part is not installed: one line naming the extra
        print(e if e.what else f"populora {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the environment (disk full, permissions, a missing path): one line naming the file
        from populora.errors import os_error_line

        print(f"populora {args.command}: {os_error_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a command that can continue says how (``interrupt_hint`` of its parser)
        hint = getattr(args, "interrupt_hint", None)
        print(f"interrupted; {hint}" if hint else "interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
