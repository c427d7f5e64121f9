"""An agent that stays up: one program, started once, serves rollout after rollout over JSON lines.

`agent_server = "python my_agent.py"` starts the program and writes it one request per
rollout on stdin, a JSON object on one line; the program answers on stdout with one line
carrying the same `id` (agent_server_protocol says what both lines hold). Its imports,
model files and clients are paid once, not once per rollout as with `agent_command`.

Each process serves one rollout at a time, and the pool starts another process when
every one is busy, so there are as many as rollouts run at once (`concurrency`): an
agent in any language is a plain read-answer loop, and a process that hangs or dies
takes only its own rollout down. A rollout past its timeout, or cancelled, kills its
process with every process it started; a process that exits while serving fails its
rollout with its exit status and its stderr's tail. Either way the next rollout starts
a fresh process in its place, and timeouts and retries stay the agent engine's.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import inspect
import itertools
import os
import shlex
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from parity.core import session_slug
from parity.sessions import current_session, session_url
from parity.training.agent_server_protocol import (
    AgentServerFailed,
    ProtocolError,
    encode_request,
    read_reply,
    reply_output,
    reply_reward,
)
from parity.training.agents import run_environment

__all__ = ["AgentServer", "AgentServerFailed", "ProtocolError"]

log = structlog.get_logger(__name__)

# What a failure's message keeps of the process's stderr (or of the stdout lines that were no reply).
OUTPUT_TAIL_CHARS = 2000
# The longest line the process may write: a reply's output may be a whole transcript.
LINE_LIMIT = 64 * 1024 * 1024
# How long a process told to stop (its stdin closed) has before it is killed.
STOP_GRACE_S = 5.0
# Process groups still running, killed if the interpreter exits without closing their pool.
_live_groups: set[int] = set()


class AgentServer:
    """An agent that is a long-lived program: a pool of its processes, each serving one rollout at a time."""

    def __init__(
        self, argv: list[str], reward: Callable[..., Any] | None = None, cwd: Path | None = None,
        name: str = "",
    ) -> None:  # fmt: skip
        self.argv = argv
        self.reward = reward
        self.cwd = cwd
        self.__name__ = name or f"agent server {shlex.join(argv)}"
        self._idle: list[ServerProcess] = []
        self._busy: set[ServerProcess] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count(1)
        self.started = 0
        """Processes started so far: one per rollout running at once, plus one for each that died or hung."""

    async def __call__(self, task: dict[str, Any]) -> float | None:
        process = await self._take()
        request_id = str(next(self._ids))
        ref = current_session()
        request = encode_request(
            request_id, task, openai_base_url=session_url(), anthropic_base_url=session_url(api="anthropic"),
            session=session_slug.encode(ref) if ref is not None else None,
        )  # fmt: skip
        try:
            reply = await process.serve(request, request_id)
        except BaseException:
            # Timed out, cancelled, dead or out of step: this process serves nothing more.
            self._busy.discard(process)
            await process.kill()
            raise
        self._busy.discard(process)
        self._idle.append(process)
        if self.reward is None:
            return reply_reward(reply, self.__name__)
        value = self.reward(task, reply_output(reply, self.__name__))
        return await value if inspect.isawaitable(value) else value

    async def _take(self) -> ServerProcess:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # Processes started on another event loop (a script's earlier asyncio.run) cannot be read from here.
            self._abandon()
            self._loop = loop
        while self._idle:
            process = self._idle.pop()
            if process.running:
                self._busy.add(process)
                return process
            log.warning("agent_server_exited_idle", server=self.__name__, why=process.exit_reason())
            await process.kill()
        process = ServerProcess(self.argv, self.cwd, self.__name__)
        self._busy.add(process)
        try:
            await process.start()
        except BaseException:
            self._busy.discard(process)
            raise
        self.started += 1
        if self.started > 1:
            log.info("agent_server_started", server=self.__name__, processes=self.started)
        return process

    async def aclose(self) -> None:
        """Ask every process to stop (its stdin closes), and kill those still running after a grace period."""
        processes = [*self._idle, *self._busy]
        self._idle.clear()
        self._busy.clear()
        await asyncio.gather(*(process.stop(STOP_GRACE_S) for process in processes))

    def _abandon(self) -> None:
        for process in [*self._idle, *self._busy]:
            process.kill_now()
        self._idle.clear()
        self._busy.clear()


class ServerProcess:
    """One process of an agent server: its pipes, and the tail of what it wrote that was no reply."""

    def __init__(self, argv: list[str], cwd: Path | None, name: str) -> None:
        self.argv = argv
        self.cwd = cwd
        self.name = name
        self._process: asyncio.subprocess.Process | None = None
        self._stderr_tail = b""
        self._stdout_tail = ""
        self._stderr_reader: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=server_environment(), cwd=self.cwd, start_new_session=True, limit=LINE_LIMIT,
        )  # fmt: skip
        _live_groups.add(self._process.pid)
        self._stderr_reader = asyncio.create_task(self._keep_stderr_tail())

    async def serve(self, request: bytes, request_id: str) -> dict[str, Any]:
        """Write one request and read until its reply; raises AgentServerFailed when the process exits first."""
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(request)
            await process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise AgentServerFailed(await self._exited("before it read the request")) from None
        while True:
            try:
                line = await process.stdout.readline()
            except ValueError:
                raise AgentServerFailed(
                    f"{self.name} wrote a line longer than {LINE_LIMIT} bytes on stdout"
                ) from None
            if not line:
                raise AgentServerFailed(await self._exited("before it replied"))
            try:
                reply = read_reply(line, request_id)
            except ProtocolError as error:
                raise ProtocolError(f"{self.name}: {error}") from None
            if reply is not None:
                return reply
            # A line that is no reply (the agent's or a library's print) is kept for a failure's message.
            self._stdout_tail = (self._stdout_tail + line.decode(errors="replace"))[
                -OUTPUT_TAIL_CHARS:
            ]

    async def _exited(self, when: str) -> str:
        """Why the process ended: its exit status and stderr's tail, or the stdout it wrote that was no reply."""
        assert self._process is not None
        try:
            await asyncio.wait_for(self._process.wait(), STOP_GRACE_S)
        except TimeoutError:
            # It closed stdout but lives on: it can serve nothing more.
            await self.kill()
            return f"{self.name} closed its stdout {when} and was killed"
        if self._stderr_reader is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._stderr_reader), STOP_GRACE_S)
        return f"{self.name} exited with {self._process.returncode} {when}: {self.exit_reason()}"

    def exit_reason(self) -> str:
        tail = self._stderr_tail.decode(errors="replace")[-OUTPUT_TAIL_CHARS:].strip()
        if tail:
            return tail
        said = self._stdout_tail.strip()
        return f"(no stderr); the end of its stdout: {said or '(none)'}"

    async def _keep_stderr_tail(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        while chunk := await self._process.stderr.read(65536):
            self._stderr_tail = (self._stderr_tail + chunk)[-4 * OUTPUT_TAIL_CHARS :]

    async def stop(self, grace_s: float) -> None:
        process = self._process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), grace_s)
        # The program is gone (or had its grace): whatever it started goes too.
        await self.kill()

    async def kill(self) -> None:
        """The process and everything it started, killed and waited for."""
        process = self._process
        if process is None:
            return
        self.kill_now()
        await process.wait()
        if self._stderr_reader is not None:
            self._stderr_reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stderr_reader

    def kill_now(self) -> None:
        if self._process is None:
            return
        _kill_group(self._process.pid)


def server_environment() -> dict[str, str]:
    """What every process of an agent server gets: the run's keys and addresses; a rollout's session comes with its
    request."""
    environment = os.environ | run_environment()
    # A session the run itself was started in is no rollout's.
    environment.pop("PARITY_SESSION", None)
    return environment


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    _live_groups.discard(pid)


@atexit.register
def _kill_live_groups() -> None:
    for pid in list(_live_groups):
        _kill_group(pid)
