"""What the conformance tests send the store, and how they compare what comes back."""

from __future__ import annotations

from collections.abc import Iterable

from parity.api.common.v1 import llm_call_pb2, reward_pb2
from parity.services.store.commits import WriteResult
from parity.services.store.token_store import TokenStore
from tests.call_factory import make_call

SUCCEEDED, FAILED = 1, 2


async def write(store: TokenStore, calls: Iterable[llm_call_pb2.LlmCall]) -> WriteResult:
    """write_calls takes ownership of its messages; tests keep theirs to compare against."""
    return await store.write_calls(
        [llm_call_pb2.LlmCall.FromString(c.SerializeToString()) for c in calls]
    )


def wire(calls) -> list[bytes]:
    return [c.SerializeToString(deterministic=True) for c in calls]


async def all_calls(store: TokenStore, session_id: str, page_size: int = 7) -> list:
    calls, token = [], ""
    while True:
        page, token = await store.list_calls(session_id, page_size, token, full=True)
        calls += page
        if not token:
            return calls


def one_call(call_id: str = "c1", session_id: str = "s1", **fields) -> llm_call_pb2.LlmCall:
    return make_call(call_id, session_id, [1], [[2]], **fields)


def reward(
    reward_id: str, session_id: str, value: float, *, name: str = "", **step
) -> reward_pb2.Reward:
    """A trajectory reward, or a step reward given call_id= or step_index=."""
    level = reward_pb2.REWARD_LEVEL_STEP if step else reward_pb2.REWARD_LEVEL_TRAJECTORY
    return reward_pb2.Reward(
        reward_id=reward_id, session_id=session_id, level=level, value=value, name=name, **step
    )
