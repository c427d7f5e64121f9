"""POST /v1/chat/completions and /v1/completions: vLLM's own API, answered as vLLM answers, tokens captured.

Ingest asks vLLM for the token ids and logprobs the agent did not ask for, records
them, and removes them again, so the agent gets exactly the response it would have
got from vLLM directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from parity.api.common.v1 import llm_call_pb2
from parity.services.ingest import openai_errors
from parity.services.ingest.capture.recorder import CHAT, COMPLETIONS
from parity.services.ingest.chat_backend import ChatBackend
from parity.services.ingest.endpoints import request_start
from parity.services.ingest.endpoints.session_headers import SessionHeaders
from parity.services.ingest.model_aliases import ModelAliases
from parity.services.ingest.replies import FinalEvent, JsonReply, Reply, StreamReply
from parity.services.ingest.upstream.chat_calls import ChatCall, Forwarded, StreamFailed


class OpenAIChatServing:
    def __init__(self, backend: ChatBackend, aliases: ModelAliases) -> None:
        self.backend = backend
        self.aliases = aliases

    async def handle(
        self,
        endpoint: llm_call_pb2.CallEndpoint,
        raw_body: bytes,
        path_slug: str | None,
        headers: SessionHeaders,
    ) -> Reply:
        log: dict[str, Any] = {}
        try:
            body, model, served, session, metadata, log = request_start.start(
                raw_body, path_slug, headers, self.aliases, _REQUIRED_INPUT.get(endpoint)
            )
            body["model"] = served
            forwarded = await self.backend.forward(
                ChatCall(endpoint, body, raw_body, session, metadata, model, served)
            )
        except openai_errors.HttpError as error:
            return JsonReply(error.status, error.body(), log | {"error": error.message})
        if forwarded.stream is not None:
            return StreamReply(
                self._relay(forwarded, model), forwarded.capture, forwarded.abandon, log
            )
        if forwarded.response is None:
            return JsonReply(forwarded.status, forwarded.error_body, log, forwarded.capture)
        if forwarded.capture.served_model != model and "model" in forwarded.response:
            forwarded.response["model"] = model
        return JsonReply(200, orjson.dumps(forwarded.response), log, forwarded.capture)

    async def _relay(self, forwarded: Forwarded, model: str) -> AsyncGenerator[bytes, None]:
        """The events of one network read go to the agent in one write; `[DONE]` goes once the call is recorded."""
        assert forwarded.stream is not None

        # Capture took out what it added; what is left to restore is the name the agent asked for.
        rename = forwarded.capture.served_model != model

        def render(chunk: dict[str, Any]) -> bytes:
            if rename and "model" in chunk:
                chunk["model"] = model
            return b"data: " + orjson.dumps(chunk) + b"\n\n"

        async with contextlib.aclosing(forwarded.stream(render)) as events:
            try:
                async for data in events:
                    yield data
            except StreamFailed as failure:
                yield b"data: " + openai_errors.bad_gateway(str(failure)).body() + b"\n\n"
        yield FinalEvent(b"data: [DONE]\n\n")


def _require_messages(body: dict[str, Any]) -> None:
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise openai_errors.bad_request(
            "messages is required and must be a non-empty array", "messages"
        )


def _require_prompt(body: dict[str, Any]) -> None:
    if not isinstance(body.get("prompt"), str | list):
        raise openai_errors.bad_request(
            "prompt is required and must be a string or an array", "prompt"
        )


_REQUIRED_INPUT = {CHAT: _require_messages, COMPLETIONS: _require_prompt}
