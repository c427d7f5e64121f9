"""Agents named by import path or run as commands."""

from __future__ import annotations

import pytest

from parity.training.agents import (
    AgentError,
    CommandAgent,
    CommandFailed,
    load_callable,
    parse_command,
    reward_from_output,
)


def test_an_import_path_names_a_function_or_a_method() -> None:
    import json

    assert load_callable("json:dumps", "agent") is json.dumps
    assert load_callable("json:JSONDecoder.decode", "agent") is json.JSONDecoder.decode


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("json", "expected pkg.module:function"),
        ("json:nothing_here", "'json' has no attribute 'nothing_here'"),
        ("json:__doc__", "is a str, not a function"),
        (
            "no_such_module_anywhere:f",
            "cannot import 'no_such_module_anywhere': ModuleNotFoundError",
        ),
    ],
)
def test_an_unusable_agent_is_refused_with_the_reason(path: str, message: str) -> None:
    with pytest.raises(AgentError, match=message):
        load_callable(path, "agent")


def test_commands_are_found_before_anything_starts(tmp_path) -> None:
    assert parse_command("sh -c 'echo hi'") == ["sh", "-c", "echo hi"]
    with pytest.raises(AgentError, match="not found on PATH"):
        parse_command("definitely-not-a-program")
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(AgentError, match="is not an executable file"):
        parse_command(str(script))
    with pytest.raises(AgentError, match="No closing quotation"):
        parse_command("sh -c 'unclosed")


def test_the_reward_is_the_last_json_line_with_a_reward() -> None:
    assert (
        reward_from_output('{"reward": 0.1}\nthinking...\n{"reward": 0.7}\n{"other": 1}\n') == 0.7
    )
    assert reward_from_output("no json at all\n") is None
    assert reward_from_output('{"reward": null}') is None
    with pytest.raises(CommandFailed, match="must be a number"):
        reward_from_output('{"reward": "high"}')


async def test_a_failed_command_says_why_from_its_stderr_or_else_its_stdout() -> None:
    with pytest.raises(CommandFailed, match=r"exited with 2: broken pipe to nowhere$"):
        await CommandAgent(
            ["sh", "-c", "echo progress; echo 'broken pipe to nowhere' >&2; exit 2"]
        )({})
    # A CLI agent such as Claude Code reports its API errors in its stdout's result, with nothing on stderr.
    result = '{"type": "result", "is_error": true, "result": "API Error: response exceeded the 32 output token maximum"}'
    with pytest.raises(
        CommandFailed,
        match=r"exited with 1: \(no stderr\); the end of its stdout: .*exceeded the 32",
    ):
        await CommandAgent(["sh", "-c", f"echo '{result}'; exit 1"])({})
