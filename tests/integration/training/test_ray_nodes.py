"""`parity train --ray-nodes` on a Ray cluster of two nodes, both started on this machine as a user starts a
cluster (`ray start --head`, then `ray start --address` on the second node, with its own ports and temp dir):
the fsdp backend's ranks run as Ray actors spread over both nodes, train, and pass the weight-sync probe."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, free_port
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]

RAY = Path(sys.executable).parent / "ray"
NODE_CPUS = 2


def node_ports() -> list[str]:
    """Every port a Ray node listens on, free ones, so two nodes on one machine never collide."""
    return [
        "--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
        "--metrics-export-port", str(free_port()), "--runtime-env-agent-port", str(free_port()),
        "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
    ]  # fmt: skip


@contextlib.contextmanager
def ray_node(
    args: list[str], temp_dir: Path, log: Path, environment: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """`ray start ... --block`: the node lives while the command does; stopped with its process group (only the
    processes this node started, never `ray stop`, which would stop every Ray node on the machine)."""
    with log.open("ab") as output:
        node = subprocess.Popen(
            [str(RAY), "start", "--block", "--num-cpus", str(NODE_CPUS), "--num-gpus", "0", "--disable-usage-stats",
             "--temp-dir", str(temp_dir), *node_ports(), *args],
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=environment,
        )  # fmt: skip
    try:
        yield node
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGTERM)
        try:
            node.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()


def ray_nodes_alive(address: str, environment: dict[str, str]) -> int:
    probe = subprocess.run(
        [sys.executable, "-c", f"import ray; ray.init(address={address!r}, log_to_driver=False); "
         "print(sum(node['Alive'] for node in ray.nodes()))"],
        capture_output=True, text=True, timeout=120, env=environment,
    )  # fmt: skip
    return (
        int(probe.stdout.strip().splitlines()[-1])
        if probe.returncode == 0 and probe.stdout.strip()
        else 0
    )


def logged(path: Path, event: str) -> list[dict]:
    lines = (line for line in path.read_text().splitlines() if line.startswith("{"))
    return [entry for entry in map(json.loads, lines) if entry.get("event") == event]


def test_parity_train_spreads_fsdp_ranks_over_two_ray_nodes(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    head_args = ["--head", "--port", str(port), "--node-ip-address", "127.0.0.1", "--include-dashboard", "false",
                 "--ray-client-server-port", str(free_port())]  # fmt: skip
    second_args = ["--address", address, "--node-ip-address", "127.0.0.1"]
    # Ray's token authentication, as a cluster is started now, with this cluster's own token: every node,
    # and every driver (the trainer among them), holds it.
    environment = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    with contextlib.ExitStack() as cluster:
        # Short: Ray's socket paths under it must fit a Unix socket's 107 characters.
        temp_root = Path(cluster.enter_context(tempfile.TemporaryDirectory(prefix="ray-")))
        # The head first; the second node joins it once it is up.
        for name, args in (("head", head_args), ("second", second_args)):
            cluster.enter_context(
                ray_node(args, temp_root / name, tmp_path / f"ray-{name}.log", environment)
            )
            count = 1 if name == "head" else 2

            def joined(count: int = count) -> bool:
                return ray_nodes_alive(address, environment) == count

            def node_log(name: str = name) -> str:
                return f"Ray's {name} node ({(tmp_path / f'ray-{name}.log').read_text()[-2000:]})"

            eventually(joined, timeout_s=180, interval_s=3, what=node_log)
        (tmp_path / "tasks.jsonl").write_text("".join(
            json.dumps({"id": f"t{n}", "prompt": prompt}) + "\n"
            for n, prompt in enumerate(["Say something kind.", "Describe the sea."])
        ))  # fmt: skip
        runs = tmp_path / "runs"
        finished = subprocess.run(
            [sys.executable, "-m", "parity.cli", "train", "--no-progress",
             "--agent", "tests.integration.training.ray_nodes_agent:speak",
             "--tasks", str(tmp_path / "tasks.jsonl"), "--model", str(tiny_model_dir),
             "--backend", "fsdp", "--ray-workers-per-node", "1", "--ray-nodes", "2",
             "--steps", "2", "--groups-per-batch", "1", "--rollouts-per-task", "4", "--max-tokens", "8",
             "--learning-rate", "1e-3", "--checkpoint-interval", "0", "--no-export",
             "--output-dir", str(runs), "--run-id", "ray"],
            env={**environment, "RAY_ADDRESS": address}, cwd=REPO_ROOT, capture_output=True, text=True,
            timeout=1200,
        )  # fmt: skip
        assert finished.returncode == 0, finished.stderr[-4000:]
    result = json.loads(finished.stdout.splitlines()[-1])
    assert (result["state"], result["steps"]) == ("completed", 2), result
    assert result["max_sync_logprob_diff"] is not None and result["max_sync_logprob_diff"] < 1e-3

    # Rank 0 on one node, rank 1 on the other: the policy's ranks ran on both nodes of the cluster.
    trainer_log = runs / "ray" / "stack" / "logs" / "trainer.log"
    (placed,) = logged(trainer_log, "ray_ranks_placed")
    (ranks,) = [entry for entry in logged(trainer_log, "ray_ranks") if not entry["forward_only"]]
    assert len(set(placed["nodes"])) == 2 and ranks["nodes"] == placed["nodes"]
