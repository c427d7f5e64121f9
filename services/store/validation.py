"""Checks on what clients send, before anything is written. Each failure says what is wrong.

Token ids must not be negative and logprobs must be finite or -inf: these arrays become
training data, where one NaN poisons a whole update and a negative id names no token
(an embedding lookup fails on it, or silently wraps to the vocabulary's end). The store does not check ids against a vocabulary size: it
keeps calls of every model ingest serves (aliases, adapters, external models), and only
the trainer knows the one vocabulary it trains.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from parity.api.common.v1 import llm_call_pb2, reward_pb2
from parity.core import attribution
from parity.core.tokens import token_count
from parity.services.runtime.errors import InvalidArgument
from parity.services.store.records import MetadataUpdate
from parity.services.store.reward_conflicts import describe, reward_content

MAX_BATCH = 1000
# Metadata updates are small; a batch feed marks every rollout of a batch in one request.
MAX_METADATA_UPDATES = 10_000
MAX_ID_LENGTH = 256
MAX_REWARD_NAME_LENGTH = 64
REWARD_LEVEL_STEP = 2
_VALID_REWARD_LEVELS = (1, 2)
# PostgreSQL text cannot hold NUL, and U+001F separates the fields of page tokens, whose
# scopes hold session ids; no id needs any C0 control character or DEL.
_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f]")
_TOKEN_ID = np.dtype("<i4")
_LOGPROB = np.dtype("<f4")


def check_id(value: str, what: str) -> None:
    """An id or metadata key: at most MAX_ID_LENGTH characters, none of them a control character."""
    _check_text(value, what, MAX_ID_LENGTH)


def _check_text(value: str, what: str, max_length: int) -> None:
    if len(value) > max_length:
        raise InvalidArgument(
            f"{what} is {len(value)} characters; at most {max_length} are allowed"
        )
    control = _CONTROL_CHARACTER.search(value)
    if control is not None:
        raise InvalidArgument(f"{what} contains the control character U+{ord(control.group()):04X}")


def check_required_id(value: str, what: str) -> None:
    if not value:
        raise InvalidArgument(f"{what} is required")
    check_id(value, what)


def check_text(value: str, what: str) -> None:
    """Free text the store keeps in a database column (metadata values, error messages)."""
    if "\x00" in value:
        raise InvalidArgument(f"{what} contains NUL (U+0000), which the store cannot keep")


def check_end_user_id(value: str, what: str) -> None:
    """At most 256 characters, none of them a control character (parity.core.attribution's rules)."""
    try:
        attribution.check_end_user_id(value, what)
    except ValueError as error:
        raise InvalidArgument(str(error)) from None


def check_tags(tags: Sequence[str], what: str) -> tuple[str, ...]:
    """Tags, sorted and without repeats. Each is checked alone first, so a refusal names
    it (`tags[2]`): 1 to 64 characters without commas, control characters or spaces at
    either end; at most 32 tags."""
    try:
        for position, tag in enumerate(tags):
            attribution.normalize_tags([tag], f"{what}[{position}]")
        return attribution.normalize_tags(tags, what)
    except ValueError as error:
        raise InvalidArgument(str(error)) from None


def _tags_normalized(tags: tuple[str, ...]) -> bool:
    try:
        return attribution.normalize_tags(tags) == tags
    except ValueError:
        return False


def check_calls(calls: Sequence[llm_call_pb2.LlmCall]) -> None:
    """Validate a WriteCalls batch (unary or streamed). Every call names its session: ingest
    files a call that came with none under the reserved session "unassigned" itself, so an
    empty session id is a writer's bug, refused like an empty call id."""
    if len(calls) > MAX_BATCH:
        raise InvalidArgument(
            f"a WriteCalls request holds at most {MAX_BATCH} calls, got {len(calls)}"
        )
    # The store's hottest path checks a whole batch at once, with one scan of its ids;
    # only a batch that fails is walked call by call, to say which field is wrong.
    if not _calls_pass(calls):
        _explain_refused_calls(calls)


def _calls_pass(calls: Sequence[llm_call_pb2.LlmCall]) -> bool:
    """True if every check in _explain_refused_calls passes; False if any may not."""
    required: list[str] = []
    optional: list[str] = []
    values: list[str] = []
    end_users: list[str] = []
    # A batch's calls mostly share a few sets of tags: each set is checked once.
    good_tags: set[tuple[str, ...]] = set()
    # Each read of a bytes field copies it: read each once, for its length and its values.
    token_arrays: list[bytes] = []
    logprob_arrays: list[bytes] = []
    for call in calls:
        required.append(call.call_id)
        required.append(call.session_id)
        optional.append(call.trajectory_name)
        optional.append(call.thread_id)
        if call.parent_session_ids:
            required.extend(call.parent_session_ids)
            if call.session_id in call.parent_session_ids:
                return False
        if call.metadata:
            required.extend(call.metadata.keys())
            values.extend(call.metadata.values())
        end_users.append(call.end_user_id)
        if call.tags:
            tags = tuple(call.tags)
            if tags not in good_tags:
                if not _tags_normalized(tags):
                    return False
                good_tags.add(tags)
        prompt = call.prompt_token_ids
        if len(prompt) % 4:
            return False
        token_arrays.append(prompt)
        choices = call.choices
        for choice in choices:
            token_ids, logprobs = choice.token_ids, choice.logprobs
            if len(token_ids) % 4 or (logprobs and len(logprobs) != len(token_ids)):
                return False
            token_arrays.append(token_ids)
            logprob_arrays.append(logprobs)
        if len(choices) > 1 and len({choice.index for choice in choices}) != len(choices):
            return False
    ids = required + optional
    return (
        all(required)
        and max(map(len, ids), default=0) <= MAX_ID_LENGTH
        and max(map(len, end_users), default=0) <= attribution.MAX_END_USER_ID_LENGTH
        and _CONTROL_CHARACTER.search("".join(ids + end_users)) is None
        and "\x00" not in "".join(values)
        and _ids_in_range(b"".join(token_arrays))
        and _logprobs_in_range(b"".join(logprob_arrays))
    )


def _ids_in_range(packed: bytes) -> bool:
    return not packed or int(np.frombuffer(packed, _TOKEN_ID).min()) >= 0


def _logprobs_in_range(packed: bytes) -> bool:
    # The maximum is NaN if any value is, and +inf if any value is: one pass finds both.
    return not packed or bool(np.frombuffer(packed, _LOGPROB).max() < np.inf)


def check_token_ids(packed: bytes, what: str) -> None:
    """Packed little-endian int32 token ids: none negative."""
    if len(packed) % 4:
        raise InvalidArgument(f"{what} must be packed int32 (a multiple of 4 bytes)")
    if not _ids_in_range(packed):
        ids = np.frombuffer(packed, _TOKEN_ID)
        first = int(np.flatnonzero(ids < 0)[0])
        raise InvalidArgument(f"{what}[{first}] is {ids[first]}; token ids are never negative")


def check_logprobs(packed: bytes, what: str) -> None:
    """Packed little-endian float32 logprobs: each finite or -inf."""
    if len(packed) % 4:
        raise InvalidArgument(f"{what} must be packed float32 (a multiple of 4 bytes)")
    if not _logprobs_in_range(packed):
        logprobs = np.frombuffer(packed, _LOGPROB)
        first = int(np.flatnonzero(~(logprobs < np.inf))[0])
        found = "NaN" if np.isnan(logprobs[first]) else "+inf"
        raise InvalidArgument(f"{what}[{first}] is {found}; a logprob is finite or -inf")


def _explain_refused_calls(calls: Sequence[llm_call_pb2.LlmCall]) -> None:
    for position, call in enumerate(calls):
        where = f"calls[{position}]"
        check_required_id(call.call_id, f"{where}.call_id")
        check_required_id(call.session_id, f"{where}.session_id")
        # Ancestors become sessions of their own, so they are held to the same rules.
        for depth, parent in enumerate(call.parent_session_ids):
            check_required_id(parent, f"{where}.parent_session_ids[{depth}]")
        if call.session_id in call.parent_session_ids:
            raise InvalidArgument(
                f"{where}: session {call.session_id!r} cannot be its own ancestor"
            )
        # Empty names the session's default trajectory.
        check_id(call.trajectory_name, f"{where}.trajectory_name")
        check_id(call.thread_id, f"{where}.thread_id")
        check_metadata(call.metadata, f"{where}.metadata")
        check_end_user_id(call.end_user_id, f"{where}.end_user_id")
        # Ingest sends them normalized; the store keeps them as sent, so it refuses any other order.
        if check_tags(call.tags, f"{where}.tags") != tuple(call.tags):
            raise InvalidArgument(
                f"{where}.tags must be sorted, without repeats, got {list(call.tags)[:8]}"
            )
        check_token_ids(call.prompt_token_ids, f"{where}.prompt_token_ids")
        indexes = set()
        for choice_position, choice in enumerate(call.choices):
            at = f"{where}.choices[{choice_position}]"
            if choice.index in indexes:
                raise InvalidArgument(f"{at}: duplicate choice index {choice.index}")
            indexes.add(choice.index)
            token_ids, logprobs = choice.token_ids, choice.logprobs
            check_token_ids(token_ids, f"{at}.token_ids")
            if logprobs and len(logprobs) != len(token_ids):
                raise InvalidArgument(
                    f"{at}: {token_count(logprobs)} logprobs for {token_count(token_ids)} tokens"
                )
            check_logprobs(logprobs, f"{at}.logprobs")


def check_rewards(rewards: Sequence[reward_pb2.Reward]) -> None:
    if len(rewards) > MAX_BATCH:
        raise InvalidArgument(
            f"a WriteRewards request holds at most {MAX_BATCH} rewards, got {len(rewards)}"
        )
    for position, reward in enumerate(rewards):
        where = f"rewards[{position}]"
        check_required_id(reward.session_id, f"{where}.session_id")
        # Empty: the store assigns one.
        check_id(reward.reward_id, f"{where}.reward_id")
        if reward.level not in _VALID_REWARD_LEVELS:
            raise InvalidArgument(
                f"{where}.level must be REWARD_LEVEL_TRAJECTORY or REWARD_LEVEL_STEP"
            )
        step = reward.WhichOneof("step")
        if reward.level == REWARD_LEVEL_STEP and step is None:
            raise InvalidArgument(f"{where}: a step reward needs call_id or step_index")
        if reward.level != REWARD_LEVEL_STEP and step is not None:
            raise InvalidArgument(f"{where}: a trajectory reward cannot name a step")
        if step == "call_id":
            check_id(reward.call_id, f"{where}.call_id")
        if step == "step_index" and reward.step_index < 0:
            raise InvalidArgument(f"{where}.step_index must not be negative")
        check_id(reward.thread_id, f"{where}.thread_id")
        if reward.thread_id and reward.level == REWARD_LEVEL_STEP:
            raise InvalidArgument(
                f"{where}: a step reward cannot name a thread (its step names the call)"
            )
        if not math.isfinite(reward.value):
            raise InvalidArgument(f"{where}.value must be a finite number, got {reward.value}")
        check_reward_name(reward.name, f"{where}.name")
    _check_repeated_reward_ids(rewards)


def check_reward_name(name: str, what: str) -> None:
    """What a feedback signal is (`thumbs_up`): at most 64 characters, none a control character."""
    _check_text(name, what, MAX_REWARD_NAME_LENGTH)


def _check_repeated_reward_ids(rewards: Sequence[reward_pb2.Reward]) -> None:
    """An id twice in one request is a retry only if both carry the same reward."""
    first: dict[str, int] = {}
    for position, reward in enumerate(rewards):
        if not reward.reward_id:
            continue
        earlier = first.setdefault(reward.reward_id, position)
        if earlier != position and reward_content(rewards[earlier]) != reward_content(reward):
            raise InvalidArgument(
                f"rewards[{position}].reward_id {reward.reward_id!r} repeats rewards[{earlier}]'s with"
                f" {describe(reward)}, not {describe(rewards[earlier])}"
            )


def check_metadata(metadata: Mapping[str, str], where: str) -> None:
    for key, value in metadata.items():
        if not key:
            raise InvalidArgument(f"{where} has an empty key")
        check_id(key, f"{where} key {key[:40]!r}")
        check_text(value, f"{where}[{key[:40]!r}]")


def check_metadata_updates(updates: Sequence[MetadataUpdate]) -> None:
    if len(updates) > MAX_METADATA_UPDATES:
        raise InvalidArgument(
            f"an UpdateSessionMetadata request holds at most {MAX_METADATA_UPDATES} updates, got {len(updates)}"
        )
    for position, update in enumerate(updates):
        where = f"updates[{position}]"
        check_required_id(update.session_id, f"{where}.session_id")
        check_metadata(update.set_keys, f"{where}.metadata")
        for index, key in enumerate(update.remove_keys):
            check_required_id(key, f"{where}.remove_keys[{index}]")


def check_session_ids(session_ids: Sequence[str]) -> None:
    if len(session_ids) > MAX_BATCH:
        raise InvalidArgument(
            f"a request names at most {MAX_BATCH} sessions, got {len(session_ids)}"
        )
    for position, session_id in enumerate(session_ids):
        check_required_id(session_id, f"session_ids[{position}]")
