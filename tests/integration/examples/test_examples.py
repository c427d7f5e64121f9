"""The three examples, run by the agent engine against the real stack and vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples import math_agent, solver_judge
from examples.langgraph_tools import run as langgraph_run
from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import AssemblerClient, StoreClient

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]
CLOSED, SUCCEEDED = 2, 1


def trajectory(stack, session_id: str, name: str = "") -> pb.Trajectory:
    request = pb.GetTrajectoryRequest(session_id=session_id, trajectory_name=name)
    return AssemblerClient(stack.assembler.address).get_trajectory(request).trajectory


def test_math_agent_rollouts_are_captured_closed_and_rewarded(full_stack, vllm_server) -> None:
    results = math_agent.main(["--model", vllm_server.model_name, "--tasks", "3", "--rollouts", "2"])
    assert len(results) == 6 and all(r.outcome == "succeeded" for r in results)
    store = StoreClient(full_stack.store.address)
    for result in results:
        session = store.get_session(store_pb.GetSessionRequest(session_id=result.session_id)).session
        assert (session.state, session.outcome, session.call_count) == (CLOSED, SUCCEEDED, 1)
        assert session.metadata["task"] == result.task_id
        traj = trajectory(full_stack, result.session_id)
        assert traj.has_reward and traj.reward == result.reward and traj.group_id == result.group_id


def test_solver_judge_has_two_trajectories_and_step_rewards(full_stack, vllm_server) -> None:
    results = solver_judge.main(["--model", vllm_server.model_name, "--tasks", "2", "--rollouts", "2"])
    assert len(results) == 4 and all(r.outcome == "succeeded" and r.reward is None for r in results)
    for result in results:
        solver = trajectory(full_stack, result.session_id, "solver")
        assert len(solver.steps) == 2 and all(step.has_reward for step in solver.steps)
        judge = trajectory(full_stack, result.session_id, "judge")
        assert len(judge.steps) == 1 and judge.has_reward


def test_langgraph_agent_feeds_tool_results_back_with_no_parity_inside(full_stack, vllm_server) -> None:
    graph_source = Path(langgraph_run.__file__).with_name("graph.py").read_text()
    assert "parity" not in graph_source, "the graph must be configured by URL alone"
    results = langgraph_run.main(["--model", vllm_server.model_name, "--tasks", "2", "--rollouts", "2"])
    assert all(r.outcome == "succeeded" for r in results)
    for result in results:
        calls = full_stack.calls(result.session_id)
        assert len(calls) >= 2, "each episode makes several LLM calls"
        turns = [json.loads(call.request_json)["messages"] for call in calls]
        detail = [(c.outcome, c.error_message[:200], len(m)) for c, m in zip(calls, turns, strict=True)]
        assert all(len(later) > len(earlier) for earlier, later in zip(turns, turns[1:], strict=False)), detail
        fed_back = [m for messages in turns for m in messages if m["role"] in ("tool", "user")][1:]
        assert fed_back, "tool results (or, for a malformed call, the error) are fed back"
        assert trajectory(full_stack, result.session_id).has_reward
