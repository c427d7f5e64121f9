"""Rewarding what an agent did, from inside the agent: `parity.reward(1.0)`."""

from __future__ import annotations

import asyncio
import math

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import reward_pb2
from parity.clients import AssemblerClient
from parity.config import current_config
from parity.core.ids import new_id
from parity.flushing import flush
from parity.sessions import current_session


def reward(
    value: float,
    step: int | str | None = None,
    *,
    reward_id: str | None = None,
    metadata: dict[str, str] | None = None,
    thread: str | None = None,
) -> str:
    """Report a reward for the current trajectory, or for one of its steps.

    A trajectory reward made inside `parity.thread(name)`, or given `thread=name`, scores that thread's
    samples only (a subagent's outcome); `thread=""` scores the whole trajectory from inside a thread.

    `step` is the step's position in the trajectory (0 for its first LLM call) or the
    call id. Returns the reward id; passing the same `reward_id` again is a no-op, so
    retrying is safe. Raises parity.RPCError if the assembler refuses it.

    Waits first until ingest has stored every call made so far (`parity.flush()`), so
    a reward sent right after an answer finds the session or call it names; raises
    parity.FlushError if that cannot be confirmed.
    """
    ref = current_session()
    if ref is None:
        raise RuntimeError(
            "parity.reward() needs an active session: call it inside parity.session() or @trajectory"
        )
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"reward must be a finite number, got {value}")
    message = reward_pb2.Reward(
        reward_id=reward_id or new_id(),
        session_id=ref.session_id,
        trajectory_name=ref.trajectory_name,
        level=reward_pb2.REWARD_LEVEL_TRAJECTORY if step is None else reward_pb2.REWARD_LEVEL_STEP,
        value=value,
        source="sdk",
        metadata=metadata or {},
    )
    thread_id = ref.thread_id if thread is None else thread
    if thread_id and step is None:
        message.thread_id = thread_id
    if isinstance(step, str):
        message.call_id = step
    elif step is not None:
        if step < 0:
            raise ValueError(f"step must be a non-negative index or a call id, got {step}")
        message.step_index = step
    flush()
    client = AssemblerClient(current_config().assembler_address)
    return (
        client.report_reward(assembler_pb.ReportRewardRequest(reward=message)).reward_id
        or message.reward_id
    )


async def areward(value: float, step: int | str | None = None, **options: object) -> str:
    """`reward()` for async code, without blocking the event loop."""
    # to_thread copies the context, so the current session goes with it.
    return await asyncio.to_thread(reward, value, step, **options)  # type: ignore[arg-type]
