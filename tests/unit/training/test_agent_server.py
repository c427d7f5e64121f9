"""An agent server: one long-lived program serving rollout after rollout over JSON lines, its failures each failing
the rollout in flight with the reason, and a fresh process in place of one that died or hung."""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest

import parity
from parity.core import session_slug
from parity.training import agent_server
from parity.training.agent_server import AgentServer, AgentServerFailed, ProtocolError
from parity.training.agent_server_protocol import encode_request, read_reply, reply_reward
from tests.waiting import eventually_async

# A server that answers each request by what its task asks for; it writes each request it reads, and its pid, to
# LOG_DIR, so a test sees which process served what.
SERVER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    served = 0
    for line in sys.stdin:
        request = json.loads(line)
        task = request["task"]
        served += 1
        with open(os.path.join(os.environ["LOG_DIR"], f"{os.getpid()}-{served}.json"), "w") as log:
            json.dump(request, log)
        do = task.get("do", "reward")
        if do == "print":
            print("thinking about it...")
            print(json.dumps({"progress": 0.5}))
        if do == "die":
            print("about to fail", file=sys.stderr)
            sys.exit(3)
        if do == "hang":
            # A child in the process group, which goes with it.
            child = subprocess.Popen(["sleep", "600"])
            open(os.path.join(os.environ["LOG_DIR"], f"child-{child.pid}"), "w").close()
            time.sleep(600)
        if do == "error":
            reply = {"id": request["id"], "error": "the sandbox said no"}
        elif do == "no_id":
            reply = {"reward": 1.0}
        elif do == "wrong_id":
            reply = {"id": "someone-else", "reward": 1.0}
        elif do == "text_reward":
            reply = {"id": request["id"], "reward": "high"}
        elif do == "output":
            reply = {"id": request["id"], "output": task["answer"] + "!"}
        elif do == "none":
            reply = {"id": request["id"], "reward": None}
        else:
            reply = {"id": request["id"], "reward": served, "pid": os.getpid()}
        print(json.dumps(reply), flush=True)
    """
)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AgentServer:
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "log").mkdir()
    monkeypatch.setenv("LOG_DIR", str(tmp_path / "log"))
    return AgentServer([sys.executable, str(tmp_path / "server.py")])


def requests_served(log_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(log_dir.glob("*.json"))]


async def test_one_process_serves_rollout_after_rollout_each_in_its_session(
    server: AgentServer, tmp_path: Path
) -> None:
    try:
        rewards = []
        for n in range(3):
            with parity.session(f"rollout-{n}", task="t1"):
                rewards.append(await server({"id": "t1", "question": "2 + 3?", "model": "policy"}))
        # One process: the third request is the third it served.
        assert rewards == [1.0, 2.0, 3.0] and server.started == 1
        requests = requests_served(tmp_path / "log")
        assert [session_slug.decode(r["session"]).session_id for r in requests] == [
            "rollout-0",
            "rollout-1",
            "rollout-2",
        ]
        first = requests[0]
        assert first["task"] == {"id": "t1", "question": "2 + 3?", "model": "policy"}
        assert first["openai_base_url"].endswith(f"/sessions/{first['session']}/v1")
        assert first["anthropic_base_url"].endswith(f"/sessions/{first['session']}")
        assert len({r["id"] for r in requests}) == 3
    finally:
        await server.aclose()


async def test_rollouts_at_once_get_a_process_each_which_serve_on_afterwards(
    server: AgentServer, tmp_path: Path
) -> None:
    try:
        await asyncio.gather(*(server({"id": f"t{n}"}) for n in range(3)))
        await asyncio.gather(*(server({"id": f"t{n}"}) for n in range(3)))
        pids = {r.name.split("-")[0] for r in (tmp_path / "log").glob("*.json")}
        assert server.started == 3 and len(pids) == 3
    finally:
        await server.aclose()


async def test_prints_on_stdout_are_passed_over(server: AgentServer) -> None:
    try:
        assert await server({"do": "print"}) == 1.0
        assert await server({"do": "none"}) is None
    finally:
        await server.aclose()


async def test_an_error_reply_fails_its_rollout_and_the_process_serves_on(
    server: AgentServer,
) -> None:
    try:
        with pytest.raises(AgentServerFailed, match=r"server\.py: the sandbox said no$"):
            await server({"do": "error"})
        with pytest.raises(ProtocolError, match='"reward" must be a number or null'):
            await server({"do": "text_reward"})
        assert await server({}) == 3.0 and server.started == 1
    finally:
        await server.aclose()


async def test_a_process_that_dies_fails_its_rollout_with_its_stderr_and_is_replaced(
    server: AgentServer,
) -> None:
    try:
        assert await server({}) == 1.0
        with pytest.raises(
            AgentServerFailed, match=r"exited with 3 before it replied: about to fail$"
        ):
            await server({"do": "die"})
        # A fresh process: its first request.
        assert await server({}) == 1.0 and server.started == 2
    finally:
        await server.aclose()


async def test_a_hung_process_past_the_timeout_is_killed_with_its_children_and_replaced(
    server: AgentServer, tmp_path: Path
) -> None:
    try:
        assert await server({}) == 1.0
        (hung_pid,) = {int(p.name.split("-")[0]) for p in (tmp_path / "log").glob("*.json")}
        # What the agent engine does with rollout_timeout_s.
        hanging = asyncio.create_task(asyncio.wait_for(server({"do": "hang"}), 6))
        child = await eventually_async(
            lambda: next((tmp_path / "log").glob("child-*"), None), timeout_s=10
        )
        with pytest.raises(TimeoutError):
            await hanging
        for pid in (hung_pid, int(child.name.split("-")[1])):
            await eventually_async(
                functools.partial(gone, pid), timeout_s=10, what=f"pid {pid} gone"
            )
        assert await server({}) == 1.0 and server.started == 2
    finally:
        await server.aclose()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize(
    ("do", "message"),
    [
        ("no_id", r"replied '\{\"reward\": 1.0\}' without the request's id"),
        ("wrong_id", "replied to id 'someone-else' while serving request"),
    ],
)
async def test_a_reply_out_of_step_fails_at_once_and_the_process_is_replaced(
    server: AgentServer, do: str, message: str
) -> None:
    try:
        with pytest.raises(ProtocolError, match=message):
            await asyncio.wait_for(server({"do": do}), 30)
        assert await server({}) == 1.0 and server.started == 2
    finally:
        await server.aclose()


async def test_the_runs_reward_function_scores_the_replys_output(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "server.py").write_text(SERVER)
    monkeypatch.setenv("LOG_DIR", str(tmp_path))

    async def score(task: dict[str, Any], output: str) -> float:
        return 1.0 if output == task["answer"] + "!" else 0.0

    scored = AgentServer([sys.executable, str(tmp_path / "server.py")], reward=score)
    try:
        assert await scored({"do": "output", "answer": "5"}) == 1.0
        with pytest.raises(ProtocolError, match="scores output with its reward function"):
            await scored({})
    finally:
        await scored.aclose()


async def test_a_program_that_will_not_start_serving_fails_each_rollout_saying_why(
    tmp_path: Path,
) -> None:
    broken = AgentServer([sys.executable, "-c", "import no_such_module_anywhere"])
    with pytest.raises(
        AgentServerFailed,
        match=r"(?s)exited with 1 before it (read the request|replied): .*ModuleNotFoundError: No module named",
    ):
        await broken({})
    await broken.aclose()


async def test_closing_stops_idle_processes_and_kills_one_that_ignores_its_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_server, "STOP_GRACE_S", 1.0)
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text(
        "import json, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "request = json.loads(sys.stdin.readline())\n"
        "print(json.dumps({'id': request['id'], 'reward': 1}), flush=True)\n"
        "time.sleep(600)\n"
    )
    servers = [AgentServer([sys.executable, str(stubborn)])]
    (tmp_path / "log").mkdir()
    monkeypatch.setenv("LOG_DIR", str(tmp_path / "log"))
    (tmp_path / "server.py").write_text(SERVER)
    servers.append(AgentServer([sys.executable, str(tmp_path / "server.py")]))
    for each in servers:
        assert await each({}) == 1.0
    pids = [process._process.pid for each in servers for process in each._idle]  # type: ignore[union-attr]
    for each in servers:
        await each.aclose()
    assert len(pids) == 2 and all(gone(pid) for pid in pids)


def test_a_request_is_one_line_and_a_reply_is_matched_by_its_id() -> None:
    line = encode_request("7", {"id": "t", "prompt": "two\nlines"}, openai_base_url="http://i/sessions/s/v1",
                          anthropic_base_url="http://i/sessions/s", session="s")  # fmt: skip
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["task"]["prompt"] == "two\nlines"
    assert read_reply(b"not json\n", "7") is None
    assert read_reply(b'["a list"]\n', "7") is None
    assert read_reply(b'{"log": "a print of its own"}\n', "7") is None
    assert read_reply(b'{"id": "7", "reward": 0.5}\n', "7") == {"id": "7", "reward": 0.5}
    with pytest.raises(ProtocolError, match="replied to id 8"):
        read_reply(b'{"id": 8, "reward": 0.5}\n', "7")
    assert reply_reward({"id": "7", "reward": 1}, "server") == 1.0
    with pytest.raises(ProtocolError, match='carries "reward"'):
        reply_reward({"id": "7"}, "server")
    with pytest.raises(ProtocolError, match="must be a number"):
        reply_reward({"id": "7", "reward": True}, "server")


def test_the_environment_carries_the_runs_keys_and_no_session(monkeypatch) -> None:
    monkeypatch.setenv("PARITY_SESSION", "outer-session")
    environment = agent_server.server_environment()
    assert "PARITY_SESSION" not in environment
    assert (
        environment["OPENAI_API_KEY"]
        == environment["PARITY_TOKEN"]
        == parity.current_config().api_key
    )
    assert environment["PARITY_INGEST_URL"] == parity.current_config().ingest_url
