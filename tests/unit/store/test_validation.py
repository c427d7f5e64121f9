"""WriteCalls validation: a batch checked whole, and a refusal that names the field.

The batch-wide check only decides whether anything is wrong; these cases hold it to
refusing everything the call-by-call explanation refuses, wherever the bad call sits.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity.api.common.v1 import llm_call_pb2
from parity.core import attribution, tokens
from parity.services.runtime.errors import InvalidArgument
from parity.services.store import validation


def call(call_id: str = "c", session_id: str = "s", **fields) -> llm_call_pb2.LlmCall:
    made = llm_call_pb2.LlmCall(
        call_id=call_id, session_id=session_id, **({"prompt_token_ids": bytes(8)} | fields)
    )
    made.choices.add(index=0, token_ids=bytes(8), logprobs=bytes(8))
    return made


def with_choices(*choices: dict) -> llm_call_pb2.LlmCall:
    made = call()
    del made.choices[:]
    for choice in choices:
        made.choices.add(**choice)
    return made


REFUSED = {
    "calls[1].call_id is required": call(""),
    "calls[1].call_id is 257 characters": call("x" * 257),
    "calls[1].call_id contains the control character U+001F": call("a\x1fb"),
    "calls[1].session_id is required": call(session_id=""),
    "calls[1].session_id is 257 characters": call(session_id="x" * 257),
    "calls[1].session_id contains the control character U+007F": call(session_id="a\x7f"),
    "calls[1].parent_session_ids[0] is required": call(parent_session_ids=[""]),
    "calls[1]: session 's' cannot be its own ancestor": call(parent_session_ids=["root", "s"]),
    "calls[1].trajectory_name contains the control character U+000A": call(trajectory_name="t\n"),
    "calls[1].metadata has an empty key": call(metadata={"": "v"}),
    "calls[1].metadata key 'k\\t' contains": call(metadata={"k\t": "v"}),
    "calls[1].metadata['k'] contains NUL": call(metadata={"k": "a\x00"}),
    "calls[1].prompt_token_ids must be packed int32": call(prompt_token_ids=bytes(6)),
    "calls[1].choices[1]: duplicate choice index": with_choices({"index": 1}, {"index": 1}),
    "calls[1].choices[0].token_ids must be packed int32": with_choices({"token_ids": bytes(5)}),
    "calls[1].choices[0]: 1 logprobs for 2 tokens": with_choices(
        {"token_ids": bytes(8), "logprobs": bytes(4)}
    ),
    "calls[1].prompt_token_ids[2] is -1; token ids are never negative": call(
        prompt_token_ids=tokens.pack_token_ids([5, 0, -1, 7, -3])
    ),
    "calls[1].choices[1].token_ids[0] is -2147483648": with_choices(
        {"index": 0, "token_ids": bytes(4)},
        {"index": 1, "token_ids": tokens.pack_token_ids([-(2**31), 3])},
    ),
    "calls[1].choices[0].logprobs[1] is NaN; a logprob is finite or -inf": with_choices(
        {"token_ids": bytes(12), "logprobs": tokens.pack_floats([-0.5, math.nan, math.inf])}
    ),
    "calls[1].choices[0].logprobs[2] is +inf": with_choices(
        {"token_ids": bytes(12), "logprobs": tokens.pack_floats([-0.5, -math.inf, math.inf])}
    ),
    "calls[1].end_user_id is 257 characters; at most 256": call(end_user_id="u" * 257),
    "calls[1].end_user_id 'user\\x7f' contains a control character": call(end_user_id="user\x7f"),
    "calls[1].tags[1]: tag 'a,b' must be 1 to 64 characters": call(tags=["a", "a,b"]),
    "calls[1].tags[0]: tag 'prod '": call(tags=["prod "]),
    "calls[1].tags holds 33 tags; at most 32": call(tags=[f"t{n:02d}" for n in range(33)]),
    "calls[1].tags must be sorted, without repeats, got ['prod', 'beta']": call(
        tags=["prod", "beta"]
    ),
    "calls[1].tags must be sorted, without repeats, got ['beta', 'beta']": call(
        tags=["beta", "beta"]
    ),
}


@pytest.mark.parametrize("message", REFUSED)
def test_a_bad_call_among_good_ones_is_refused_naming_its_field(message: str) -> None:
    batch = [call("good-1", "s1"), REFUSED[message], call("good-2", "s2")]
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        validation.check_calls(batch)


def test_a_good_batch_passes() -> None:
    batch = [
        call("a", "unassigned", metadata={"note": "line\nbreak"}),
        call("b", "child", parent_session_ids=["root"], trajectory_name="solver"),
        with_choices(
            {"index": 0, "token_ids": bytes(4)},
            {"index": 1, "token_ids": bytes(8), "logprobs": bytes(8)},
        ),
        call("x" * 256, "y" * 256),
        call("attributed", end_user_id="u" * 256, tags=["checkout flow", "prod"]),
        call("attributed-2", end_user_id="user-8812", tags=[f"t{n:02d}" for n in range(32)]),
        # A token the sampler could never pick has a logprob of -inf; int32's largest id is
        # kept, since the store does not know the model's vocabulary.
        with_choices(
            {
                "token_ids": tokens.pack_token_ids([0, 2**31 - 1]),
                "logprobs": tokens.pack_floats([-math.inf, -1e30]),
            }
        ),
    ]
    validation.check_calls(batch)


# Bit patterns cover every NaN payload and both infinities, which generated floats rarely reach.
float32_bits = st.lists(st.integers(0, 2**32 - 1), max_size=12).map(
    lambda bits: np.array(bits, np.uint32).view("<f4")
)


@given(
    prompt=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=12),
    completion=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=12),
    logprobs=float32_bits,
)
def test_ids_and_logprobs_are_refused_exactly_when_one_is_out_of_range(
    prompt: list[int], completion: list[int], logprobs: np.ndarray
) -> None:
    logprobs = np.resize(logprobs, len(completion)) if len(logprobs) else np.zeros(0, np.float32)
    bad = with_choices(
        {"token_ids": tokens.pack_token_ids(completion), "logprobs": logprobs.tobytes()}
    )
    bad.prompt_token_ids = tokens.pack_token_ids(prompt)
    negative_prompt = [i for i, token in enumerate(prompt) if token < 0]
    negative_completion = [i for i, token in enumerate(completion) if token < 0]
    not_below_inf = [i for i, value in enumerate(logprobs) if not value < math.inf]
    batch = [call("good"), bad]
    if negative_prompt:
        expected = (
            f"calls[1].prompt_token_ids[{negative_prompt[0]}] is {prompt[negative_prompt[0]]};"
        )
    elif negative_completion:
        expected = f"calls[1].choices[0].token_ids[{negative_completion[0]}] is {completion[negative_completion[0]]};"
    elif not_below_inf:
        found = "NaN" if math.isnan(logprobs[not_below_inf[0]]) else "+inf"
        expected = f"calls[1].choices[0].logprobs[{not_below_inf[0]}] is {found};"
    else:
        validation.check_calls(batch)
        return
    with pytest.raises(InvalidArgument, match=re.escape(expected)):
        validation.check_calls(batch)


def test_an_empty_batch_passes_and_an_oversized_one_is_refused() -> None:
    validation.check_calls([])
    with pytest.raises(InvalidArgument, match="at most 1000 calls, got 1001"):
        validation.check_calls([call(str(i)) for i in range(1001)])


@given(tags=st.lists(st.text(alphabet="ab, \x01", max_size=3), max_size=4))
def test_call_tags_pass_exactly_when_they_are_normalized(tags: list[str]) -> None:
    """The batch-wide check and the call-by-call explanation agree on every tag list."""
    try:
        normalized = attribution.normalize_tags(tags) == tuple(tags)
    except ValueError:
        normalized = False
    batch = [call("good", tags=["prod"]), call(tags=tags)]
    if normalized:
        validation.check_calls(batch)
        return
    with pytest.raises(InvalidArgument, match=re.escape("calls[1].tags")):
        validation.check_calls(batch)
