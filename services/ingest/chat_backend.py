"""Where every captured call goes: a chat or completions body to a policy replica or an external model.

Each endpoint (chat completions, completions, Anthropic Messages, the Responses API)
turns its request into the chat or completions body vLLM takes and hands it here.
What comes back is already recorded, and without what capture added to the request
(token ids and logprobs the agent did not ask for): the answer as a JSON object, or
its stream, each chunk recorded and then rendered by the endpoint, one write per network read
(under load one read holds many events, and writing each alone would cost more than
the relay). A stream is recorded before it ends, so with durability "before" an
endpoint's final event goes out only once the call is durable.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import orjson

from parity.core.session_budget import REFUSAL_TYPE, SessionBudget
from parity.services.ingest import openai_errors
from parity.services.ingest.capture.call_capture import CallCapture
from parity.services.ingest.capture.capture_sink import CaptureSink
from parity.services.ingest.capture.recorder import COMPLETIONS, CaptureRequest
from parity.services.ingest.history.exact_history import ExactHistory
from parity.services.ingest.replies import (
    DISCONNECTED,
    POLICY,
    SESSION_CAPPED,
    SUCCEEDED,
    UPSTREAM_ERROR,
)
from parity.services.ingest.session_caps import context_limit
from parity.services.ingest.session_caps.budget_ledger import BudgetLedger, SessionCapped
from parity.services.ingest.traffic_gate import admit_route
from parity.services.ingest.upstream.canary import CanaryRoute
from parity.services.ingest.upstream.chat_calls import ChatCall, Forwarded, Render, StreamFailed
from parity.services.ingest.upstream.client import UpstreamClient, UpstreamFailed, UpstreamReply
from parity.services.ingest.upstream.external_models import ExternalModels
from parity.services.ingest.upstream.http_pool import UpstreamAbandoned, UpstreamConnectionError
from parity.services.ingest.upstream.policy_adapter import PolicyAdapter
from parity.services.ingest.upstream.policy_routes import PolicyRoutes
from parity.services.ingest.upstream.replica_router import Replica, ReplicaRouter
from parity.services.ingest.upstream.sse import split_sse_data

UPSTREAM_PATHS = {COMPLETIONS: "/v1/completions"}
CHAT_PATH = "/v1/chat/completions"
RENDER_PATHS = {COMPLETIONS: "/v1/completions/render"}
CHAT_RENDER_PATH = "/v1/chat/completions/render"


@dataclass
class PolicyState:
    """The policy version stamped on calls forwarded from now on, and the LoRA adapter that serves it, if any."""

    version: int = 0
    adapter: PolicyAdapter = field(default_factory=PolicyAdapter)
    canary: CanaryRoute = field(default_factory=lambda: CanaryRoute(health_interval_s=2.0))
    """A candidate serving a share of sessions at its own version, while the trainer runs one."""
    routes: PolicyRoutes = field(default_factory=PolicyRoutes)
    """Runs of their own on the replicas' base model: a model name each, at an adapter and version of its own."""


class _Route(NamedTuple):
    """The replicas that serve a call, the policy version its record is stamped with, and the LoRA adapter it was
    sent to in place of the model it named (empty: none)."""

    candidates: list[Replica]
    policy_version: int
    lora_adapter: str = ""
    routed_model: str = ""


class ChatBackend:
    def __init__(
        self, router: ReplicaRouter, upstream: UpstreamClient, sink: CaptureSink, policy: PolicyState,
        external: ExternalModels, exact: ExactHistory | None = None, history_mode: str = "as_deployed",
        ledger: BudgetLedger | None = None,
    ) -> None:  # fmt: skip
        self.router = router
        self.upstream = upstream
        self.sink = sink
        self.policy = policy
        self.external = external
        self.exact = exact
        self.history_mode = history_mode
        """The mode of sessions that do not name one."""
        self.ledger = ledger or BudgetLedger(SessionBudget())

    def models(self) -> list[str]:
        return sorted(self.served())

    def served(self) -> set[str]:
        served = self.router.models() | set(self.external.models())
        if self.policy.routes:
            served.update(self.policy.routes.served())
        return served

    async def ask_replica(self, model: str, path: str, body: bytes) -> tuple[int, bytes]:
        """A request that is no call to capture (token counting, template probes), to a replica serving `model`."""
        if not self.router.knows(model):
            raise openai_errors.not_found(
                f"The model `{model}` does not exist. Available: {', '.join(self.models()) or 'none'}.",
                "model",
            )
        return await self.upstream.ask(self.router.candidates(model, ""), path, body)

    async def forward(self, call: ChatCall) -> Forwarded:
        """The call answered and recorded. An external model's goes to it; a policy call is routed (a canary, or
        the serving replicas through the LoRA adapter), opened for capture, admitted by its session's budget
        (session_caps/), generated from its session's exact ids when its history mode says so (history/), checked
        against the context when its context policy refuses overruns, and sent."""
        self.sink.check_accepting()
        if self.external.serves(call.served_model):
            return await self.external.forward(call, self.sink)
        # A run's weight sync holds its route's model alone (traffic_gate.py); held, the call waits here (even for a
        # model whose first adapter is not loaded yet), and is routed after, to the adapter and version the sync set.
        await admit_route(call.served_model)
        self._require_served(call)
        route = self._route(call)
        capture = self._open_capture(call, route)
        await self._admit(call, capture)
        refuse_overrun = self.ledger.context_policy(call.session) == "refuse"
        exact = await self._forward_exact(call, capture, route, refuse_overrun)
        if exact is not None:
            return exact
        if refuse_overrun:
            await self._refuse_overrun(call, capture, route.candidates)
        return await self._post(call, capture, route.candidates)

    def _require_served(self, call: ChatCall) -> None:
        if self.router.knows(call.served_model) or call.served_model in self.policy.routes:
            return
        if starting := self.router.starting():
            raise openai_errors.unavailable(
                f"model `{call.served_model}` is not known yet: {starting} replica(s) have not answered; retry shortly"
            )
        raise openai_errors.not_found(
            f"The model `{call.model}` does not exist. Available: {', '.join(self.models()) or 'none'}.",
            "model",
        )

    def _route(self, call: ChatCall) -> _Route:
        """A canary's replicas at its version if it takes the session, else the serving replicas (sticky to the
        session): at a run's route's adapter and version if the model is a route's (policy_routes.py), else at the
        serving version, through the policy's LoRA adapter if one serves the model."""
        session_id = call.session.session_id
        canary = self.policy.canary.pick(session_id, call.served_model)
        if canary is not None:
            # The candidate's replicas hold its whole weights: no adapter routing.
            return _Route(*canary)
        routed_model = call.body.get("model", "")
        if self.policy.routes and (run := self.policy.routes.route(call.body)) is not None:
            # The replicas listing the adapter; until their next health check lists a new one, those of the model,
            # or those of the base model every route's adapter is loaded into.
            candidates = (
                self.router.candidates(run.adapter, session_id)
                or self.router.candidates(call.served_model, session_id)
                or self.router.candidates(self.router.policy_model() or "", session_id)
            )
            return _Route(candidates, run.version, run.adapter, routed_model)
        candidates = self.router.candidates(call.served_model, session_id)
        lora_adapter = self.policy.adapter.route(call.body)
        return _Route(
            candidates, self.policy.version, lora_adapter, routed_model if lora_adapter else ""
        )

    def _open_capture(self, call: ChatCall, route: _Route) -> CallCapture:
        request = CaptureRequest.prepare(
            call.endpoint, call.body, call.raw_request, call.session, call.metadata
        )
        request.lora_adapter, request.routed_model = route.lora_adapter, route.routed_model
        return CallCapture(
            request, self.sink, model=call.model, served_model=call.served_model,
            policy_version=route.policy_version, kind=POLICY, started_at=call.started_at,
        )  # fmt: skip

    async def _admit(self, call: ChatCall, capture: CallCapture) -> None:
        """Count the call against its session's budget; past a cap, record it as capped and refuse it."""
        try:
            usage = self.ledger.admit(call.session)
        except SessionCapped as capped:
            # Recorded, so the episode is known to be cut short where it was: the assembler reads the cap from it.
            capture.session_cap = capped.cap
            await capture.finish(SESSION_CAPPED, str(capped))
            raise openai_errors.HttpError(400, str(capped), REFUSAL_TYPE, "session") from None
        if usage is not None:
            capture.on_recorded = usage.record

    async def _forward_exact(
        self, call: ChatCall, capture: CallCapture, route: _Route, refuse_overrun: bool
    ) -> Forwarded | None:
        """The call generated from its session's exact ids (history/exact_history.py); None when the session is
        not in that mode, the call does not continue its conversation, or the template cannot be spliced."""
        history_mode = call.session.history_mode or self.history_mode
        if self.exact is None or call.endpoint == COMPLETIONS or history_mode != "exact_history":
            return None
        continuation = self.exact.watch(call, capture)
        if continuation is None:
            return None
        return await self.exact.forward(
            call, capture, continuation, route.candidates, refuse_overrun
        )

    async def _refuse_overrun(
        self, call: ChatCall, capture: CallCapture, candidates: list[Replica]
    ) -> None:
        """Refuse the call if its prompt, as a replica renders it, and its max_tokens exceed the context."""
        limit = self.router.max_model_len(call.served_model)
        if limit is None or context_limit.requested_reply(call.body) is None:
            return
        try:
            status, payload = await self.upstream.ask(candidates, RENDER_PATHS.get(call.endpoint, CHAT_RENDER_PATH),
                                                      orjson.dumps(call.body))  # fmt: skip
        except UpstreamFailed:
            return  # the call itself meets the same failure, and is recorded with it
        if status != 200:
            return  # the call itself is refused the same way (a prompt that alone fills the context is a cap too)
        rendered = orjson.loads(payload)
        prompt_tokens = (
            max(len(r["token_ids"]) for r in rendered)
            if isinstance(rendered, list)
            else len(rendered["token_ids"])
        )
        await context_limit.refuse_overrun(capture, prompt_tokens, call.body, limit)

    async def _post(
        self, call: ChatCall, capture: CallCapture, candidates: list[Replica]
    ) -> Forwarded:
        """The call as it came (with what capture added) to a replica: its answer whole, or its stream."""
        path = UPSTREAM_PATHS.get(call.endpoint, CHAT_PATH)
        try:
            reply = await self.upstream.post(candidates, path, orjson.dumps(call.body))
        except UpstreamFailed as failure:
            # The call is the session's even though no replica answered it: the record
            # says a step failed, where its absence would look like no step at all.
            capture.upstream(failure.replica.name, failure.attempts)
            await capture.finish(UPSTREAM_ERROR, failure.message)
            raise
        if reply.response.status == 200 and call.body.get("stream"):
            capture.upstream(reply.replica.name, reply.attempts)
            return Forwarded(
                capture, stream=partial(_stream, reply, capture), abandon=reply.response.abandon
            )
        capture.upstream(reply.replica.name, reply.attempts, reply.first_byte_at)
        return await _whole(reply, capture)


async def _whole(reply: UpstreamReply, capture: CallCapture) -> Forwarded:
    try:
        payload = await reply.response.read()
        response = orjson.loads(payload) if reply.response.status == 200 else None
    except (UpstreamConnectionError, TimeoutError, orjson.JSONDecodeError) as error:
        failure = (
            openai_errors.gateway_timeout(f"upstream {reply.replica.name} stalled while answering")
            if isinstance(error, TimeoutError)
            else openai_errors.bad_gateway(
                f"upstream {reply.replica.name} sent an unreadable answer: {error!r}"
            )
        )
        await capture.finish(UPSTREAM_ERROR, failure.message)
        raise failure from None
    finally:
        reply.release()
    if response is None:
        if context_limit.overflows(reply.response.status, payload):
            await context_limit.refuse(capture, context_limit.upstream_message(payload))
        await capture.finish(UPSTREAM_ERROR, payload[:500].decode(errors="replace"))
        return Forwarded(capture, status=reply.response.status, error_body=payload)
    capture.add_response(response)
    await capture.finish(SUCCEEDED)
    return Forwarded(capture, response=response)


async def _stream(
    reply: UpstreamReply, capture: CallCapture, render: Render
) -> AsyncGenerator[bytes, None]:
    """The upstream's SSE events, each recorded and then rendered as the endpoint's events.

    Until the stream has run its course here, the agent leaving closes this generator
    at whichever yield it is held; the call is then recorded on the way out, whatever
    the outcome so far (the last events may have held `[DONE]`).
    """
    outcome, error_message = DISCONNECTED, ""
    unfinished = b""
    ran_to_end = False
    record = capture.recorder.add_chunk  # once per streamed token: no wrapper call
    try:
        async for data in reply.response.iter_chunks():
            payloads, unfinished = split_sse_data(unfinished, data)
            if not payloads:
                continue
            capture.first_byte()
            events: list[bytes] = []
            for payload in payloads:
                if payload == b"[DONE]":
                    outcome = SUCCEEDED
                    break
                chunk = orjson.loads(payload)
                record(chunk)
                events.append(render(chunk))
            if rendered := b"".join(events):
                yield rendered
            if outcome == SUCCEEDED:
                # Recorded before this generator ends: whatever the endpoint sends after it (its
                # final event) goes out only once the call is recorded.
                ran_to_end = True
                await capture.finish(SUCCEEDED)
                return
        outcome, error_message = UPSTREAM_ERROR, "upstream closed the stream before [DONE]"
    except UpstreamAbandoned:
        # The agent went away while vLLM was silent: recorded as disconnected, below.
        return
    except (UpstreamConnectionError, TimeoutError, orjson.JSONDecodeError) as error:
        outcome, error_message = UPSTREAM_ERROR, f"upstream stream failed: {error!r}"
    finally:
        reply.release()
        if not ran_to_end and outcome != UPSTREAM_ERROR:
            capture.finish_nowait(outcome, error_message)
    ran_to_end = True
    await capture.finish(outcome, error_message)
    raise StreamFailed(error_message)
