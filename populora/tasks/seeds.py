"""The seed set: hand-written programs with inputs that start the task buffers.

AZR starts its buffers from the identity function; a handful of varied programs (strings, lists,
dicts, recursion, a class, a helper function, an allowed import) give the first teacher prompts
references that show the range of what is allowed. Outputs are not written here: ``seed_buffers``
runs the seeds through the validator, so every seed is known valid and its output is computed, never
typed by hand.
"""

from __future__ import annotations

from populora.tasks.records import CODE_I, CODE_O, Proposal

# (program, input)
SEED_PROGRAMS: tuple[tuple[str, str], ...] = (
    ("def f(a):\n    return a", "'Hello world'"),
    (
        "def f(s: str) -> str:\n"
        "    out = []\n"
        "    for i, ch in enumerate(s):\n"
        "        out.append(ch.upper() if i % 2 == 0 else ch.lower())\n"
        "    return ''.join(out)",
        "'population'",
    ),
    (
        "def f(nums):\n"
        "    best = cur = nums[0]\n"
        "    for x in nums[1:]:\n"
        "        cur = max(x, cur + x)\n"
        "        best = max(best, cur)\n"
        "    return best",
        "[2, -5, 3, 4, -1, 2, -7, 1]",
    ),
    (
        "def f(words):\n"
        "    counts = {}\n"
        "    for w in words:\n"
        "        counts[len(w)] = counts.get(len(w), 0) + 1\n"
        "    return sorted(counts.items())",
        "['ant', 'bee', 'wasp', 'moth', 'beetle']",
    ),
    (
        "def f(n):\n    if n < 2:\n        return n\n    return f(n - 1) + f(n - 2)",
        "12",
    ),
    (
        "class Stack:\n"
        "    def __init__(self):\n"
        "        self.items = []\n"
        "    def push(self, x):\n"
        "        self.items.append(x)\n"
        "    def pop(self):\n"
        "        return self.items.pop()\n"
        "\n"
        "def f(expr):\n"
        "    pairs = {')': '(', ']': '['}\n"
        "    st = Stack()\n"
        "    for ch in expr:\n"
        "        if ch in '([':\n"
        "            st.push(ch)\n"
        "        elif ch in pairs:\n"
        "            if not st.items or st.pop() != pairs[ch]:\n"
        "                return False\n"
        "    return not st.items",
        "'([()[]])('",
    ),
    (
        "def digits(n):\n"
        "    return [int(c) for c in str(n)]\n"
        "\n"
        "def f(a, b):\n"
        "    return sum(digits(a)) * len(digits(b)) - b % 7",
        "4096, 123",
    ),
    (
        "from collections import Counter\n"
        "\n"
        "def f(text):\n"
        "    c = Counter(text.replace(' ', ''))\n"
        "    return sorted(c.most_common(), key=lambda kv: (-kv[1], kv[0]))[:3]",
        "'the quick brown fox'",
    ),
    (
        "def f(matrix):\n    return [list(row) for row in zip(*matrix[::-1])]",
        "[[1, 2, 3], [4, 5, 6]]",
    ),
    (
        "def f(s, k):\n"
        "    shifted = []\n"
        "    for ch in s:\n"
        "        if ch.isalpha():\n"
        "            base = ord('a') if ch.islower() else ord('A')\n"
        "            shifted.append(chr((ord(ch) - base + k) % 26 + base))\n"
        "        else:\n"
        "            shifted.append(ch)\n"
        "    return ''.join(shifted)",
        "'Zebra-42', 3",
    ),
    (
        "def f(intervals):\n"
        "    merged = []\n"
        "    for lo, hi in sorted(intervals):\n"
        "        if merged and lo <= merged[-1][1]:\n"
        "            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))\n"
        "        else:\n"
        "            merged.append((lo, hi))\n"
        "    return merged",
        "[(5, 8), (1, 3), (2, 4), (9, 9)]",
    ),
    (
        "def f(graph, start):\n"
        "    seen, order, queue = {start}, [], [start]\n"
        "    while queue:\n"
        "        node = queue.pop(0)\n"
        "        order.append(node)\n"
        "        for nxt in graph.get(node, []):\n"
        "            if nxt not in seen:\n"
        "                seen.add(nxt)\n"
        "                queue.append(nxt)\n"
        "    return order",
        "{'a': ['b', 'c'], 'b': ['d'], 'c': ['d', 'e'], 'e': ['a']}, 'a'",
    ),
    (
        "import math\n"
        "\n"
        "def f(points):\n"
        "    def dist(p):\n"
        "        return math.hypot(p[0], p[1])\n"
        "    return [p for p in sorted(points, key=dist)][:2]",
        "[(3, 4), (1, 1), (-2, 0), (0, 5)]",
    ),
    (
        "def f(n):\n"
        "    steps = 0\n"
        "    while n != 1:\n"
        "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
        "        steps += 1\n"
        "    return steps",
        "27",
    ),
)


def seed_proposals(task_type: str = CODE_O) -> list[Proposal]:
    """The seed programs as proposals of ``task_type`` (code_o or code_i), teacher ``seed``."""
    if task_type not in (CODE_O, CODE_I):
        raise ValueError(f"seed_proposals: seeds are code_o/code_i tasks, not {task_type!r}")
    return [Proposal(type=task_type, program=p, inputs=(i,), teacher_id="seed") for p, i in SEED_PROGRAMS]
