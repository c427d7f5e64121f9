"""Turn an LlmCall into a prefix-deduplicated row, and a row back into the full call."""

from __future__ import annotations

from typing import NamedTuple

from parity.api.common.v1 import llm_call_pb2
from parity.core import splice_delta
from parity.core.splice_delta import Splice
from parity.core.tokens import TOKEN_BYTES
from parity.services.store.records import MAX_REF_DEPTH, CallRow

# A reference must save at least this many bytes of prompt tokens to be worth a
# chain hop on every read.
MIN_SHARED_PROMPT_BYTES = 64


class CallTokens(NamedTuple):
    """The parts of a stored call that later calls are spliced against."""

    call_id: str
    prompt: bytes
    request: bytes
    completions: tuple[bytes, ...]
    depth: int

    @classmethod
    def of(cls, call: llm_call_pb2.LlmCall, depth: int) -> CallTokens:
        return cls(
            call.call_id,
            call.prompt_token_ids,
            call.request_json,
            tuple(choice.token_ids for choice in call.choices),
            depth,
        )


def encode_call(
    call: llm_call_pb2.LlmCall,
    call_id: str,
    trajectory: tuple[str, str],
    ref: CallTokens | None,
    create_time: float,
) -> tuple[CallRow, CallTokens]:
    """The row for `call`, spliced against `ref` when its prompt extends ref's tokens, and
    the call's own tokens for the next call to splice against. `call_id` and `trajectory`
    (session id, trajectory name) are the call's own, read once by the caller.

    Consumes `call`: its prompt and request fields are moved into the row. Putting
    them back would copy them into the message again, which costs more than the
    rest of the encoding together.
    """
    prompt, request = call.prompt_token_ids, call.request_json
    completions = tuple([choice.token_ids for choice in call.choices])
    prompt_splice, ref_choice = Splice(0, 0, prompt), -1
    if ref is not None and ref.depth < MAX_REF_DEPTH:
        ref_choice, prompt_splice = _best_prompt_splice(ref, prompt)
    if ref is None or prompt_splice.prefix_len < MIN_SHARED_PROMPT_BYTES:
        ref, ref_choice, prompt_splice = None, -1, Splice(0, 0, prompt)
    call.ClearField("prompt_token_ids")
    call.ClearField("request_json")
    depth = ref.depth + 1 if ref else 0
    row = CallRow(
        call_id=call_id,
        session_id=trajectory[0],
        trajectory_name=trajectory[1],
        body=call.SerializeToString(),
        prompt=prompt_splice,
        request=splice_delta.encode(ref.request, request) if ref else Splice(0, 0, request),
        ref_call_id=ref.call_id if ref else None,
        ref_choice=ref_choice,
        ref_depth=depth,
        logical_tokens=(len(prompt) + sum(map(len, completions))) // TOKEN_BYTES,
        create_time=create_time,
    )
    return row, CallTokens(row.call_id, prompt, request, completions, depth)


def _best_prompt_splice(ref: CallTokens, prompt: bytes) -> tuple[int, Splice]:
    """Splice against ref's prompt, or ref's prompt plus the completion `prompt` continues."""
    if prompt.startswith(ref.prompt):
        # The usual multi-turn shape: check each completion in place, with memcmp and no copies.
        start = len(ref.prompt)
        for index, completion in enumerate(ref.completions):
            if completion and prompt.startswith(completion, start):
                end = start + len(completion)
                return index, Splice(end, 0, prompt[end:])
    best_choice, best = -1, splice_delta.encode(ref.prompt, prompt, TOKEN_BYTES)
    if best.prefix_len < len(ref.prompt):
        return best_choice, best
    for index, completion in enumerate(ref.completions):
        candidate = splice_delta.encode(ref.prompt + completion, prompt, TOKEN_BYTES)
        if candidate.prefix_len > best.prefix_len:
            best_choice, best = index, candidate
    return best_choice, best


def ref_base(ref: CallTokens, choice: int) -> bytes:
    return ref.prompt if choice < 0 else ref.prompt + ref.completions[choice]


def decode_call(row: CallRow, ref: CallTokens | None) -> llm_call_pb2.LlmCall:
    """The full call; `ref` must be the materialized reference when the row has one."""
    call = llm_call_pb2.LlmCall.FromString(row.body)
    if row.ref_call_id is None:
        call.prompt_token_ids, call.request_json = row.prompt.middle, row.request.middle
        return call
    if ref is None or ref.call_id != row.ref_call_id:
        raise ValueError(f"call {row.call_id} needs its reference {row.ref_call_id} to be decoded")
    call.prompt_token_ids = splice_delta.decode(ref_base(ref, row.ref_choice), row.prompt)
    call.request_json = splice_delta.decode(ref.request, row.request)
    return call


def basic_view(row: CallRow) -> llm_call_pb2.LlmCall:
    """The call without token arrays, logprobs and request JSON; needs no reference."""
    call = llm_call_pb2.LlmCall.FromString(row.body)
    for choice in call.choices:
        choice.ClearField("token_ids")
        choice.ClearField("logprobs")
    return call


def spliced_view(
    row: CallRow,
) -> tuple[llm_call_pb2.LlmCall, tuple[str, str, int, int, int, bytes] | None]:
    """The call with its token arrays as stored and no request JSON; a spliced prompt
    comes empty, with (call, base call, base choice, prefix and suffix tokens, middle)."""
    call = llm_call_pb2.LlmCall.FromString(row.body)
    if row.ref_call_id is None:
        call.prompt_token_ids = row.prompt.middle
        return call, None
    splice = row.prompt
    return call, (row.call_id, row.ref_call_id, row.ref_choice, splice.prefix_len // TOKEN_BYTES,
                  splice.suffix_len // TOKEN_BYTES, splice.middle)  # fmt: skip
