"""The agent a run trains: a Python function named by import path, or a command in any language.

`pkg.module:function` is imported the way `python -m` would, from the current
directory and PYTHONPATH. A command runs once per rollout with its session's base
URLs in the environment (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`), the session's slug in
`PARITY_SESSION`, and the task as JSON on stdin and in `PARITY_TASK`; it reports its
reward as the last JSON line of its stdout, `{"reward": 0.7}`, or leaves it to the
run's reward function. Timeouts and retries are the agent engine's: a command past
its timeout is killed with its whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parity.config import current_config
from parity.core import session_slug
from parity.sessions import current_session, session_url

# What a failed command's error keeps of its stderr (or of its stdout, when stderr is empty).
STDERR_TAIL_CHARS = 2000


class AgentError(ValueError):
    """An agent (or reward function) that cannot be used; the message says which and why."""


def load_callable(path: str, what: str) -> Callable[..., Any]:
    """`pkg.module:function` (or `pkg.module:Class.method`), imported from the current directory."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise AgentError(f"{what} {path!r}: expected pkg.module:function")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import-time failure means the agent cannot run
        raise AgentError(
            f"{what} {path!r}: cannot import {module_name!r}: {type(error).__name__}: {error}"
        ) from None
    for name in attribute.split("."):
        if not hasattr(target, name):
            raise AgentError(f"{what} {path!r}: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, name)
    if not callable(target):
        raise AgentError(
            f"{what} {path!r}: {attribute!r} is a {type(target).__name__}, not a function"
        )
    return target


def parse_command(command: str, setting: str = "agent_command") -> list[str]:
    """The command's argv; refused here, before anything starts, when its program is not found."""
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise AgentError(f"{setting} {command!r}: {error}") from None
    if not argv:
        raise AgentError(f"{setting} is empty")
    program = argv[0]
    found = (
        shutil.which(program)
        if os.sep not in program
        else (program if os.access(program, os.X_OK) else None)
    )
    if found is None:
        where = "is not an executable file" if os.sep in program else "is not found on PATH"
        raise AgentError(f"{setting} {command!r}: {program!r} {where}")
    return argv


def run_environment() -> dict[str, str]:
    """The run's keys and addresses, as an agent program (a command, or an agent server's process) gets them."""
    config = current_config()
    return {
        "OPENAI_API_KEY": config.api_key,
        "ANTHROPIC_API_KEY": config.api_key,
        # The same agent-role key reaches the assembler (rewards) over gRPC.
        "PARITY_TOKEN": config.api_key,
        "PARITY_INGEST_URL": config.ingest_url,
        "PARITY_ASSEMBLER_ADDRESS": config.assembler_address,
    }


class CommandFailed(RuntimeError):
    """The agent command exited non-zero; the rollout fails with its stderr's tail."""


class CommandAgent:
    """An agent that is a program: one process per rollout, in the rollout's session."""

    def __init__(
        self, argv: list[str], reward: Callable[..., Any] | None = None, cwd: Path | None = None
    ) -> None:
        self.argv = argv
        self.reward = reward
        self.cwd = cwd
        self.__name__ = f"command {shlex.join(argv)}"

    def environment(self, task: dict[str, Any]) -> dict[str, str]:
        ref = current_session()
        environment = run_environment() | {
            "OPENAI_BASE_URL": session_url(),
            "ANTHROPIC_BASE_URL": session_url(api="anthropic"),
            "PARITY_TASK": json.dumps(task),
            "PARITY_MODEL": str(task.get("model", "")),
        }
        if ref is not None:
            environment["PARITY_SESSION"] = session_slug.encode(ref)
        return os.environ | environment

    async def __call__(self, task: dict[str, Any]) -> float | None:
        process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=self.environment(task), cwd=self.cwd, start_new_session=True,
        )  # fmt: skip
        try:
            stdout, stderr = await process.communicate(json.dumps(task).encode())
        except BaseException:
            # A timeout or a cancelled run: the command and everything it started go.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            raise
        output = stdout.decode(errors="replace")
        if process.returncode != 0:
            raise CommandFailed(_failure(self.__name__, process.returncode, stderr, output))
        if self.reward is not None:
            value = self.reward(task, output)
            return await value if inspect.isawaitable(value) else value
        return reward_from_output(output)


def _failure(name: str, returncode: int | None, stderr: bytes, stdout: str) -> str:
    """Why a command failed: its stderr's tail, or, when it said nothing there, its stdout's
    (a CLI agent such as Claude Code reports its errors in its stdout's result)."""
    tail = stderr.decode(errors="replace")[-STDERR_TAIL_CHARS:].strip()
    if tail:
        return f"{name} exited with {returncode}: {tail}"
    said = stdout[-STDERR_TAIL_CHARS:].strip()
    return (
        f"{name} exited with {returncode}: (no stderr); the end of its stdout: {said or '(none)'}"
    )


def reward_from_output(output: str) -> float | None:
    """The reward of the last stdout line that is a JSON object with a "reward"; None without one."""
    for line in reversed(output.strip().splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "reward" in data:
            value = data["reward"]
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise CommandFailed(
                    f'the command printed {line.strip()!r}: "reward" must be a number'
                )
            return float(value)
    return None
