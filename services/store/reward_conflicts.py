"""When a reward id written again is a retry, and when it is a conflict.

Writes are idempotent by `reward_id`: a retry repeats the reward, and is counted as a
duplicate. The same id with another value or target is not a retry (a feedback id
reused for another signal, two scorers sharing ids) and is refused, so a reward once
stored never silently changes meaning. What a retry must repeat is the reward's
content: where it lands (session, trajectory, level, step), its value and its name.
When it was made, by what, and its metadata may differ between attempts.
"""

from __future__ import annotations

from parity.api.common.v1 import reward_pb2

RewardContent = tuple[str, str, int, str | None, str | int | None, float, str, str]


def reward_content(reward: reward_pb2.Reward) -> RewardContent:
    """What two writes of one reward id must agree on."""
    step = reward.WhichOneof("step")
    at: str | int | None = None
    if step == "call_id":
        at = reward.call_id
    elif step == "step_index":
        at = reward.step_index
    return (reward.session_id, reward.trajectory_name, reward.level, step, at, reward.value, reward.name,
            reward.thread_id)  # fmt: skip


def describe(reward: reward_pb2.Reward) -> str:
    """`value 1.0 (session 's', call 'c', name 'thumbs_up')`: a reward's content, for messages."""
    where = [f"session {reward.session_id!r}"]
    if reward.trajectory_name:
        where.append(f"trajectory {reward.trajectory_name!r}")
    if reward.thread_id:
        where.append(f"thread {reward.thread_id!r}")
    step = reward.WhichOneof("step")
    if step == "call_id":
        where.append(f"call {reward.call_id!r}")
    elif step == "step_index":
        where.append(f"step {reward.step_index}")
    if reward.name:
        where.append(f"name {reward.name!r}")
    return f"value {reward.value!r} ({', '.join(where)})"


def conflict_message(reward_id: str, stored: reward_pb2.Reward, refused: reward_pb2.Reward) -> str:
    return (
        f"reward_id {reward_id!r} is already stored with {describe(stored)}; refused {describe(refused)}:"
        " writing a reward id again must repeat its value and target"
    )
