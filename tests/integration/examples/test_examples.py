"""The examples against a deployed stack and real vLLM, with what each one exists to show checked on what
was captured: most trained from their own TOML file for a few steps; the RAG agent's episodes run alone
(the generated model never answers a fact right, so its groups would never vary)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

import parity
from examples.rag.agent import episode as rag_episode
from examples.rag.corpus import library
from examples.rag.graph import MAX_MODEL_CALLS, SEARCH_COMMAND
from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.api.assembler.v1 import trajectory_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import AssemblerClient, StoreClient
from parity.training.config_file import load_file
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]
EXAMPLES = REPO_ROOT / "examples"
CLOSED, SUCCEEDED = 2, 1


def train_example(stack, name: str, tmp_path: Path, **overrides) -> parity.TrainResult:
    """The example's own config, shortened to a couple of small steps on the test's stack."""
    values, _ = load_file(EXAMPLES / name / "train.toml")
    values |= {"steps": 2, "groups_per_batch": 2, "rollouts_per_task": 2, "val_samples": 1, "progress": False,
               "stack": stack.addresses, "model": str(stack.vllm.config.model_path),
               "output_dir": str(tmp_path / "runs"), **overrides}  # fmt: skip
    result = parity.train(**values)
    assert result.state == "completed", result.error
    return result


def rollout_sessions(stack, run_id: str) -> list[trajectory_pb2.Trajectory]:
    listed = AssemblerClient(stack.assembler.address).list_trajectories(
        pb.ListTrajectoriesRequest(page_size=1000)
    )
    return [t for t in listed.trajectories if t.session_id.startswith(f"{run_id}-s")]


def trajectory(stack, session_id: str, name: str = "") -> trajectory_pb2.Trajectory:
    request = pb.GetTrajectoryRequest(session_id=session_id, trajectory_name=name)
    return AssemblerClient(stack.assembler.address).get_trajectory(request).trajectory


def test_math_agent_trains_with_validation_and_every_rollout_is_captured_closed_and_rewarded(
    deployed_stack, tmp_path
) -> None:
    result = train_example(deployed_stack, "math", tmp_path, val_every=1, rollouts_per_task=8)
    assert result.val_reward_before is not None and result.val_reward_after is not None
    store = StoreClient(deployed_stack.store.address)
    sessions = rollout_sessions(deployed_stack, result.run_id)
    assert len(sessions) >= 2 * 2 * 2
    for view in sessions[:4]:
        session = store.get_session(store_pb.GetSessionRequest(session_id=view.session_id)).session
        assert (session.state, session.outcome, session.call_count) == (CLOSED, SUCCEEDED, 1)
        assert session.metadata["parity.run_id"] == result.run_id
        assert view.has_reward and view.reward in (0.0, 0.1, 1.0)


def test_solver_judge_has_two_trajectories_and_step_rewards_and_validates_by_the_solver(
    deployed_stack, tmp_path
) -> None:
    result = train_example(deployed_stack, "solver_judge", tmp_path)
    assert result.val_reward_before is not None and result.val_reward_after is not None, (
        "val_trajectory scores it"
    )
    sessions = {t.session_id for t in rollout_sessions(deployed_stack, result.run_id)}
    assert sessions
    for session_id in sorted(sessions)[:4]:
        solver = trajectory(deployed_stack, session_id, "solver")
        assert len(solver.steps) == 2 and all(step.has_reward for step in solver.steps)
        judge = trajectory(deployed_stack, session_id, "judge")
        assert len(judge.steps) == 1 and judge.has_reward


def test_langgraph_agent_feeds_tool_results_back_with_no_parity_inside(
    deployed_stack, tmp_path
) -> None:
    graph_source = (EXAMPLES / "langgraph_tools" / "graph.py").read_text()
    assert "parity" not in graph_source, "the graph must be configured by URL alone"
    result = train_example(deployed_stack, "langgraph_tools", tmp_path, val_tasks=None)
    store = StoreClient(deployed_stack.store.address)
    for view in rollout_sessions(deployed_stack, result.run_id)[:4]:
        calls = store.list_calls(
            store_pb.ListCallsRequest(session_id=view.session_id, view=store_pb.CALL_VIEW_FULL)
        ).calls
        assert len(calls) >= 2, "each episode makes several LLM calls"
        turns = [json.loads(call.request_json)["messages"] for call in calls]
        detail = [
            (c.outcome, c.error_message[:200], len(m)) for c, m in zip(calls, turns, strict=True)
        ]
        assert all(
            len(later) > len(earlier) for earlier, later in zip(turns, turns[1:], strict=False)
        ), detail
        fed_back = [m for messages in turns for m in messages if m["role"] in ("tool", "user")][1:]
        assert fed_back, "tool results (or, for a malformed call, the error) are fed back"
        assert view.has_reward


def test_rag_agent_searches_first_and_reads_back_the_entry_its_query_found_with_no_parity_inside(
    deployed_stack,
) -> None:
    assert "parity" not in (EXAMPLES / "rag" / "graph.py").read_text(), (
        "the graph must be configured by URL alone"
    )
    tasks = [
        json.loads(line)
        for line in (EXAMPLES / "rag" / "val_tasks.jsonl").read_text().splitlines()[:3]
    ]
    previous = parity.current_config()
    parity.configure(ingest_url=deployed_stack.addresses.ingest_url)
    try:
        sessions = []
        for task in tasks:
            with parity.session() as session:
                assert rag_episode(
                    task | {"model": "tiny", "max_tokens": 8, "temperature": 1.0}
                ) in (0.0, 1.0)
            sessions.append(session.session_id)
    finally:
        parity.configure(ingest_url=previous.ingest_url)
    assert (
        httpx.post(f"{deployed_stack.addresses.ingest_url}/parity/v1/flush", timeout=60).status_code
        == 200
    )
    store = StoreClient(deployed_stack.store.address)
    for session_id in sessions:
        calls = store.list_calls(
            store_pb.ListCallsRequest(session_id=session_id, view=store_pb.CALL_VIEW_FULL)
        ).calls
        assert 2 <= len(calls) <= MAX_MODEL_CALLS, (
            "the first reply is always a search, and the result comes back"
        )
        query = calls[0].choices[0].text
        command = SEARCH_COMMAND.search(query)
        read_back = json.loads(calls[1].request_json)["messages"][-1]
        assert read_back == {
            "role": "user",
            "content": f"Result: {library().search(command.group(1) if command else query)}",
        }
