"""`populora tasks validate|check`: feed the task validator and the answer checker any JSONL corpus.

``validate`` reads proposals, one JSON object per line::

    {"program": "def f(x):\\n    return x", "input": "3"}                      # code_o / code_i
    {"program": "...", "inputs": ["1", "2", ...], "message": "...", "type": "code_f"}

and writes one result per line: ``line``, ``valid``, ``reason``, ``output`` (code_o/code_i) or
``outputs`` (code_f), ``seconds`` and, when valid, the ``task`` record (which ``check`` accepts).

``check`` reads answers against tasks, one per line: either ``{"task": {...}, ...}`` (a task record as
written by ``validate``) or the task's fields inline (``type``, ``program``, ``input``/``output`` or
``inputs``/``outputs``/``message``), plus the student's ``completion`` (full text, parsed as in
training) or a bare ``answer`` (wrapped in ``<answer>`` and the fence of its kind). It writes
``line``, ``format_ok``, ``correct``, ``score``, ``reason``, ``answer``. A task record that says the
sandbox limits its gold was computed under (``limits``, written by ``validate``) is judged only
under the same ones: with other options its answers get ``limits_changed:<field>``.

A malformed line is reported with its line number (``reason`` starting with ``bad_line``) and the
rest of the file is processed: invalid JSON, bytes that are not UTF-8 (never replaced: a program is
run exactly as written or not at all), JSON nested too deeply, a line over ``corpus_io.MAX_LINE_BYTES``, or
missing or mistyped fields. The command then exits 1 naming the file and the first malformed line
(an empty file too), after writing every line's result. Limits must be finite and positive (an error naming the option), and
``--out`` is checked writable before any work; the results replace it atomically at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any

from populora.commands.corpus_io import Output, positive_int, positive_seconds, read_input_lines
from populora.tasks.kinds import all_kinds, get_kind, kind_names
from populora.tasks.records import LIMITS_CHANGED_KIND, Proposal, RecordFieldError, Task, reason_kind


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="validate proposals and check answers from JSONL files")
    tsub = p.add_subparsers(dest="tasks_command", metavar="ACTION")

    v = tsub.add_parser("validate", help="validate proposals (program + input(s)) given as JSON lines")
    v.add_argument("file", help="JSONL file: program, input or inputs, optional type and message")
    v.add_argument("--type", choices=kind_names(), default=None, help="task type for lines without 'type'")
    _common(v)
    v.set_defaults(func=run_validate)

    c = tsub.add_parser(
        "check", help="check answers (completion or answer) against tasks given as JSON lines"
    )
    c.add_argument("file", help="JSONL file: task (or its fields) and completion or answer")
    c.add_argument(
        "--fractional", action="store_true", help="code_f: score = fraction of hidden pairs passed"
    )
    _common(c)
    c.set_defaults(func=run_check)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None, help="write results here (default: standard output)")
    p.add_argument("--workers", type=positive_int, default=None, help="sandbox workers (default: CPU count)")
    p.add_argument("--wall-seconds", type=positive_seconds, default=5.0, help="wall-clock limit per program")
    p.add_argument("--cpu-seconds", type=positive_int, default=None,
                   help="CPU-time limit per program (default: the wall-clock limit rounded, at least 1)")
    p.add_argument("--memory-mb", type=positive_int, default=512, help="address-space limit per program")
    p.add_argument("--max-output-chars", type=positive_int, default=1000, help="largest accepted output repr")
    p.add_argument("--seed", type=int, default=None,
                   help="seed the determinism check's hash seeds and call orders are drawn from (default: a fresh "
                        "random one, printed, so a program cannot be tuned to known seeds; give it to repeat a run)")


def proposal_from_json(obj: dict[str, Any], default_type: str | None) -> Proposal:
    """A proposal from one input line; ValueError naming the key when the line is malformed."""
    task_type = obj.get("type") or default_type or _guess_type(obj)
    if task_type not in kind_names():
        raise ValueError(f"'type' is {task_type!r}; expected one of {', '.join(kind_names())}")
    program = obj.get("program")
    if not isinstance(program, str):
        raise ValueError("'program' must be a string")
    if get_kind(task_type).given_program:
        inputs = obj.get("inputs")
        if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
            raise ValueError(f"'inputs' must be a list of strings for {task_type}")
        return Proposal(
            type=task_type, program=program, inputs=tuple(inputs), message=str(obj.get("message", ""))
        )
    inp = obj.get("input")
    if not isinstance(inp, str):
        raise ValueError(f"'input' must be a string for {task_type}")
    return Proposal(type=task_type, program=program, inputs=(inp,))


def _guess_type(obj: dict[str, Any]) -> str:
    """A line without 'type': several inputs make it an induction task, one input the first kind."""
    kinds = all_kinds()
    if "inputs" in obj:
        return next(n for n, k in kinds.items() if k.given_program)
    return next(iter(kinds))


def determinism_seed(args: argparse.Namespace, command: str) -> int:
    """``--seed``, or a fresh random seed, said in one line on stderr so the run can be repeated: a
    fixed default would let a program be tuned to the seeds its replicas will run under."""
    if args.seed is not None:
        return args.seed
    import secrets

    seed = secrets.randbits(31)
    print(f"populora tasks {command}: determinism seed {seed} (--seed {seed} repeats this run)", file=sys.stderr)
    return seed


def sandbox_limits(args: argparse.Namespace):
    """The ``SandboxLimits`` the options give (``SandboxLimitsError`` naming the field when one is out
    of range: the option types refuse what is not positive, the record what is too large)."""
    from populora.sandbox import SandboxLimits

    cpu = args.cpu_seconds if args.cpu_seconds is not None else max(1, int(round(args.wall_seconds)))
    return SandboxLimits(
        wall_seconds=args.wall_seconds,
        cpu_seconds=cpu,
        memory_mb=args.memory_mb,
        max_output_chars=args.max_output_chars,
        workers=args.workers or 0,
    )


def limits_refused(args: argparse.Namespace, command: str) -> bool:
    """True (after one line naming the option and its value) when the options give impossible
    limits (``--memory-mb 100000000000000``): refused before any work."""
    from populora.sandbox import SandboxLimitsError

    try:
        sandbox_limits(args)
    except SandboxLimitsError as exc:
        field = exc.key.split(".", 1)[1]
        option = "--wall-seconds" if field == "cpu_seconds" and args.cpu_seconds is None else \
            "--" + field.replace("_", "-")
        print(f"populora tasks {command}: {option}: {exc}", file=sys.stderr)
        return True
    return False


def _open_sandbox(args: argparse.Namespace, seed: int = 0):
    from populora.sandbox import Sandbox

    return Sandbox(limits=sandbox_limits(args), workers=args.workers, hash_seed=seed)


def _open_output(args: argparse.Namespace, command: str) -> Output | None:
    out = Output(args.out)
    try:
        out.open()
    except OSError as exc:
        why = exc.strerror or str(exc)
        print(f"populora tasks {command}: cannot write --out {args.out}: {why}", file=sys.stderr)
        return None
    return out


def _run_each(items: list, run_batch) -> list:
    """``run_batch(items)``; if it raises, item by item, so one item that breaks the verifier (deep
    nesting, a verifier bug) costs only its own result: that item's slot holds the exception."""
    try:
        return list(run_batch(items))
    except Exception:  # noqa: BLE001 - isolated below, item by item
        out: list = []
        for item in items:
            try:
                out.extend(run_batch([item]))
            except Exception as exc:  # noqa: BLE001 - reported as this line's result
                out.append(exc)
        return out


def _close_quietly(sandbox, command: str) -> None:
    """Close the sandbox; a failure to clean up is reported, never allowed to lose the results."""
    try:
        sandbox.close()
    except Exception as exc:  # noqa: BLE001
        print(f"populora tasks {command}: warning: sandbox cleanup failed ({type(exc).__name__}: {exc})",
              file=sys.stderr)


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` on one printable line of at most ``limit`` characters (a reason ends up in a one-line
    message on stderr)."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text[:limit])
    return text[:limit]


def _crash_reason(exc: BaseException) -> str:
    return f"bad_line: the verifier failed on this line ({type(exc).__name__}: {_one_line(str(exc), 200)})"


def _read_items(args: argparse.Namespace, command: str, parse, failed: dict[str, Any]):
    """Parse ``args.file`` line by line: (result rows of bad lines by line number, [(line, item)]).

    A bad line gets ``failed`` plus its reason and never stops the others; None (after a message)
    when the file itself cannot be read.
    """
    try:
        rows = read_input_lines(args.file)
    except OSError as exc:
        print(f"populora tasks {command}: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return None
    results: dict[int, dict[str, Any]] = {}
    todo: list[tuple[int, Any]] = []
    for n, obj in rows:
        if isinstance(obj, str):
            results[n] = {"line": n, **failed, "reason": obj}
            continue
        try:
            todo.append((n, parse(obj)))
        except KeyError as exc:
            results[n] = {"line": n, **failed, "reason": f"bad_line: missing key {exc}"}
        except (ValueError, TypeError) as exc:
            results[n] = {"line": n, **failed, "reason": f"bad_line: {_one_line(str(exc))}"}
        except Exception as exc:  # noqa: BLE001 - any other failure to read a line costs only that line
            results[n] = {"line": n, **failed, "reason": _crash_reason(exc)}
    return results, todo


def run_validate(args: argparse.Namespace) -> int:
    from populora.tasks.config import TaskEnv
    from populora.tasks.validation import validate_many

    failed = {"valid": False, "seconds": 0.0}
    if limits_refused(args, "validate"):
        return 2
    out = _open_output(args, "validate")
    if out is None:
        return 2
    parsed = _read_items(args, "validate", lambda obj: proposal_from_json(obj, args.type), failed)
    if parsed is None:
        out.discard()
        return 2
    results, todo = parsed
    malformed = sorted(results)  # lines that could not be read as proposals
    env = TaskEnv(max_output_chars=args.max_output_chars)
    start = time.monotonic()
    try:
        sandbox = _open_sandbox(args, determinism_seed(args, "validate"))
        try:
            verdicts = _run_each([p for _, p in todo], lambda ps: validate_many(ps, sandbox, env))
        finally:
            _close_quietly(sandbox, "validate")
    except BaseException:
        out.discard()
        raise
    elapsed = time.monotonic() - start
    for (n, proposal), v in zip(todo, verdicts):
        if isinstance(v, Exception):
            results[n] = {"line": n, "type": proposal.type, **failed, "reason": _crash_reason(v)}
            continue
        r: dict[str, Any] = {"line": n, "type": proposal.type, "valid": v.valid, "reason": v.reason}
        if get_kind(proposal.type).given_program:
            r["outputs"] = list(v.outputs)
        else:
            r["output"] = v.outputs[0] if v.outputs else None
        r["seconds"] = round(v.seconds, 4)
        if v.task is not None:
            r["task"] = v.task.to_json()
        results[n] = r
    ordered = [results[n] for n in sorted(results)]
    out.commit(ordered)
    kinds = Counter(reason_kind(r["reason"]) or "valid" for r in ordered)
    print(
        f"{kinds.get('valid', 0)}/{len(ordered)} valid in {elapsed:.2f} s; "
        + ", ".join(f"{k}: {c}" for k, c in sorted(kinds.items()) if k != "valid"),
        file=sys.stderr,
    )
    return input_status(args.file, "validate", len(ordered), malformed, results)


def input_status(file: str, command: str, lines: int, malformed: list[int], results: dict[int, dict]) -> int:
    """0 when every line of ``file`` was read; else 1 after a message naming the file and its first
    malformed line (the results of the good lines are written all the same), or an empty file."""
    if lines == 0:
        print(f"populora tasks {command}: {file}: no lines to {command} (empty file)", file=sys.stderr)
        return 1
    if malformed:
        first = malformed[0]
        more = f" and {len(malformed) - 1} more line(s)" if len(malformed) > 1 else ""
        print(f"populora tasks {command}: {file}: line {first} is malformed ({results[first]['reason']}){more}",
              file=sys.stderr)
        return 1
    return 0


def task_from_json(obj: dict[str, Any]) -> Task:
    """The task of a check line (``task`` record or inline fields); ValueError naming the key."""
    from populora.tasks.records import task_id

    if "task" in obj:
        if not isinstance(obj["task"], dict):
            raise ValueError("'task' must be a JSON object")
        try:
            task = Task.from_json(obj["task"])
        except RecordFieldError as exc:
            raise ValueError(f"'task.{exc.field}' {exc.message}") from None
        if task.type not in kind_names():
            raise ValueError(f"'task.type' is {task.type!r}; expected one of {', '.join(kind_names())}")
        return task
    task_type = obj.get("type")
    if task_type not in kind_names():
        raise ValueError(f"'type' is {task_type!r}; expected one of {', '.join(kind_names())}")
    if not isinstance(obj.get("program"), str):
        raise ValueError("'program' must be a string")
    if get_kind(task_type).given_program:
        for key in ("inputs", "outputs"):
            if not isinstance(obj.get(key), list) or not all(isinstance(i, str) for i in obj[key]):
                raise ValueError(f"'{key}' must be a list of strings for {task_type}")
        inputs = tuple(obj["inputs"])
        n_shown = obj.get("n_shown", 5)
        if not isinstance(n_shown, int) or isinstance(n_shown, bool):
            raise ValueError(f"'n_shown' must be a whole number, got {type(n_shown).__name__}")
        return Task(
            id=task_id(task_type, obj["program"], inputs),
            type=task_type,
            program=obj["program"],
            inputs=inputs,
            outputs=tuple(obj["outputs"]),
            message=str(obj.get("message", "")),
            n_shown=n_shown,
        )
    for key in ("input", "output"):
        if not isinstance(obj.get(key), str):
            raise ValueError(f"'{key}' must be a string for {task_type}")
    tid = task_id(task_type, obj["program"], (obj["input"],))
    return Task(id=tid, type=task_type, program=obj["program"], input=obj["input"], output=obj["output"])


def completion_from_json(obj: dict[str, Any], task: Task) -> str:
    if isinstance(obj.get("completion"), str):
        return obj["completion"]
    if isinstance(obj.get("answer"), str):
        return f"<answer>\n```{get_kind(task.type).student_block}\n{obj['answer']}\n```\n</answer>"
    raise ValueError("a check line needs 'completion' or 'answer' (a string)")


def run_check(args: argparse.Namespace) -> int:
    from populora.tasks.checking import check_many
    from populora.tasks.config import TaskEnv

    def parse(obj: dict[str, Any]) -> tuple[Task, str]:
        task = task_from_json(obj)
        return task, completion_from_json(obj, task)

    failed = {"format_ok": False, "correct": False, "score": 0.0}
    if limits_refused(args, "check"):
        return 2
    out = _open_output(args, "check")
    if out is None:
        return 2
    parsed = _read_items(args, "check", parse, failed)
    if parsed is None:
        out.discard()
        return 2
    results, todo = parsed
    malformed = sorted(results)
    # the answer formats a check line may use: a bare <answer> payload, no reasoning required
    env = TaskEnv(require_think=False, max_output_chars=args.max_output_chars, code_f={"fractional": args.fractional})
    try:
        sandbox = _open_sandbox(args, determinism_seed(args, "check"))
        try:
            judgements = _run_each([item for _, item in todo], lambda items: check_many(items, sandbox, env))
        finally:
            _close_quietly(sandbox, "check")
    except BaseException:
        out.discard()
        raise
    for (n, _), j in zip(todo, judgements):
        if isinstance(j, Exception):
            results[n] = {"line": n, **failed, "reason": _crash_reason(j), "answer": None}
            continue
        results[n] = {
            "line": n,
            "format_ok": j.format_ok,
            "correct": j.correct,
            "score": j.score,
            "reason": j.reason,
            "answer": j.answer,
        }
    ordered = [results[n] for n in sorted(results)]
    out.commit(ordered)
    refused = sum(reason_kind(r["reason"]) == LIMITS_CHANGED_KIND for r in ordered)
    print(f"{sum(r['correct'] for r in ordered)}/{len(ordered)} correct"
          + (f"; {refused} refused: their task's gold was computed under other sandbox limits than these "
             "(limits_changed:<field>; give the task's own limits to judge them)" if refused else ""),
          file=sys.stderr)
    return input_status(args.file, "check", len(ordered), malformed, results)
