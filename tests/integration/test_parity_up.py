"""`parity up` brings up all six processes and stops them all on Ctrl-C."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from parity.services.inference.cpu_build import cpu_layout
from parity.services.inference.engine_core_placement import descendants, engine_core_pids
from parity.services.inference.vllm_launcher import vllm_python
from parity.services.runtime.auth import ROLES
from tests.conftest import free_port, free_port_run
from tests.integration.test_grpcurl import SERVICES, grpcurl
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]


def answered(response: httpx.Response) -> httpx.Response | None:
    """The response, unless it is the 503 of an ingest whose replica is not healthy yet."""
    return None if response.status_code == 503 else response


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_parity_up_serves_every_process_and_stops_on_ctrl_c(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    ports = {name: free_port() for name in (*SERVICES, "vllm", "http", "console")}
    command = [
        sys.executable,
        "-m",
        "parity.cli",
        "up",
        "--data-dir",
        str(tmp_path),
        "--model",
        str(tiny_model_dir),
    ]
    command += [arg for name, port in ports.items() for arg in (f"--{name}-port", str(port))]
    # Its own CPU layout, as on a host where nobody set vLLM's cores (make test's workers do).
    environment = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_OMP_THREADS_BIND"}
    stack = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    assert stack.stdout is not None and stack.stderr is not None  # both piped
    try:
        banner: list[str] = []
        while not banner or not banner[-1].startswith("Press Ctrl-C"):
            line = stack.stdout.readline()
            assert line, f"parity up exited early:\n{stack.stderr.read()}"
            banner.append(line)
        for name, full_name in SERVICES.items():
            assert any(f"grpc://127.0.0.1:{ports[name]}" in line for line in banner)
            health = grpcurl(
                "-d",
                json.dumps({"service": full_name}),
                f"127.0.0.1:{ports[name]}",
                "grpc.health.v1.Health/Check",
            )
            assert health.returncode == 0, health.stderr
            assert json.loads(health.stdout) == {"status": "SERVING"}
        assert httpx.get(f"http://127.0.0.1:{ports['vllm']}/health", timeout=10).status_code == 200
        # vLLM's API is keyed: only ingest and the trainer hold the key.
        assert (
            httpx.get(f"http://127.0.0.1:{ports['vllm']}/v1/models", timeout=10).status_code == 401
        )
        # An agent call through ingest lands in the store, once vLLM's replica has been seen healthy.
        agent_url = f"http://127.0.0.1:{ports['http']}/sessions/up-smoke/v1/chat/completions"
        request = {
            "model": tiny_model_dir.name,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 3,
        }
        # Every process authenticates: agents with the generated agent token, operators with read or admin.
        tokens = {
            role: (tmp_path / "tokens" / f"{role}.token").read_text().strip() for role in ROLES
        }
        assert {oct(path.stat().st_mode & 0o777) for path in (tmp_path / "tokens").iterdir()} == {
            "0o600"
        }
        assert httpx.post(agent_url, json=request, timeout=30).status_code == 401
        agent = {"Authorization": f"Bearer {tokens['agent']}"}
        answer = eventually(lambda: answered(httpx.post(agent_url, json=request, headers=agent, timeout=30)),
                            interval_s=0.5, what="an answer once vLLM's replica is healthy")  # fmt: skip
        assert answer.status_code == 200, answer.text
        list_calls = ("-d", '{"session_id": "up-smoke"}', f"127.0.0.1:{ports['store']}",
                      "parity.api.store.v1.TokenStoreService/ListCalls")  # fmt: skip
        assert "Unauthenticated" in grpcurl(*list_calls).stderr
        listed = grpcurl("-H", f"authorization: Bearer {tokens['read']}", *list_calls)
        assert len(json.loads(listed.stdout)["calls"]) == 1
        # No token on any command line another user could read.
        for pid in Path(f"/proc/{stack.pid}/task/{stack.pid}/children").read_text().split():
            argv = Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
            assert not any(token in argv for token in tokens.values()), argv
        console = f"http://127.0.0.1:{ports['console']}"
        assert any(console in line for line in banner)
        assert "up-smoke" in httpx.get(f"{console}/sessions", timeout=30).text
        _assert_services_keep_off_the_models_cores(stack.pid)
    finally:
        # Ctrl-C, and again while it stops, as an impatient user presses it.
        for _ in range(20):
            stack.send_signal(signal.SIGINT)
        exit_code = stack.wait(120)
    assert exit_code == 0, stack.stderr.read()
    eventually(lambda: not any(_port_open(port) for port in ports.values()), timeout_s=10, interval_s=0.2,
               what=lambda: f"every port closed after Ctrl-C ({[name for name, port in ports.items() if _port_open(port)]} open)")  # fmt: skip
    assert (tmp_path / "logs" / "store.log").read_text().strip(), "services log into DATA_DIR/logs"


def _assert_services_keep_off_the_models_cores(stack_pid: int) -> None:
    """With vLLM's CPU build on several cores, its engine core, where the model runs with a thread
    per core, has every core but the last, and the services that serve while it generates run
    on the last; the trainer keeps all."""
    layout = cpu_layout(vllm_python())
    if layout is None:  # vLLM's GPU build, or one core: nothing to lay out
        return
    (engine_core,) = engine_core_pids(stack_pid)
    assert descendants(engine_core) == [], (
        "the model runs in the engine core: it starts no worker process"
    )
    # The engine core inherits the API server's environment (its own is overwritten by its process title).
    (api_server,) = [pid for pid in descendants(stack_pid) if engine_core in descendants(pid)]
    environment = Path(f"/proc/{api_server}/environ").read_bytes().split(b"\0")
    assert f"OMP_NUM_THREADS={len(layout.worker)}".encode() in environment
    assert {
        frozenset(os.sched_getaffinity(int(task)))
        for task in os.listdir(f"/proc/{engine_core}/task")
    } == {frozenset(layout.worker)}
    children = Path(f"/proc/{stack_pid}/task/{stack_pid}/children").read_text().split()
    services = {}
    for pid in map(int, children):
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"parity.cli" in command:
            services[command[command.index(b"parity.cli") + 1].decode()] = pid
    assert set(services) == {*SERVICES, "console"}, services
    everything = os.sched_getaffinity(0)
    for name, pid in services.items():
        expected = everything if name == "trainer" else layout.others
        assert os.sched_getaffinity(pid) == expected, name


def test_parity_up_spreads_agents_over_several_ingests_behind_one_port(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    ports = {
        name: free_port() for name in ("store", "assembler", "trainer", "vllm", "http", "console")
    }
    ingest_port = free_port_run(3)
    command = [sys.executable, "-m", "parity.cli", "up", "--data-dir", str(tmp_path), "--model", str(tiny_model_dir),
               "--ingests", "3", "--ingest-port", str(ingest_port)]  # fmt: skip
    command += [arg for name, port in ports.items() for arg in (f"--{name}-port", str(port))]
    stack = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert stack.stdout is not None and stack.stderr is not None  # both piped
    addresses = [f"127.0.0.1:{ingest_port + n}" for n in range(3)]
    try:
        banner: list[str] = []
        while not banner or not banner[-1].startswith("Press Ctrl-C"):
            line = stack.stdout.readline()
            assert line, f"parity up exited early:\n{stack.stderr.read()}"
            banner.append(line)
        assert [
            n
            for n in range(3)
            if any(f"ingest-{n}" in line and addresses[n] in line for line in banner)
        ] == [0, 1, 2]
        # The trainer pauses and versions all three around each sync.
        trainer_argv = next(
            Path(f"/proc/{pid}/cmdline").read_text().split("\0")
            for pid in Path(f"/proc/{stack.pid}/task/{stack.pid}/children").read_text().split()
            if "trainer" in Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        )
        assert trainer_argv[trainer_argv.index("--ingest-address") + 1] == ",".join(addresses)
        token = (tmp_path / "tokens" / "agent.token").read_text().strip()
        request = {
            "model": tiny_model_dir.name,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
        }
        url = f"http://127.0.0.1:{ports['http']}/sessions/many-ingests/v1/chat/completions"
        for _ in range(30):
            # A connection each: the kernel picks the listening ingest per connection.
            with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
                answer = eventually(lambda: answered(client.post(url, json=request)), interval_s=0.5,
                                    what="an answer once vLLM's replica is healthy")  # fmt: skip
                assert answer.status_code == 200, answer.text
        read = (
            "-H",
            f"authorization: Bearer {(tmp_path / 'tokens' / 'read.token').read_text().strip()}",
        )
        captured = [int(json.loads(grpcurl(*read, address, "parity.api.ingest.v1.IngestService/GetStats").stdout)
                        .get("captured_call_count", 0)) for address in addresses]  # fmt: skip
        assert sum(captured) == 30 and all(captured), captured
        listed = grpcurl(*read, "-d", '{"session_id": "many-ingests", "page_size": 100}', f"127.0.0.1:{ports['store']}",
                         "parity.api.store.v1.TokenStoreService/ListCalls")  # fmt: skip
        assert len(json.loads(listed.stdout)["calls"]) == 30
    finally:
        # Ctrl-C, and again while it stops, as an impatient user presses it.
        for _ in range(20):
            stack.send_signal(signal.SIGINT)
        exit_code = stack.wait(120)
    assert exit_code == 0, stack.stderr.read()
    assert all(not _port_open(ingest_port + n) for n in range(3))
