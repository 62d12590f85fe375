"""The regexes that read model text run in linear time, and decide what the quadratic ones decided.

A 64 KB completion took 3.8 s in AZR's format check and 73 s in the fence regex before issue 37
(`docs/tasks.md`, "Parsing"). Linearity is shown by construction, not by timing: each
pattern that reads model text is parsed and checked for the two shapes that make a backtracking
engine superlinear (a repeat inside a repeat; a greedy repeat whose characters can also start what
follows it, so one stretch of text splits between them in every way). The old patterns fail that
check; the new ones pass it and give the old verdicts (compared on generated text).
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from populora.tasks import azr_templates as T
from populora.tasks import blocks

try:  # Python 3.11+
    from re import _constants as C
    from re import _parser as P
except ImportError:  # Python 3.10
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as P  # type: ignore[no-redef]

OLD_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)
ALPHABET = [chr(i) for i in range(128)] + ["\u00a0", "\u2003", "\u3000", "\u00e9"]


def chars(node) -> set[str]:
    """The characters (of ``ALPHABET``) one single-character node can match."""
    op, av = node
    if op is C.LITERAL:
        return {chr(av)}
    if op is C.ANY:
        return set(ALPHABET)
    if op is C.IN:
        out: set[str] = set()
        negate = False
        for sub_op, sub_av in av:
            if sub_op is C.NEGATE:
                negate = True
            elif sub_op is C.LITERAL:
                out.add(chr(sub_av))
            elif sub_op is C.RANGE:
                out |= {c for c in ALPHABET if sub_av[0] <= ord(c) <= sub_av[1]}
            elif sub_op is C.CATEGORY:
                out |= {c for c in ALPHABET if re.fullmatch(_CATEGORIES[sub_av], c)}
            else:
                raise AssertionError(f"unexpected class item {sub_op}")
        return set(ALPHABET) - out if negate else out
    raise AssertionError(f"not a single-character node: {op}")


_CATEGORIES = {C.CATEGORY_SPACE: r"\s", C.CATEGORY_DIGIT: r"\d", C.CATEGORY_WORD: r"\w"}


def first(seq) -> tuple[set[str], bool]:
    """(characters that can start a match of ``seq``, whether ``seq`` can match nothing)."""
    out: set[str] = set()
    for op, av in seq:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            sub_first, sub_empty = first(av[2])
            out |= sub_first
            if av[0] > 0 and not sub_empty:
                return out, False
        elif op is C.SUBPATTERN:
            sub_first, sub_empty = first(av[-1])
            out |= sub_first
            if not sub_empty:
                return out, False
        else:
            return out | chars((op, av)), False
    return out, True


def repeats_in(seq) -> list:
    found = []
    for op, av in seq:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            found += [(op, av), *repeats_in(av[2])]
        elif op is C.SUBPATTERN:
            found += repeats_in(av[-1])
    return found


def superlinear_shapes(seq, after: set[str] | None = None) -> list[str]:
    """The shapes in a parsed pattern that let a backtracking engine take superlinear time at one
    starting position (empty: each character is tried a bounded number of times per start).

    * an unbounded repeat holding another unbounded repeat (nested quantifiers);
    * a greedy unbounded repeat whose characters can also start what may come right after it;
    * a lazy unbounded repeat followed by anything but literals (what follows could backtrack into it).
    """
    after = set(ALPHABET) if after is None else after  # the end of the pattern: anything may follow
    found = []
    for i, (op, av) in enumerate(seq):
        rest_first, rest_empty = first(seq[i + 1:])
        follow = rest_first | (after if rest_empty else set())
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            low, high, sub = av
            if high > 1:
                if any(r[1][1] > 1 for r in repeats_in(sub)):
                    found.append("nested unbounded repeats")
                own = first(sub)[0]
                if op is C.MAX_REPEAT and own & follow:
                    found.append(f"greedy repeat over {sorted(own & follow)[:5]} can also start what follows")
                if op is C.MIN_REPEAT and not all(o is C.LITERAL for o, _ in seq[i + 1:]):
                    found.append("lazy repeat followed by more than literals")
            found += superlinear_shapes(sub, follow | (first(sub)[0] if high > 1 else set()))
        elif op is C.SUBPATTERN:
            found += superlinear_shapes(av[-1], follow)
    return found


def shapes(pattern: re.Pattern) -> list[str]:
    return superlinear_shapes(list(P.parse(pattern.pattern, pattern.flags)))


def test_the_patterns_that_read_model_text_are_linear_by_construction():
    assert shapes(T.THINK_THEN_ANSWER) == []
    assert shapes(blocks._FENCE) == []
    # the check can fail: the patterns before issue 37 have the shapes that made them quadratic
    assert any("lazy repeat" in s for s in shapes(T.R1_FORMAT))
    assert any("greedy repeat" in s for s in shapes(OLD_FENCE))
    assert "nested unbounded repeats" in shapes(re.compile(r"(a+)+b"))


TOKENS = ["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "\t", "x", "<", ">", "\u2003"]
FENCE_TOKENS = ["```", "`", " ", "\t", "\r", "\n", "py", "input", "x", "-", "\u00a0"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=24), st.booleans())
def test_the_format_check_gives_azrs_verdict(parts, think_in_prompt):
    text = "".join(parts)
    wrapped = (("<think>" if think_in_prompt else "") + text).strip()
    assert T.r1_format_ok(text, think_in_prompt) == (T.R1_FORMAT.match(wrapped) is not None)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(FENCE_TOKENS), max_size=30))
def test_the_fence_reader_finds_the_blocks_it_found_before(parts):
    text = "".join(parts)
    assert blocks.fenced_blocks(text) == [(m.group(1).lower(), m.group(2)) for m in OLD_FENCE.finditer(text)]


def test_the_inputs_that_were_quadratic_still_read_the_same():
    """The adversarial shapes (at 2 KB, where the old patterns still finish) give the old results."""
    for text in ("</think><answer>" * 256, "</think> <answer>" * 240, "x</think>\n<answer>y" * 200 + "</answer>"):
        assert T.r1_format_ok(text) == (T.R1_FORMAT.match(("<think>" + text).strip()) is not None)
    for text in ("```" + " " * 2048 + "x", ("```" + " " * 64 + "x") * 30, "```py  \n" + "`" * 2000):
        assert blocks.fenced_blocks(text) == [(m.group(1).lower(), m.group(2)) for m in OLD_FENCE.finditer(text)]


def timings(sizes_kb: list[int]) -> None:
    """Print the old patterns' time and the new readers' on the adversarial shapes (``docs/tasks.md``)."""
    import time

    def best(fn, text, n):
        out = []
        for _ in range(n):
            start = time.perf_counter()
            fn(text)
            out.append(time.perf_counter() - start)
        return min(out)

    for kb in sizes_kb:
        size = kb * 1024
        fmt = "</think><answer>" * (size // 16)
        fence = "```" + " " * (size - 4) + "x"
        print(f"{kb} KB: format check: AZR's regex {best(lambda t: T.R1_FORMAT.match(('<think>' + t).strip()), fmt, 1):.3f} s,"
              f" r1_format_ok {best(T.r1_format_ok, fmt, 3):.6f} s; fences: old regex "
              f"{best(lambda t: list(OLD_FENCE.finditer(t)), fence, 1):.3f} s, fenced_blocks "
              f"{best(blocks.fenced_blocks, fence, 3):.6f} s", flush=True)


if __name__ == "__main__":  # python tests/test_tasks_parsing_linear.py [KB ...]
    import sys

    timings([int(a) for a in sys.argv[1:]] or [16, 64])
