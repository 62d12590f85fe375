"""The command line reads evenly: run directories are positional everywhere (eval also takes --runs),
and every option of the user-facing commands says what it does."""

from __future__ import annotations

import argparse

import pytest

from populora.cli import build_parser, main

COMMANDS = ("train", "status", "demo", "eval", "leaderboard", "score", "sweep", "report", "retention", "plan")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help(command):
    parser = subparsers(build_parser())[command]
    missing = [a.option_strings or a.dest for a in parser._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not a.help]
    assert missing == [], f"populora {command}: options without help: {missing}"


def test_eval_takes_run_directories_as_arguments_or_after_runs(capsys, monkeypatch):
    import populora.commands.eval as eval_cmd

    seen = []
    monkeypatch.setattr(eval_cmd, "run_eval", lambda args: seen.append(args.runs) or 0)
    assert main(["eval", "runs/a", "runs/b", "--benchmarks", "gsm8k"]) == 0
    assert main(["eval", "--runs", "runs/a", "--benchmarks", "gsm8k"]) == 0
    assert seen == [["runs/a", "runs/b"], ["runs/a"]]
    assert main(["eval", "--benchmarks", "gsm8k"]) == 2
    assert capsys.readouterr().err.strip() == ("populora eval: give run directories: populora eval RUN_DIR ... "
                                               "(or --runs RUN_DIR ...)")
