"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API over the policy, tokens captured.

The request becomes the chat request vLLM's own /v1/messages would make of it
(protocol.py), goes to the policy through the same path as every call, and its answer
comes back as Anthropic's message or events (answers.py), streamed as the tokens are
generated. Errors are in Anthropic's shape. Token counting is vLLM's own endpoint,
asked directly: it generates nothing, so there is nothing to capture.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from parity.services.ingest import openai_errors
from parity.services.ingest.capture.recorder import MESSAGES
from parity.services.ingest.chat_backend import ChatBackend
from parity.services.ingest.endpoints import request_start
from parity.services.ingest.endpoints.anthropic_messages import answers, protocol
from parity.services.ingest.endpoints.anthropic_messages.template_facts import TemplateFacts
from parity.services.ingest.endpoints.session_headers import SessionHeaders
from parity.services.ingest.endpoints.session_resolution import ANTHROPIC_USER
from parity.services.ingest.model_aliases import ModelAliases
from parity.services.ingest.replies import FinalEvent, JsonReply, Reply, StreamReply
from parity.services.ingest.upstream.chat_calls import ChatCall, Forwarded, StreamFailed

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


class AnthropicMessagesServing:
    def __init__(
        self, backend: ChatBackend, aliases: ModelAliases, templates: TemplateFacts
    ) -> None:
        self.backend = backend
        self.aliases = aliases
        self.templates = templates

    async def create(
        self, raw_body: bytes, path_slug: str | None, headers: SessionHeaders
    ) -> Reply:
        log: dict[str, Any] = {}
        try:
            request, model, served, session, metadata, log = request_start.start(
                raw_body, path_slug, headers, self.aliases, user_field=ANTHROPIC_USER
            )
            merge = (
                await self.templates.merge_inline_system(served)
                if self.backend.router.knows(served)
                else False
            )
            chat = protocol.to_chat_request(request, merge_inline_system=merge)
            chat["model"] = served
            forwarded = await self.backend.forward(
                ChatCall(MESSAGES, chat, raw_body, session, metadata, model, served)
            )
        except openai_errors.HttpError as error:
            return JsonReply(error.status, error.anthropic_body(), log | {"error": error.message})
        if forwarded.stream is not None:
            return StreamReply(
                self._events(forwarded, model), forwarded.capture, forwarded.abandon, log
            )
        if forwarded.response is None:
            return JsonReply(
                forwarded.status,
                _anthropic_error(forwarded.status, forwarded.error_body),
                log,
                forwarded.capture,
            )
        message = answers.to_message(forwarded.response)
        message["model"] = model
        return JsonReply(200, orjson.dumps(message), log, forwarded.capture)

    async def count_tokens(self, raw_body: bytes) -> Reply:
        try:
            request = request_start.parse_json_object(raw_body)
            model = request_start.required_model(request)
            # Checked here too, so a request vLLM would take but /v1/messages refuses is refused alike.
            protocol.to_chat_request(request, merge_inline_system=False, counting=True)
            request["model"] = self.aliases.resolve(model)
            status, payload = await self.backend.ask_replica(
                request["model"], COUNT_TOKENS_PATH, orjson.dumps(request)
            )
        except openai_errors.HttpError as error:
            return JsonReply(error.status, error.anthropic_body(), {"error": error.message})
        return JsonReply(status, payload if status == 200 else _anthropic_error(status, payload))

    async def _events(self, forwarded: Forwarded, model: str) -> AsyncGenerator[bytes, None]:
        assert forwarded.stream is not None
        stream = answers.MessageStream()

        def render(chunk: dict[str, Any]) -> bytes:
            chunk["model"] = model
            return b"".join(stream.feed(chunk))

        async with contextlib.aclosing(forwarded.stream(render)) as events:
            try:
                async for data in events:
                    yield data
            except StreamFailed as failure:
                yield FinalEvent(
                    answers.error_event({"type": "api_error", "message": str(failure)})
                )
                return
        yield FinalEvent(b"".join(stream.finish()))


def _anthropic_error(status: int, payload: bytes) -> bytes:
    """vLLM's error answer (OpenAI's shape, or already Anthropic's) in Anthropic's shape."""
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and body.get("type") == "error":
        return payload
    error = body.get("error") if isinstance(body, dict) else None
    message = (
        error.get("message") if isinstance(error, dict) else payload[:500].decode(errors="replace")
    )
    return openai_errors.HttpError(status, str(message), "upstream_error").anthropic_body()
