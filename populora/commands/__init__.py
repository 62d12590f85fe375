"""Command groups of the `populora` CLI, one module each (see populora/cli.py)."""
