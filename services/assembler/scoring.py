"""Rewards the assembler computes itself: a reward function named by import path, and an
LLM judge. Both score one trajectory at a time, given the task metadata (the session's
own metadata) and the final messages (the last call's messages plus the reply).

A computed reward is written to the store like any other, under an id derived from
the scorer and the trajectory, so a restart finds it instead of scoring again. A
scorer that fails records its error on the rollout, which is then never trained on;
every other rollout goes on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Protocol

from parity.api.common.v1 import llm_call_pb2, reward_pb2
from parity.services.assembler.trajectories import Trajectory


class ScoringError(Exception):
    """A scorer could not produce a reward; `kind` names the error in the stats."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Scorer(Protocol):
    # The reward's source, as stored: "function:pkg.mod:fn", "judge:model".
    source: str

    async def score(self, metadata: dict[str, str], messages: list[dict[str, Any]]) -> float:
        """The reward; raises ScoringError."""
        ...


def reward_id(source: str, session_id: str, trajectory_name: str) -> str:
    digest = hashlib.blake2b(
        f"{source}\x1f{session_id}\x1f{trajectory_name}".encode(), digest_size=16
    )
    return f"scored-{digest.hexdigest()}"


async def score_trajectory(
    scorers: Sequence[Scorer],
    trajectory: Trajectory,
    metadata: dict[str, str],
    existing_reward_ids: set[str],
) -> list[reward_pb2.Reward]:
    """The rewards the scorers give the trajectory, skipping those already stored.
    Raises ScoringError on the first scorer that fails."""
    rewards = []
    messages: list[dict[str, Any]] | None = None
    for scorer in scorers:
        rid = reward_id(scorer.source, trajectory.session_id, trajectory.name)
        if rid in existing_reward_ids:
            continue
        if messages is None:
            messages = final_messages(trajectory.calls)
        value = await scorer.score(metadata, messages)
        rewards.append(reward_pb2.Reward(
            reward_id=rid, session_id=trajectory.session_id, trajectory_name=trajectory.name,
            level=reward_pb2.REWARD_LEVEL_TRAJECTORY, value=value, source=scorer.source,
        ))  # fmt: skip
    return rewards


def final_messages(calls: Sequence[llm_call_pb2.LlmCall]) -> list[dict[str, Any]]:
    """The conversation as the last policy call saw it, plus the reply it got.

    Chat calls give their `messages`; completion calls their `prompt` as one user
    message. The reply is the first choice: its text, and its tool calls if any.
    """
    policy = [c for c in calls if c.kind != llm_call_pb2.CALL_KIND_EXTERNAL] or list(calls)
    if not policy:
        return []
    last = policy[-1]
    try:
        request = json.loads(last.request_json or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ScoringError(
            "malformed_request",
            f"call {last.call_id!r} has request JSON that does not parse: {error}",
        ) from None
    if isinstance(request.get("messages"), list):
        messages = list(request["messages"])
    elif "prompt" in request:
        messages = [{"role": "user", "content": request["prompt"]}]
    else:
        messages = []
    if last.choices:
        choice = last.choices[0]
        reply: dict[str, Any] = {"role": "assistant", "content": choice.text}
        if choice.tool_calls_json:
            try:
                reply["tool_calls"] = json.loads(choice.tool_calls_json)
            except (json.JSONDecodeError, UnicodeDecodeError):
                reply["tool_calls"] = choice.tool_calls_json.decode(errors="replace")
        messages.append(reply)
    return messages
