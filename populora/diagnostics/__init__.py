"""Diagnostics of self-play runs: is there an arms race, or is the agent collapsing?

- program complexity (AST depth, McCabe and cognitive complexity, lines, variables): ``populora.tasks.complexity``,
  where the step loop measures it too;
- ``coverage``: a CVT archive (``ribs``) over program descriptors, coverage over time;
- ``arms_race``: rating, solve-rate, response-length and entropy series from ``metrics.jsonl``;
- ``lineage``: the family tree and evolution events from ``lineage.jsonl``;
- ``runs``: reading a run directory back (plain JSON, no model);
- ``plots`` / ``report``: the figures and the one-page HTML report (``populora report``);
- ``retention``: retention tests of the evolution operators (``populora retention``).

See ``docs/diagnostics.md`` for how to read every figure.
"""
