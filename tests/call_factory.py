"""Builders for realistic LlmCalls: single-turn calls and multi-turn conversations."""

from __future__ import annotations

import json
import random

from parity.api.common.v1 import llm_call_pb2
from parity.core import tokens


def make_call(
    call_id: str,
    session_id: str,
    prompt: list[int],
    completions: list[list[int]],
    *,
    trajectory: str = "",
    parents: tuple[str, ...] = (),
    messages: list[dict] | None = None,
    metadata: dict[str, str] | None = None,
) -> llm_call_pb2.LlmCall:
    request = {
        "model": "tiny",
        "messages": messages or [{"role": "user", "content": f"{len(prompt)}"}],
        "temperature": 1.0,
    }
    call = llm_call_pb2.LlmCall(
        call_id=call_id,
        session_id=session_id,
        parent_session_ids=list(parents),
        trajectory_name=trajectory,
        metadata=metadata or {},
        model="tiny",
        policy_version=3,
        request_json=json.dumps(request).encode(),
        prompt_token_ids=tokens.pack_token_ids(prompt),
        replica="r0",
    )
    for index, completion in enumerate(completions):
        call.choices.add(
            index=index,
            token_ids=tokens.pack_token_ids(completion),
            logprobs=tokens.pack_floats([-0.25 - 0.01 * i for i in range(len(completion))]),
            finish_reason="stop",
            text=" ".join(map(str, completion)),
        )
    call.timings.start_time.FromNanoseconds(1_700_000_000_000_000_000)
    return call


def conversation(
    session_id: str,
    turns: int,
    *,
    prompt_len: int = 300,
    completion_len: int = 200,
    user_len: int = 30,
    trajectory: str = "",
    seed: int = 0,
    prefix: str = "",
) -> list[llm_call_pb2.LlmCall]:
    """A multi-turn chat: each prompt is the previous prompt, its completion and a new user turn."""
    rng = random.Random(seed)
    prompt = [rng.randrange(50_000) for _ in range(prompt_len)]
    messages = [{"role": "user", "content": "x" * (prompt_len * 4)}]
    calls = []
    for turn in range(turns):
        completion = [rng.randrange(50_000) for _ in range(completion_len)]
        calls.append(
            make_call(
                f"{prefix}{session_id}-t{turn}",
                session_id,
                prompt,
                [completion],
                trajectory=trajectory,
                messages=list(messages),
            )
        )
        user = [rng.randrange(50_000) for _ in range(user_len)]
        prompt = prompt + completion + user
        messages += [
            {"role": "assistant", "content": "y" * completion_len * 4},
            {"role": "user", "content": "z" * user_len * 4},
        ]
    return calls
