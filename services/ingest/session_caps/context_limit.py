"""A prompt longer than the served model's context: refused in the API's own shape, recorded as the session's cap.

vLLM cuts a reply whose prompt and `max_tokens` together exceed the context (the reply
ends with `finish_reason: length`), but refuses a prompt that alone fills it. That refusal
ends the episode as surely as a session budget does, so it is recorded the same way: the
call with outcome CALL_OUTCOME_SESSION_CAPPED and `session_cap` "context", which the
assembler treats as a truncated episode. The agent hears it as OpenAI says it
(`context_length_exceeded`), which frameworks that trim their history look for. A session
whose context policy is "refuse" (parity/core/session_budget.py) has the cut reply refused
the same way, before anything is sampled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import orjson

from parity.services.ingest import openai_errors
from parity.services.ingest.capture.call_capture import CallCapture
from parity.services.ingest.replies import SESSION_CAPPED

CONTEXT_CAP = "context"
_VLLM_MARK = b"maximum context length"


def overflows(status: int, payload: bytes) -> bool:
    """Whether an upstream's answer is vLLM's refusal of a prompt longer than the context."""
    return status == 400 and _VLLM_MARK in payload


def upstream_message(payload: bytes) -> str:
    """The message of vLLM's error body, else the body's start."""
    try:
        message = orjson.loads(payload)["error"]["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return payload[:500].decode(errors="replace")
    return str(message)


async def refuse(capture: CallCapture, message: str) -> NoReturn:
    """Record the call as the session's context cap and answer the agent with `message`."""
    capture.session_cap = CONTEXT_CAP
    await capture.finish(SESSION_CAPPED, message)
    raise openai_errors.HttpError(
        400, message, "invalid_request_error", "messages", code="context_length_exceeded"
    )


def requested_reply(body: Mapping[str, Any]) -> int | None:
    """The reply length a chat or completions body asks for, if it names one."""
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def refuse_overrun(
    capture: CallCapture, prompt_tokens: int, body: Mapping[str, Any], limit: int
) -> None:
    """Refuse the call, as a prompt past the context is, when its prompt and requested reply exceed `limit`."""
    requested = requested_reply(body)
    if requested is None or prompt_tokens + requested <= limit:
        return
    await refuse(capture, (
        f"This model's maximum context length is {limit} tokens. However, you requested {prompt_tokens + requested} "
        f"tokens ({prompt_tokens} in the messages, {requested} in the completion), and the session's context policy "
        "is refuse. Please reduce the length of the messages or completion."
    ))  # fmt: skip
