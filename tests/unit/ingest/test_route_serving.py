"""A run's route end to end inside ingest: the backend sends its model to its adapter at its version, the control
API sets and lists it, and a route's pause waits for a streamed answer to its end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from parity.api.ingest.v1 import ingest_service_pb2 as pb
from parity.core.session_slug import SessionRef
from parity.services.ingest.capture.policy_record import PolicyRecord
from parity.services.ingest.capture.recorder import CHAT
from parity.services.ingest.chat_backend import ChatBackend, PolicyState
from parity.services.ingest.control import IngestControl
from parity.services.ingest.http_api import IngestHttpApp
from parity.services.ingest.metrics import IngestMetrics
from parity.services.ingest.replies import FinalEvent, StreamReply
from parity.services.ingest.servicer import IngestServicer
from parity.services.ingest.traffic_gate import TrafficGate, admit_route
from parity.services.ingest.upstream.chat_calls import ChatCall
from parity.services.ingest.upstream.external_models import ExternalModels
from parity.services.ingest.upstream.replica_router import ReplicaRouter


def backend_over(policy: PolicyState) -> ChatBackend:
    router = ReplicaRouter(["http://a:8100", "http://b:8100"])
    router.replicas[0].models = {"base", "base-lora", "run-a-v2"}
    router.replicas[1].models = {"base", "base-lora"}
    for replica in router.replicas:
        replica.healthy = True
    return ChatBackend(router, None, None, policy, ExternalModels())  # type: ignore[arg-type]


def call_for(model: str) -> ChatCall:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return ChatCall(CHAT, body, b"", SessionRef("s"), {}, model, model)


def test_a_routes_model_goes_to_its_adapter_at_its_version_and_the_base_model_to_the_policys() -> (
    None
):
    policy = PolicyState(version=4)
    policy.adapter.set("base", "base-lora")
    policy.routes.set("run-a", "run-a-v2", 2)
    backend = backend_over(policy)
    assert {"run-a", "base"} <= backend.served() and "run-a" in backend.models()

    run = call_for("run-a")
    backend._require_served(run)  # no replica lists the name itself: the route serves it
    route = backend._route(run)
    assert (route.policy_version, route.lora_adapter, route.routed_model) == (
        2,
        "run-a-v2",
        "run-a",
    )
    assert run.body["model"] == "run-a-v2" and [r.name for r in route.candidates] == ["a:8100"]

    base = call_for("base")
    route = backend._route(base)
    assert (route.policy_version, route.lora_adapter, base.body["model"]) == (
        4,
        "base-lora",
        "base-lora",
    )
    assert len(route.candidates) == 2


def test_a_route_whose_adapter_no_replica_lists_yet_goes_to_the_replicas_of_its_model() -> None:
    policy = PolicyState()
    policy.routes.set("base", "base-new-lora", 1)
    route = backend_over(policy)._route(call_for("base"))
    assert route.lora_adapter == "base-new-lora" and len(route.candidates) == 2


def test_a_tenants_new_adapter_named_after_its_route_goes_to_the_base_models_replicas_until_listed() -> (
    None
):
    """A promotion loads `tenant-a` into every replica and routes `tenant-a` to it at once; the replicas list it
    only at their next health check."""
    policy = PolicyState()
    policy.routes.set("tenant-a", "tenant-a", 3)
    backend = backend_over(policy)
    for replica in backend.router.replicas:
        replica.base_model = "base"
    call = call_for("tenant-a")
    backend._require_served(call)
    route = backend._route(call)
    assert (route.lora_adapter, route.policy_version, len(route.candidates)) == ("tenant-a", 3, 2)


async def test_the_control_api_sets_pauses_lists_and_resumes_a_route(tmp_path: Path) -> None:
    sink: Any = SimpleNamespace(queue_depth=0, spool=SimpleNamespace(count=0), captured=0)
    control = IngestControl(
        TrafficGate(), ReplicaRouter([]), sink, PolicyState(), PolicyRecord(tmp_path / "s.db")
    )
    servicer = IngestServicer(control)
    context: Any = None
    set_route = pb.SetPolicyVersionRequest(
        policy_version=3, policy_model="run-a", lora_adapter="run-a", route=True
    )
    assert (await servicer.SetPolicyVersion(set_route, context)).previous_policy_version == 0
    paused = await servicer.PauseTraffic(pb.PauseTrafficRequest(policy_model="run-a"), context)
    assert paused.drained_count == 0 and paused.pause_time.ToNanoseconds() > 0
    stats = await servicer.GetStats(pb.GetStatsRequest(), context)
    assert not stats.paused and stats.policy_version == 0
    assert list(stats.routes) == [
        pb.PolicyRoute(policy_model="run-a", lora_adapter="run-a", policy_version=3, paused=True)
    ]
    resumed = await servicer.ResumeTraffic(pb.ResumeTrafficRequest(policy_model="run-a"), context)
    assert resumed.paused_duration.ToNanoseconds() > 0
    assert not (await servicer.GetStats(pb.GetStatsRequest(), context)).routes[0].paused
    control.record.close()


class _Capture:
    def log_fields(self) -> dict[str, Any]:
        return {}


class _StreamingChat:
    """An endpoint that, as the backend does, admits its request's model, and streams until told to end."""

    def __init__(self) -> None:
        self.end = asyncio.Event()
        self.streaming = asyncio.Event()

    async def handle(
        self, endpoint: Any, body: bytes, slug: str | None, headers: Any
    ) -> StreamReply:
        await admit_route(orjson.loads(body)["model"])
        return StreamReply(self._events(), _Capture())  # type: ignore[arg-type]

    async def _events(self) -> AsyncGenerator[bytes, None]:
        yield b"data: 1\n\n"
        self.streaming.set()
        await self.end.wait()
        yield FinalEvent(b"data: [DONE]\n\n")


async def test_a_routes_pause_waits_for_its_streamed_answer_to_end() -> None:
    gate, chat = TrafficGate(), _StreamingChat()
    endpoints: Any = SimpleNamespace(chat=chat)
    app = IngestHttpApp(endpoints, gate, IngestMetrics(*[lambda: 0] * 8), None, 1 << 20)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    request = orjson.dumps({"model": "run-a", "messages": [], "stream": True})
    incoming = [{"type": "http.request", "body": request}]

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()  # the agent stays
        return {"type": "http.disconnect"}

    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": []}
    serving = asyncio.ensure_future(app(scope, receive, send))
    await chat.streaming.wait()
    assert gate.route_hold("run-a").in_flight == 1
    pausing = asyncio.ensure_future(gate.pause_route("run-a", 5.0))
    other_pause = asyncio.ensure_future(gate.pause_route("run-b", 5.0))
    assert await other_pause == 0  # another run's pause does not wait for this stream
    await asyncio.sleep(0.01)
    assert not pausing.done()
    chat.end.set()
    assert await pausing == 1
    await serving
    assert sent[-1]["body"] == b"data: [DONE]\n\n" and gate.in_flight == 0
    assert gate.route_hold("run-a").in_flight == 0
