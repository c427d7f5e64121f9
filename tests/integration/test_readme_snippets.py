"""The README's Python runs as it is printed against `parity up` as a user starts it: its defaults, its
address, its agents' key, its served model.

Every ```python block of README.md runs in a fresh interpreter, in the folder `parity up` was started
from. The one change made to a block is the agents' address: the stack listens on free ports, so
`parity up`'s default address in the text becomes the one this stack printed (and the SDK's own
defaults, which tests/unit/test_front_door.py checks are `parity up`'s, are pointed there through its
environment variables). A block that defines the agent function `solve` is then called on a row of
examples/math/tasks.jsonl, as `parity train` calls it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import StoreClient, admin_metadata
from parity.services.stack.up import build_parser
from tests.conftest import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PORTS = ("store", "ingest", "assembler", "trainer", "vllm", "http", "console")
# What `parity train` hands the agent function: a row of the tasks, plus these.
AGENT_CALL = """
import asyncio, json
from pathlib import Path

import parity

_key = Path({data_dir!r}, "tokens", "agent.token").read_text().strip()
parity.configure(api_key=_key, token=_key)
_task = json.loads(Path({tasks!r}).read_text().splitlines()[0])
_task |= {{"model": parity.get_chat_client().models.list().data[0].id, "max_tokens": 8, "temperature": 1.0}}
with parity.session(task=_task["id"]):
    _reward = asyncio.run(solve(_task))
assert _reward in (0.0, 1.0), _reward
"""


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", markdown, flags=re.MULTILINE | re.DOTALL)


BLOCKS = python_blocks(README.read_text())
DEFAULTS = build_parser().parse_args([])
DEFAULT_AGENTS_ROOT = f"http://{DEFAULTS.host}:{DEFAULTS.http_port}"


@dataclass
class Stack:
    folder: Path
    """Where `parity up` was started: its default data dir is in here."""
    agents_root: str
    """The `agents` line of its banner, less the /v1."""
    ports: dict[str, int]

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("readme")
    ports = {name: free_port() for name in PORTS}
    # No --data-dir: the README reads the key where `parity up` writes it by default.
    command = [sys.executable, "-m", "parity.cli", "up", "--model", str(tiny_model_dir)]
    command += [arg for name, port in ports.items() for arg in (f"--{name}-port", str(port))]
    with (folder / "up.log").open("w") as stderr:
        process = subprocess.Popen(
            command, cwd=folder, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    assert process.stdout is not None  # piped
    try:
        banner: list[str] = []
        while not banner or not banner[-1].startswith("Press Ctrl-C"):
            line = process.stdout.readline()
            assert line, f"parity up exited early:\n{(folder / 'up.log').read_text()[-4000:]}"
            banner.append(line)
        agents = [line.split() for line in banner if line.split()[:1] == ["agents"]]
        assert len(agents) == 1, banner
        printed = agents[0][1]
        assert printed == f"http://127.0.0.1:{ports['http']}/v1", banner
        assert any("agent.token" in line for line in banner), banner
        yield Stack(folder, printed.removesuffix("/v1"), ports)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            exit_code = process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    assert exit_code == 0, (folder / "up.log").read_text()[-4000:]


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block-{n}" for n in range(len(BLOCKS))])
def test_a_readme_python_block_runs_against_parity_up(stack: Stack, block: str) -> None:
    code = block.replace(DEFAULT_AGENTS_ROOT, stack.agents_root)
    if re.search(r"^(async )?def solve\(", code, flags=re.MULTILINE):
        tasks = ROOT / "examples" / "math" / "tasks.jsonl"
        code += AGENT_CALL.format(data_dir=str(DEFAULTS.data_dir), tasks=str(tasks))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PARITY_TOKEN")}
    environment.pop("PARITY_API_KEY", None)
    environment |= {
        "PARITY_INGEST_URL": stack.agents_root,
        "PARITY_ASSEMBLER_ADDRESS": stack.address("assembler"),
        "PARITY_STORE_ADDRESS": stack.address("store"),
    }
    ran = subprocess.run([sys.executable, "-c", code], cwd=stack.folder, env=environment,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ran.returncode == 0, f"README block failed:\n{code}\n--- stderr:\n{ran.stderr[-4000:]}"
    sessions = re.findall(r"/sessions/([\w-]+)/v1[\"']", code)  # in a base URL the block gives
    if sessions:
        # The session its URL names holds the call, once ingest has stored what it captured.
        tokens = stack.folder / DEFAULTS.data_dir / "tokens"
        agent = {"Authorization": f"Bearer {(tokens / 'agent.token').read_text().strip()}"}
        flushed = httpx.post(
            f"{stack.agents_root}/parity/v1/flush", json={}, headers=agent, timeout=60
        )
        assert flushed.status_code == 200, flushed.text
        read = admin_metadata((tokens / "read.token").read_text().strip())
        store = StoreClient(stack.address("store"), metadata=read)
        for session in sessions:
            assert store.list_calls(store_pb.ListCallsRequest(session_id=session)).calls, session
