"""POST /v1/responses: the OpenAI Responses API over the policy, tokens captured.

The request (with the conversation of its `previous_response_id`, chain.py) becomes
the chat request that renders the prompt vLLM's own /v1/responses renders
(protocol.py), goes to the policy through the same path as every call, and comes
back as a Responses object or event stream (answers.py), streamed as the tokens are
generated. A response's id names its captured call, so the chain can be followed
from the token store.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import orjson

from parity.services.ingest import openai_errors
from parity.services.ingest.capture.recorder import RESPONSES
from parity.services.ingest.chat_backend import ChatBackend
from parity.services.ingest.endpoints import request_start
from parity.services.ingest.endpoints.openai_responses import answers, protocol
from parity.services.ingest.endpoints.openai_responses.chain import (
    ResponseChains,
    assistant_message,
    without_system,
)
from parity.services.ingest.endpoints.openai_responses.tool_catalog import (
    ToolCatalog,
    tool_catalog,
)
from parity.services.ingest.endpoints.session_headers import SessionHeaders
from parity.services.ingest.model_aliases import ModelAliases
from parity.services.ingest.replies import FinalEvent, JsonReply, Reply, StreamReply
from parity.services.ingest.upstream.chat_calls import ChatCall, Forwarded, StreamFailed


class ResponsesServing:
    def __init__(self, backend: ChatBackend, aliases: ModelAliases, chains: ResponseChains) -> None:
        self.backend = backend
        self.aliases = aliases
        self.chains = chains

    async def create(
        self, raw_body: bytes, path_slug: str | None, headers: SessionHeaders
    ) -> Reply:
        log: dict[str, Any] = {}
        try:
            request, model, served, session, metadata, log = request_start.start(
                raw_body, path_slug, headers, self.aliases, protocol.check_request
            )
            previous = request.get("previous_response_id")
            history = await self.chains.history(previous) if previous else []
            messages = protocol.input_messages(request, history)
            tools = tool_catalog(request)
            chat = protocol.to_chat_request(request, messages, served, tools)
            forwarded = await self.backend.forward(
                ChatCall(RESPONSES, chat, raw_body, session, metadata, model, served)
            )
        except openai_errors.HttpError as error:
            return JsonReply(error.status, error.body(), log | {"error": error.message})
        remember = self._remembering(request, messages, forwarded)
        shell = self._shell(request, model, served, forwarded, tools)
        if forwarded.stream is not None:
            return StreamReply(
                self._events(forwarded, shell, remember), forwarded.capture, forwarded.abandon, log
            )
        if forwarded.response is None:
            return JsonReply(forwarded.status, forwarded.error_body, log, forwarded.capture)
        remember()
        prompt = (forwarded.response.get("usage") or {}).get("prompt_tokens", 0)
        return JsonReply(
            200,
            orjson.dumps(answers.to_response(shell(prompt), forwarded.response)),
            log,
            forwarded.capture,
        )

    def _shell(
        self,
        request: Mapping[str, Any],
        model: str,
        served: str,
        forwarded: Forwarded,
        tools: ToolCatalog,
    ) -> Callable[[int], answers.ResponseShell]:
        """The response's fixed part, once the prompt's length is known (it bounds the default max_output_tokens)."""

        def make(prompt_tokens: int) -> answers.ResponseShell:
            limit = request.get("max_output_tokens")
            if limit is None and (context := self.backend.router.max_model_len(served)):
                limit = context - prompt_tokens
            return answers.ResponseShell(
                answers.response_id(forwarded.capture.call_id), model, request, limit, tools
            )

        return make

    def _remembering(
        self, request: Mapping[str, Any], messages: list[dict[str, Any]], forwarded: Forwarded
    ) -> Callable[[], None]:
        def remember() -> None:
            call = forwarded.capture.call
            if request.get("store") is False or call is None:
                return
            conversation = without_system(messages) + [assistant_message(call)]
            self.chains.remember(answers.response_id(forwarded.capture.call_id), conversation)

        return remember

    async def _events(
        self,
        forwarded: Forwarded,
        shell: Callable[[int], answers.ResponseShell],
        remember: Callable[[], None],
    ) -> AsyncGenerator[bytes, None]:
        assert forwarded.stream is not None
        stream: answers.ResponseStream | None = None

        def render(chunk: dict[str, Any]) -> bytes:
            nonlocal stream
            if stream is None:
                # The prompt's length is recorded from the first chunk, before capture drops its ids from it.
                stream = answers.ResponseStream(
                    shell(len(forwarded.capture.recorder.prompt_token_ids or ()))
                )
                return b"".join([*stream.start(), *stream.feed(chunk)])
            return b"".join(stream.feed(chunk))

        async with contextlib.aclosing(forwarded.stream(render)) as events:
            try:
                async for data in events:
                    yield data
            except StreamFailed as failure:
                stream = stream or answers.ResponseStream(shell(0))
                yield FinalEvent(stream.failed(str(failure)))
                return
        opening: list[bytes] = []
        if stream is None:
            stream = answers.ResponseStream(shell(0))
            opening = stream.start()
        remember()
        yield FinalEvent(b"".join([*opening, *stream.finish()]))
