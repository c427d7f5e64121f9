"""`previous_response_id`: the conversation behind a response, so the next request can continue it.

A response's id is its captured call's (`resp_<call id>`). Recent conversations are
kept in memory; any other is rebuilt from the token store, call by call back along
the chain, from each call's request and answer, so a chain survives a restart of
ingest and works through any ingest that shares the store. A response created with
`store: false` cannot be continued, as with OpenAI.
"""

from __future__ import annotations

import collections
from typing import Any

import grpc
import orjson

from parity.api.common.v1 import llm_call_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import AsyncStoreClient, RPCError
from parity.services.ingest import openai_errors
from parity.services.ingest.endpoints.openai_responses import answers, protocol

SUCCEEDED = llm_call_pb2.CALL_OUTCOME_SUCCEEDED
CACHED_CONVERSATIONS = 4096
STORE_TIMEOUT_S = 10.0


def not_found(response_id: str, why: str) -> openai_errors.HttpError:
    error = openai_errors.not_found(
        f"Previous response with id '{response_id}' not found{why}.", "previous_response_id"
    )
    return error


def assistant_message(call: llm_call_pb2.LlmCall) -> dict[str, Any]:
    """The answer of a call as the assistant turn of the conversation it continues."""
    choice = call.choices[0] if call.choices else llm_call_pb2.Choice()
    message: dict[str, Any] = {"role": "assistant", "content": choice.text or None}
    if choice.tool_calls_json:
        message["tool_calls"] = orjson.loads(choice.tool_calls_json)
    return message


def without_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Instructions are never carried over to the next response."""
    return [message for message in messages if message.get("role") != "system"]


class ResponseChains:
    def __init__(self, store_address: str, max_message_bytes: int) -> None:
        # An agent waits on this read: a store restarting gets two quick retries, not the default five.
        self._store = AsyncStoreClient(store_address, timeout_s=STORE_TIMEOUT_S, retries=2,
                                       max_message_bytes=max_message_bytes)  # fmt: skip
        self._recent: collections.OrderedDict[str, list[dict[str, Any]]] = collections.OrderedDict()

    def remember(self, response_id: str, conversation: list[dict[str, Any]]) -> None:
        self._recent[response_id] = conversation
        self._recent.move_to_end(response_id)
        while len(self._recent) > CACHED_CONVERSATIONS:
            self._recent.popitem(last=False)

    async def history(self, response_id: str) -> list[dict[str, Any]]:
        """The conversation a new request continues: every earlier turn, without instructions."""
        recent = self._recent.get(response_id)
        if recent is not None:
            return [dict(message) for message in recent]
        call = await self._stored_call(response_id)
        request = orjson.loads(call.request_json)
        if request.get("store") is False:
            raise not_found(response_id, ": it was created with store=false")
        previous = request.get("previous_response_id")
        earlier = await self.history(previous) if previous else []
        conversation = without_system(protocol.input_messages(request, earlier)) + [
            assistant_message(call)
        ]
        self.remember(response_id, conversation)
        return [dict(message) for message in conversation]

    async def close(self) -> None:
        await self._store.close()

    async def _stored_call(self, response_id: str) -> llm_call_pb2.LlmCall:
        call_id = answers.call_id_of(response_id)
        if not call_id:
            raise not_found(response_id, "")
        try:
            response = await self._store.get_call(
                store_pb.GetCallRequest(call_id=call_id, view=store_pb.CALL_VIEW_FULL)
            )
        except RPCError as error:
            if error.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise not_found(response_id, "") from None
            raise openai_errors.unavailable(
                f"the token store cannot be read for {response_id}: {error.message}"
            ) from None
        call = response.call
        if call.endpoint != llm_call_pb2.CALL_ENDPOINT_RESPONSES:
            raise not_found(response_id, "")
        if call.outcome != SUCCEEDED:
            raise not_found(response_id, ": it did not complete")
        return call
