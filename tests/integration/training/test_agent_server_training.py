"""`parity train --agent-server`: one long-lived agent program serves the run's rollouts through the stack the run
brings up, a process per rollout at once, and a process that hangs is killed at the rollout's timeout, its rollout
recorded as timed out and retried in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import grpc
import psutil
import pytest

from parity.api.common.v1 import session_pb2
from parity.api.store.v1 import store_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2_grpc as pb_grpc
from parity.core import session_slug
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1200)]

AGENT = Path(__file__).with_name("agent_server_agent.py")
PROMPTS = [
    "Tell me about your day.",
    "Describe the sea.",
    "What do you like?",
    "Say something kind.",
]


def stored_sessions(start_service, store_db: Path) -> list:
    store = start_service("store", "--url", f"sqlite:///{store_db}")
    with grpc.insecure_channel(store.address) as channel:
        stub = pb_grpc.TokenStoreServiceStub(channel)
        return list(stub.ListSessions(pb.ListSessionsRequest(page_size=1000)).sessions)


def test_one_agent_program_serves_the_runs_rollouts_and_a_hung_one_times_out_into_a_retry(
    tmp_path, start_service
) -> None:
    (tmp_path / "tasks.jsonl").write_text(
        "".join(json.dumps({"id": f"t{n}", "prompt": p}) + "\n" for n, p in enumerate(PROMPTS))
    )
    logs, hang_mark, runs = tmp_path / "served", tmp_path / "hang-mark", tmp_path / "runs"
    logs.mkdir()
    finished = subprocess.run(
        [sys.executable, "-m", "parity.cli", "train", "--no-progress",
         "--agent-server", f"{sys.executable} {AGENT}", "--tasks", str(tmp_path / "tasks.jsonl"),
         "--model", "tiny-test", "--steps", "2", "--groups-per-batch", "2", "--rollouts-per-task", "2",
         "--max-tokens", "8", "--learning-rate", "3e-3", "--rollout-timeout-s", "20", "--retries", "1",
         "--checkpoint-interval", "0", "--no-export", "--output-dir", str(runs), "--run-id", "served"],
        env={**os.environ, "LOG_DIR": str(logs), "HANG_MARK": str(hang_mark)},
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1100,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-4000:]
    result = json.loads(finished.stdout.splitlines()[-1])
    assert (result["state"], result["steps"]) == ("completed", 2), result

    served = [json.loads(path.read_text()) for path in sorted(logs.iterdir())]
    by_pid = Counter(entry["pid"] for entry in served)
    hung = int(hang_mark.read_text())
    # The hung process served its one request and was killed; the run left no process of the agent behind.
    assert by_pid[hung] == 1
    assert not any(psutil.pid_exists(pid) for pid in by_pid), "every agent process is gone"
    # At most one process per rollout at once (groups_per_batch x rollouts_per_task), and one in place of the
    # hung one; the others served several rollouts each, across both steps.
    assert len(by_pid) <= 2 * 2 + 1
    assert len(served) >= 2 * 2 * 2 + 1 and len(served) > len(by_pid)

    # The hung rollout is recorded as timed out, and its retry, in another process, succeeded.
    sessions = {
        s.session_id: s
        for s in stored_sessions(start_service, runs / "served" / "stack" / "store.db")
    }
    (timed_out,) = [
        s for s in sessions.values() if s.outcome == session_pb2.SESSION_OUTCOME_TIMED_OUT
    ]
    assert timed_out.session_id.endswith("-a0")
    retry = sessions[timed_out.session_id.removesuffix("-a0") + "-a1"]
    assert retry.outcome == session_pb2.SESSION_OUTCOME_SUCCEEDED
    (hung_request,) = [entry for entry in served if entry["pid"] == hung]
    assert session_slug.decode(hung_request["session"]).session_id == timed_out.session_id
