"""The `exact_history` mode: a session's later calls continue the exact ids of its earlier ones.

When a request continues its trajectory's last call (see history_book), ingest renders
only the new turns (after a stand-in history, see turn_rules), splices them after the
ids the model saw and sampled, and generates from those ids with vLLM's token-in
endpoint. vLLM's derender endpoint turns the sampled ids back into the chat answer the
agent expects, with tool calls and reasoning parsed and streamed as chat chunks. So
every turn extends the sequence before it and a trajectory trains as one sample, even
when the chat template would drop earlier reasoning.

What the agent gets differs from a rendered call's answer in nothing it reads: the
same message, tool calls, finish reason, usage and event sequence. Sampled-token
logprobs a streamed exact call returns to an agent that asked for them are vLLM's
derender's: absent from the chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from functools import partial
from typing import Any

import orjson
import structlog

from parity.api.common.v1 import llm_call_pb2
from parity.services.ingest import openai_errors
from parity.services.ingest.capture.call_capture import CallCapture
from parity.services.ingest.history.history_book import Continuation, HistoryBook, TrajectoryKey
from parity.services.ingest.history.turn_rules import (
    TemplateUnsupported,
    TurnRules,
    derive_turn_rules,
)
from parity.services.ingest.replies import DISCONNECTED, SUCCEEDED, UPSTREAM_ERROR
from parity.services.ingest.session_caps import context_limit
from parity.services.ingest.upstream.chat_calls import (
    ChatCall,
    Forwarded,
    StreamFailed,
    render_batches,
)
from parity.services.ingest.upstream.client import UpstreamClient, UpstreamFailed, UpstreamReply
from parity.services.ingest.upstream.http_pool import UpstreamAbandoned, UpstreamConnectionError
from parity.services.ingest.upstream.replica_router import Replica, ReplicaRouter
from parity.services.ingest.upstream.sse import split_sse_data

log = structlog.get_logger(__name__)

EXACT_HISTORY = llm_call_pb2.HISTORY_MODE_EXACT_HISTORY
RENDER_PATH = "/v1/chat/completions/render"
GENERATE_PATH = "/inference/v1/generate"
DERENDER_PATH = "/v1/chat/completions/derender"
TEMPLATE_UNSUPPORTED = "template_unsupported"
TOOL_CALL_ID_PREFIX = "chatcmpl-tool-"


class ExactHistory:
    def __init__(self, router: ReplicaRouter, upstream: UpstreamClient, book: HistoryBook) -> None:
        self.router = router
        self.upstream = upstream
        self.book = book
        self._rules: dict[str, asyncio.Task[TurnRules | None]] = {}

    def watch(self, call: ChatCall, capture: CallCapture) -> Continuation | None:
        """Mark the capture as exact_history and have it remember its sequence; the continuation, if the request
        continues the last call of its conversation (of its trajectory and thread)."""
        capture.history_mode = EXACT_HISTORY
        key = (call.session.session_id, call.session.trajectory_name, call.session.thread_id)
        capture.on_succeeded = lambda done: self._remember(key, done)
        if call.body.get("n", 1) != 1:
            return None
        found = self.book.continuation(key, call.body)
        if isinstance(found, str):
            capture.history_fallback = found
            return None
        return found

    async def forward(
        self,
        call: ChatCall,
        capture: CallCapture,
        continuation: Continuation,
        candidates: list[Replica],
        refuse_overrun: bool = False,
    ) -> Forwarded | None:
        """The call generated from the continued ids; None when the template cannot be spliced (rendered as
        deployed instead). With `refuse_overrun`, a call whose max_tokens would run past the context is refused."""
        body = call.body | {"messages": TurnRules.stand_in() + continuation.new_messages}
        try:
            rules = await self.rules(call.served_model)
            if rules is None:
                capture.history_fallback = TEMPLATE_UNSUPPORTED
                return None
            status, payload = await self.upstream.ask(candidates, RENDER_PATH, orjson.dumps(body))
            if status != 200:
                if context_limit.overflows(status, payload):
                    await context_limit.refuse(capture, context_limit.upstream_message(payload))
                # The new turns themselves are invalid (a bad tool message): vLLM's answer is the agent's.
                await capture.finish(UPSTREAM_ERROR, payload[:500].decode(errors="replace"))
                return Forwarded(capture, status=status, error_body=payload)
            rendered = orjson.loads(payload)
            tail = rules.tail(rendered["token_ids"])
            if tail is None:
                capture.history_fallback = TEMPLATE_UNSUPPORTED
                return None
            prompt = rules.continue_after(continuation.sequence.tolist(), tail)
            limit = self.router.max_model_len(call.served_model)
            if limit is not None and len(prompt) >= limit:
                await context_limit.refuse(capture, (
                    f"This model's maximum context length is {limit} tokens. However, the session's exact history "
                    f"and this request's new messages hold {len(prompt)} tokens."
                ))  # fmt: skip
            if limit is not None and refuse_overrun:
                await context_limit.refuse_overrun(capture, len(prompt), body, limit)
            request = self._generate_request(rendered, prompt, call)
            reply = await self.upstream.post(candidates, GENERATE_PATH, orjson.dumps(request))
        except openai_errors.HttpError as error:
            # Recorded even so (unless it was, as a context cap): the record says a step failed, where its absence
            # would look like no step at all.
            if capture.call is None:
                if isinstance(error, UpstreamFailed):
                    capture.upstream(error.replica.name, error.attempts)
                await capture.finish(UPSTREAM_ERROR, error.message)
            raise
        derender = _Derender(
            self.upstream, [reply.replica], call, prompt, body, rendered["request_id"]
        )
        if reply.response.status == 200 and request["stream"]:
            capture.upstream(reply.replica.name, reply.attempts)
            return Forwarded(
                capture,
                stream=partial(render_batches, derender.stream(reply, capture)),
                abandon=reply.response.abandon,
            )
        capture.upstream(reply.replica.name, reply.attempts, reply.first_byte_at)
        return await derender.whole(reply, capture)

    async def rules(self, model: str) -> TurnRules | None:
        """`model`'s turn rules, derived once from its template; None if it cannot be spliced."""
        task = self._rules.get(model)
        if task is None or (task.done() and task.exception() is not None):
            task = self._rules[model] = asyncio.ensure_future(self._derive(model))
        return await asyncio.shield(task)

    async def _derive(self, model: str) -> TurnRules | None:
        candidates = self.router.candidates(model, "")

        async def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> list[int]:
            body = {
                "model": model,
                "messages": messages,
                "add_generation_prompt": add_generation_prompt,
            }
            status, payload = await self.upstream.ask(candidates, RENDER_PATH, orjson.dumps(body))
            if status != 200:
                raise TemplateUnsupported(f"render answered {status}: {payload[:200]!r}")
            return list(orjson.loads(payload)["token_ids"])

        try:
            rules = await derive_turn_rules(render)
        except TemplateUnsupported as error:
            log.warning("exact_history_unsupported", model=model, reason=str(error))
            return None
        log.info("turn_rules_derived", model=model, close_ids=list(rules.close_ids))
        return rules

    def _generate_request(
        self, rendered: dict[str, Any], prompt: list[int], call: ChatCall
    ) -> dict[str, Any]:
        sampling = dict(rendered["sampling_params"])
        body = call.body
        if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
            # Render sized the default to the stand-in's prompt; the real one is longer.
            limit = self.router.max_model_len(call.served_model)
            if limit is not None:
                sampling["max_tokens"] = limit - len(prompt)
        stream = bool(body.get("stream"))
        return rendered | {
            "token_ids": prompt, "sampling_params": sampling, "stream": stream,
            "stream_options": {"include_usage": True} if stream else None,
        }  # fmt: skip

    def _remember(self, key: TrajectoryKey, capture: CallCapture) -> None:
        recorder = capture.recorder
        choice = recorder.choices.get(0)
        if choice is None or recorder.prompt_token_ids is None or len(recorder.choices) != 1:
            return
        reply = {"role": "assistant", "content": "".join(choice.text),
                 "tool_calls": [choice.tool_calls[i] for i in sorted(choice.tool_calls)]}  # fmt: skip
        self.book.remember(
            key, capture.request.body, reply, [*recorder.prompt_token_ids, *choice.token_ids]
        )


class _Derender:
    """Sampled ids to the chat answer: vLLM's derender, fed what the engine's own detokenizer would see."""

    def __init__(
        self, upstream: UpstreamClient, replicas: list[Replica], call: ChatCall, prompt: list[int], body: dict[str, Any],
        response_id: str,
    ) -> None:  # fmt: skip
        self.upstream = upstream
        self.replicas = replicas
        self.call = call
        self.prompt = prompt
        self.chat_request = body
        self.response_id = response_id

    async def whole(self, reply: UpstreamReply, capture: CallCapture) -> Forwarded:
        try:
            payload = await reply.response.read()
        except (UpstreamConnectionError, TimeoutError) as error:
            await capture.finish(
                UPSTREAM_ERROR, f"upstream {reply.replica.name} failed while answering: {error!r}"
            )
            raise openai_errors.bad_gateway(
                f"upstream {reply.replica.name} failed while answering: {error!r}"
            ) from None
        finally:
            reply.release()
        if reply.response.status != 200:
            if context_limit.overflows(reply.response.status, payload):
                await context_limit.refuse(capture, context_limit.upstream_message(payload))
            await capture.finish(UPSTREAM_ERROR, payload[:500].decode(errors="replace"))
            return Forwarded(capture, status=reply.response.status, error_body=payload)
        generated = orjson.loads(payload)
        choice = generated["choices"][0]
        request = {
            "model": self.call.served_model, "generate_response": _as_detokenized(generated),
            "prompt_tokens": len(self.prompt), "prompt_token_ids": self.prompt, "chat_request": self.chat_request,
        }  # fmt: skip
        try:
            status, answer_payload = await self.upstream.ask(
                self.replicas, DERENDER_PATH, orjson.dumps(request)
            )
        except openai_errors.HttpError as error:
            await capture.finish(UPSTREAM_ERROR, error.message)
            raise
        if status != 200:
            await capture.finish(UPSTREAM_ERROR, answer_payload[:500].decode(errors="replace"))
            raise openai_errors.bad_gateway(
                f"derender failed with {status}: {answer_payload[:300]!r}"
            )
        answer = orjson.loads(answer_payload)
        answer["id"] = self.response_id
        answer["usage"] = generated.get("usage") or answer.get("usage")
        answer_choice = answer["choices"][0]
        _as_chat_answer(answer_choice, answer_choice.get("message") or {})
        record = self._record(answer_choice.get("message") or {}, choice, answer, streamed=False)
        capture.add_response(record | {"prompt_token_ids": self.prompt})
        answer_choice["token_ids"] = choice["token_ids"]
        answer["prompt_token_ids"] = self.prompt
        capture.request.strip(answer)
        await capture.finish(SUCCEEDED)
        return Forwarded(capture, response=answer)

    async def stream(
        self, reply: UpstreamReply, capture: CallCapture
    ) -> AsyncGenerator[list[dict[str, Any]], None]:
        """The generate stream's chunks, derendered one network read at a time: each derender replays the reply so
        far through vLLM's parsers, so one call per read rather than per engine step keeps a long reply's cost down
        when vLLM is busy and a read holds many steps."""
        outcome, error_message = DISCONNECTED, ""
        unfinished, state, first, tool_call_seen = b"", None, True, False
        include_usage = bool((self.call.body.get("stream_options") or {}).get("include_usage"))
        ran_to_end = False
        try:
            async for data in reply.response.iter_chunks():
                payloads, unfinished = split_sse_data(unfinished, data)
                if not payloads:
                    continue
                capture.first_byte()
                done = payloads[-1] == b"[DONE]"
                generated = [orjson.loads(p) for p in payloads if p != b"[DONE]"]
                chunks = []
                for step in _merge_steps(generated):
                    answer, state = await self._derender_chunk(step, state)
                    choice = (step.get("choices") or [None])[0]
                    if choice is not None:
                        answer_choice = (answer.get("choices") or [{}])[0]
                        _as_chat_answer(
                            answer_choice, answer_choice.get("delta") or {}, tool_call_seen
                        )
                        tool_call_seen = tool_call_seen or bool(
                            (answer_choice.get("delta") or {}).get("tool_calls")
                        )
                        record = self._record(
                            answer_choice.get("delta") or {}, choice, answer, streamed=True
                        )
                        capture.add_chunk(
                            record | ({"prompt_token_ids": self.prompt} if first else {})
                        )
                        if answer.get("choices"):
                            answer_choice["token_ids"] = choice.get("token_ids") or []
                        if first:
                            chunks.append(_role_chunk(answer, self.prompt))
                        first = False
                        chunks += _finish_apart(answer)
                    elif step.get("usage"):
                        capture.add_chunk({"usage": step["usage"]})
                        if include_usage:
                            chunks.append(answer)
                for chunk in chunks:
                    capture.request.strip(chunk)
                if done:
                    ran_to_end = True
                    await capture.finish(SUCCEEDED)
                    if chunks:
                        yield chunks
                    return
                if chunks:
                    yield chunks
            outcome, error_message = UPSTREAM_ERROR, "upstream closed the stream before [DONE]"
        except UpstreamAbandoned:
            return
        except (
            UpstreamConnectionError,
            TimeoutError,
            orjson.JSONDecodeError,
            openai_errors.HttpError,
        ) as error:
            outcome, error_message = UPSTREAM_ERROR, f"upstream stream failed: {error!r}"
        finally:
            reply.release()
            if not ran_to_end and outcome != UPSTREAM_ERROR:
                capture.finish_nowait(outcome, error_message)
        await capture.finish(outcome, error_message)
        raise StreamFailed(error_message)

    async def _derender_chunk(
        self, chunk: dict[str, Any], state: Any
    ) -> tuple[dict[str, Any], Any]:
        request = {
            "stream": True, "model": self.call.served_model, "generate_chunk": _as_detokenized(chunk),
            "stream_state": state, "prompt_tokens": len(self.prompt), "prompt_token_ids": self.prompt,
            "chat_request": self.chat_request,
        }  # fmt: skip
        status, payload = await self.upstream.ask(
            self.replicas, DERENDER_PATH, orjson.dumps(request)
        )
        if status != 200:
            raise openai_errors.bad_gateway(f"derender failed with {status}: {payload[:300]!r}")
        answer = orjson.loads(payload)
        answer["chunk"]["id"] = self.response_id
        return answer["chunk"], answer["stream_state"]

    @staticmethod
    def _record(
        message: dict[str, Any], choice: dict[str, Any], answer: dict[str, Any], *, streamed: bool
    ) -> dict[str, Any]:
        """What capture records: the sampled ids and their logprobs from generate, the text and tool calls from derender."""
        answer_choice = (answer.get("choices") or [{}])[0]
        logprobs = (choice.get("logprobs") or {}).get("content") or []
        recorded = {
            "index": 0, "token_ids": choice.get("token_ids") or [],
            "logprobs": {"content": [{"logprob": entry["logprob"]} for entry in logprobs]},
            "finish_reason": answer_choice.get("finish_reason") or choice.get("finish_reason"),
            "stop_reason": choice.get("stop_reason"), "delta" if streamed else "message": message,
        }  # fmt: skip
        return {"choices": [recorded], "usage": answer.get("usage")}


def _role_chunk(answer: dict[str, Any], prompt: list[int]) -> dict[str, Any]:
    """The chat endpoint's first chunk: the role alone (and the prompt's ids), before the reply's first delta."""
    choice = answer["choices"][0]
    delta = choice.get("delta") or {}
    delta.pop("role", None)
    first = {"role": "assistant", "content": ""}
    return answer | {"prompt_token_ids": prompt, "choices": [{"index": 0, "delta": first, "logprobs": None,
                                                              "finish_reason": None, "token_ids": []}]}  # fmt: skip


def _finish_apart(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunk, and its finish reason in a chunk of its own when it also carries a delta, as the chat endpoint
    sends it (derender hands over the last text it held back together with the finish)."""
    choice = (answer.get("choices") or [{}])[0]
    delta = choice.get("delta") or {}
    if not choice.get("finish_reason") or not (delta.get("content") or delta.get("tool_calls")):
        return [answer]
    finish = {"index": choice.get("index", 0), "delta": {"content": ""}, "logprobs": None, "token_ids": [],
              "finish_reason": choice["finish_reason"], "stop_reason": choice.get("stop_reason")}  # fmt: skip
    return [answer | {"choices": [choice | {"finish_reason": None, "stop_reason": None}]},
            answer | {"choices": [finish]}]  # fmt: skip


def _as_chat_answer(
    choice: dict[str, Any], message: dict[str, Any], tool_call_seen: bool = False
) -> None:
    """Derender's answer in the two details where vLLM's chat endpoint answers otherwise: tool call ids, and the
    finish reason of a reply that called tools."""
    for call in message.get("tool_calls") or ():
        if call.get("id") and not call["id"].startswith(TOOL_CALL_ID_PREFIX):
            call["id"] = TOOL_CALL_ID_PREFIX + call["id"]
    if choice.get("finish_reason") == "stop" and (tool_call_seen or message.get("tool_calls")):
        choice["finish_reason"] = "tool_calls"


def _as_detokenized(generated: dict[str, Any]) -> dict[str, Any]:
    """The response with the stop token that ended it taken out: the engine never turns that token into text,
    and derender (with a parser) would."""
    choices = []
    for choice in generated.get("choices") or ():
        stopped_on_token = choice.get("finish_reason") == "stop" and not isinstance(
            choice.get("stop_reason"), str
        )
        ids = choice.get("token_ids") or []
        if stopped_on_token and ids:
            logprobs = choice.get("logprobs")
            content = (logprobs or {}).get("content")
            choice = choice | {"token_ids": ids[:-1]}
            if content:
                choice["logprobs"] = logprobs | {"content": content[:-1]}
        choices.append(choice)
    return generated | {"choices": choices}


def _merge_steps(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One read's generate chunks as one chunk per run of token steps. The finishing step and the usage chunk
    stay on their own: the chat endpoint sends its finish reason in a chunk of its own."""
    merged: list[dict[str, Any]] = []
    for chunk in chunks:
        choices = chunk.get("choices") or []
        previous = (merged[-1].get("choices") or [None])[0] if merged else None
        if (
            choices
            and previous is not None
            and not previous.get("finish_reason")
            and not choices[0].get("finish_reason")
        ):
            step = choices[0]
            content = ((previous.get("logprobs") or {}).get("content") or []) + (
                (step.get("logprobs") or {}).get("content") or []
            )
            merged[-1]["choices"] = [step | {
                "token_ids": (previous.get("token_ids") or []) + (step.get("token_ids") or []),
                "logprobs": {"content": content},
            }]  # fmt: skip
            continue
        merged.append(dict(chunk))
    return merged
