"""Reward ids on every backend: a retry is a duplicate, another reward under a taken id is
refused and changes nothing, and a feedback signal keeps its name. A backend that fails
any of it is not done."""

from __future__ import annotations

import asyncio
import re

import pytest

from parity.api.common.v1 import reward_pb2
from parity.services.runtime.errors import AlreadyExists, InvalidArgument
from parity.services.store.commits import WriteResult
from parity.services.store.token_store import TokenStore
from tests.integration.store.store_requests import one_call, reward, write


async def stored(store: TokenStore, session_id: str = "s") -> list[tuple[str, float, str]]:
    rewards, _ = await store.list_rewards(session_id, 100, "")
    return [(r.reward_id, r.value, r.name) for r in rewards]


async def test_a_feedback_signal_keeps_its_name(store: TokenStore) -> None:
    await write(store, [one_call("c", "s")])
    await store.write_rewards([
        reward("thumbs", "s", 1.0, name="thumbs_up"), reward("resolved", "s", 0.0, name="resolved", call_id="c"),
        reward("scored", "s", 0.5),
    ])  # fmt: skip
    assert await stored(store) == [
        ("thumbs", 1.0, "thumbs_up"),
        ("resolved", 0.0, "resolved"),
        ("scored", 0.5, ""),
    ]
    (contents,), _ = await store.batch_get_sessions(["s"], "basic")
    assert [r.name for r in contents.rewards] == ["thumbs_up", "resolved", ""]


async def test_writing_a_reward_id_again_is_a_retry_only_with_the_same_reward(
    store: TokenStore,
) -> None:
    await write(store, [one_call("c", "s"), one_call("d", "s"), one_call("x", "other")])
    first = reward("r1", "s", 1.0, name="thumbs_up", call_id="c")
    assert (await store.write_rewards([first])).written == 1
    # When it was made, by what and its metadata may differ between attempts.
    retry = reward_pb2.Reward.FromString(first.SerializeToString())
    retry.source, retry.metadata["attempt"] = "ingest", "2"
    retry.create_time.FromSeconds(1)
    result = await store.write_rewards([retry, reward("r2", "s", 0.5)])
    assert (result.written, result.duplicates) == (1, 1)

    refused = {
        "value 0.0 (session 's', call 'c', name 'thumbs_up')": reward(
            "r1", "s", 0.0, name="thumbs_up", call_id="c"
        ),
        "value 1.0 (session 's', call 'c', name 'thumbs_down')": reward(
            "r1", "s", 1.0, name="thumbs_down", call_id="c"
        ),
        "value 1.0 (session 's', call 'd', name 'thumbs_up')": reward(
            "r1", "s", 1.0, name="thumbs_up", call_id="d"
        ),
        "value 1.0 (session 's', step 0, name 'thumbs_up')": reward(
            "r1", "s", 1.0, name="thumbs_up", step_index=0
        ),
        "value 1.0 (session 's', name 'thumbs_up')": reward("r1", "s", 1.0, name="thumbs_up"),
        "value 1.0 (session 'other', name 'thumbs_up')": reward(
            "r1", "other", 1.0, name="thumbs_up"
        ),
    }
    trajectory = reward("r1", "s", 1.0, name="thumbs_up", call_id="c")
    trajectory.trajectory_name = "solver"
    refused["value 1.0 (session 's', trajectory 'solver', call 'c', name 'thumbs_up')"] = trajectory
    for described, conflicting in refused.items():
        # The whole request is refused: the new reward beside it is not written either.
        with pytest.raises(AlreadyExists) as caught:
            await store.write_rewards([reward("r3", "s", 0.25), conflicting])
        assert str(caught.value) == (
            "reward_id 'r1' is already stored with value 1.0 (session 's', call 'c', name 'thumbs_up');"
            f" refused {described}: writing a reward id again must repeat its value and target"
        )
    assert await stored(store) == [("r1", 1.0, "thumbs_up"), ("r2", 0.5, "")]
    assert await stored(store, "other") == []


async def test_one_request_repeating_an_id_is_a_retry_or_refused_whole(store: TokenStore) -> None:
    await write(store, [one_call("c", "s")])
    result = await store.write_rewards([reward("r1", "s", 1.0), reward("r1", "s", 1.0)])
    assert (result.written, result.duplicates) == (1, 1)
    with pytest.raises(
        InvalidArgument,
        match=re.escape("rewards[2].reward_id 'r2' repeats rewards[0]'s with value 0.0"),
    ):
        await store.write_rewards(
            [reward("r2", "s", 1.0), reward("r3", "s", 1.0), reward("r2", "s", 0.0)]
        )
    assert await stored(store) == [("r1", 1.0, "")]


async def test_of_two_requests_committing_together_the_first_takes_the_id(
    store: TokenStore,
) -> None:
    await write(store, [one_call("c", "s")])
    results = await asyncio.gather(
        *(
            store.write_rewards([reward("r", "s", float(value)), reward(f"own-{value}", "s", 1.0)])
            for value in range(4)
        ),
        store.write_rewards([reward("r", "s", 0.0)]),
        return_exceptions=True,
    )
    assert isinstance(results[0], WriteResult) and (results[0].written, results[0].duplicates) == (
        2,
        0,
    )
    assert all(isinstance(result, AlreadyExists) for result in results[1:4]), results
    assert isinstance(results[4], WriteResult) and (results[4].written, results[4].duplicates) == (
        0,
        1,
    )
    assert await stored(store) == [("r", 0.0, ""), ("own-0", 1.0, "")]


async def test_a_reward_name_is_short_plain_text(store: TokenStore) -> None:
    await write(store, [one_call("c", "s")])
    with pytest.raises(
        InvalidArgument, match=re.escape("rewards[1].name is 65 characters; at most 64")
    ):
        await store.write_rewards([reward("a", "s", 1.0), reward("b", "s", 1.0, name="n" * 65)])
    with pytest.raises(
        InvalidArgument, match=re.escape("rewards[0].name contains the control character U+000A")
    ):
        await store.write_rewards([reward("a", "s", 1.0, name="thumbs\nup")])
    assert (await store.write_rewards([reward("a", "s", 1.0, name="n" * 64)])).written == 1
