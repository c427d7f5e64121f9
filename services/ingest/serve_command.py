"""How `parity ingest serve` runs: the agent-facing HTTP APIs and the IngestService control plane.

Both share one process and one event loop: the HTTP API on --http-port, gRPC
control (with health and reflection) on --port.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog
import uvicorn

from parity.api.ingest.v1 import ingest_service_pb2, ingest_service_pb2_grpc
from parity.core.session_budget import CONTEXT_POLICIES, SessionBudget
from parity.core.session_slug import HISTORY_MODES
from parity.core.settings_fields import setting
from parity.services.ingest.capture.capture_sink import CaptureSink
from parity.services.ingest.capture.feedback_sink import FeedbackSink
from parity.services.ingest.capture.policy_record import PolicyRecord
from parity.services.ingest.capture.spool import Spool
from parity.services.ingest.chat_backend import ChatBackend, PolicyState
from parity.services.ingest.control import IngestControl
from parity.services.ingest.endpoints.anthropic_messages.serving import AnthropicMessagesServing
from parity.services.ingest.endpoints.anthropic_messages.template_facts import TemplateFacts
from parity.services.ingest.endpoints.feedback.serving import FeedbackServing
from parity.services.ingest.endpoints.openai_chat.serving import OpenAIChatServing
from parity.services.ingest.endpoints.openai_responses.chain import ResponseChains
from parity.services.ingest.endpoints.openai_responses.serving import ResponsesServing
from parity.services.ingest.fleet_join import FleetJoin
from parity.services.ingest.history.exact_history import ExactHistory
from parity.services.ingest.history.history_book import HistoryBook
from parity.services.ingest.http_api import Endpoints, IngestHttpApp
from parity.services.ingest.http_listener import HttpListener
from parity.services.ingest.metrics import IngestMetrics
from parity.services.ingest.model_aliases import AliasRule, ModelAliases
from parity.services.ingest.servicer import IngestServicer
from parity.services.ingest.session_caps.budget_ledger import BudgetLedger
from parity.services.ingest.traffic_gate import TrafficGate
from parity.services.ingest.upstream.canary import CanaryRoute
from parity.services.ingest.upstream.client import UpstreamClient
from parity.services.ingest.upstream.external_models import ExternalModels
from parity.services.ingest.upstream.http_pool import Origin
from parity.services.ingest.upstream.replica_router import ReplicaRouter
from parity.services.runtime.addresses import AddressSet, parse_address_list
from parity.services.runtime.auth import read_secret
from parity.services.runtime.config import ServerConfig
from parity.services.runtime.errors import InvalidArgument, Unavailable
from parity.services.runtime.server import ServiceBinding
from parity.services.runtime.service_definition import ServiceDefinition

log = structlog.get_logger(__name__)

FULL_NAME = ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"].full_name
DEFAULT_PORT = 50052
DURABILITY_MODES = ("before", "after")


@dataclass
class IngestConfig(ServerConfig):
    port: int = setting(DEFAULT_PORT, "gRPC control port (IngestService); 0 picks a free one")
    http_port: int = setting(8000, "OpenAI-compatible HTTP port")
    http_reuse_port: bool = setting(
        False, "share --http-port with the other ingest processes of this host (SO_REUSEPORT): the kernel spreads "
        "agents' connections across them"
    )  # fmt: skip
    upstreams: str = setting(
        "", "comma-separated vLLM base URLs, e.g. http://10.0.0.5:8100,http://10.0.0.6:8100"
    )
    store: str = setting("127.0.0.1:50051", "token store gRPC address")
    peers: str = setting(
        "", "the other ingests of this deployment (comma-separated gRPC addresses, or dns:///NAME:PORT for every "
        "address NAME holds): a starting ingest takes on their policy version and, while they are paused for a "
        "weight sync, starts paused; empty: none"
    )  # fmt: skip
    durability: str = setting(
        "before", "before: the agent's response waits until the call is in the store or spool; "
        "after: answer first (lowest latency; a crash of ingest loses calls still in memory)", DURABILITY_MODES,
    )  # fmt: skip
    spool_path: str = setting(
        ".parity/ingest-spool.db", "local durable spool for calls the store cannot take yet; it also keeps the last "
        "policy version, so a restarted ingest goes on stamping it"
    )  # fmt: skip
    spool_max_mb: int = setting(1024, "spool disk budget; when spent, new requests get 503")
    capture_batch_size: int = setting(256, "calls per WriteCalls to the store")
    max_pending_captures: int = setting(
        8192, "captured calls held in memory at most (backpressure beyond)"
    )
    store_timeout_s: float = setting(
        5.0, "a store write slower than this goes to the spool instead"
    )
    max_body_mb: int = setting(32, "largest request body accepted")
    upstream_timeout_s: float = setting(
        600.0, "longest silence from an upstream before giving up (504)"
    )
    upstream_retries: int = setting(2, "retries after a connection error or 5xx, with backoff")
    health_interval_s: float = setting(2.0, "seconds between replica health checks")
    upstream_api_key_file: str = setting(
        "",
        "file holding the replicas' API key (vLLM's VLLM_API_KEY), sent to them as a bearer token; empty: none",
    )
    external_models: str = setting(
        "", "LiteLLM config YAML (model_list) for models not being trained"
    )
    policy_version: int = setting(
        0, "policy version stamped on calls until SetPolicyVersion changes it; a higher one recorded in the spool "
        "or held by a peer wins"
    )  # fmt: skip
    history_mode: str = setting(
        "as_deployed", "how sessions that do not name one build their prompts: as_deployed (vLLM renders every "
        "request's messages) or exact_history (later calls continue the exact ids of earlier ones; docs/multi-turn.md)",
        HISTORY_MODES,
    )  # fmt: skip
    exact_history_budget_tokens: int = setting(
        50_000_000, "token ids exact_history keeps in memory for the trajectories it continues (4 bytes each); "
        "the least recently used trajectory is forgotten first",
    )  # fmt: skip
    session_max_calls: int = setting(
        0, "serving default: policy calls a session may make; 0: no cap", group="session budgets"
    )
    session_max_tokens: int = setting(
        0, "serving default: prompt and completion tokens a session may use, summed over its calls; 0: no cap",
        group="session budgets",
    )  # fmt: skip
    session_max_completion_tokens: int = setting(
        0, "serving default: sampled tokens a session may use, summed over its calls; 0: no cap", group="session budgets"
    )  # fmt: skip
    session_max_seconds: float = setting(
        0.0, "serving default: wall seconds a session may run from its first call; 0: no cap", group="session budgets"
    )  # fmt: skip
    session_context: str = setting(
        "clamp", "serving default: a call whose prompt plus max_tokens exceeds the model's context is cut to fit "
        "(clamp: finish_reason length) or refused as context_length_exceeded and recorded as the session's context "
        "cap (refuse: one more render of the prompt per call that sets max_tokens)", CONTEXT_POLICIES,
        group="session budgets",
    )  # fmt: skip
    model_alias: list[str] = field(
        default_factory=list,
        metadata={"help": "PATTERN=MODEL: serve requests for models matching the glob PATTERN with MODEL (a served "
                          "model, or @policy for the policy replicas' own), e.g. 'claude-*=@policy'"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.http_port <= 65535:
            raise InvalidArgument(f"http_port must be in 0..65535, got {self.http_port}")
        for name in ("spool_max_mb", "capture_batch_size", "max_pending_captures", "max_body_mb",
                     "exact_history_budget_tokens"):  # fmt: skip
            if getattr(self, name) < 1:
                raise InvalidArgument(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.upstream_retries < 0:
            raise InvalidArgument(f"upstream_retries must be >= 0, got {self.upstream_retries}")
        for name in (
            "session_max_calls",
            "session_max_tokens",
            "session_max_completion_tokens",
            "session_max_seconds",
        ):
            if not 0 <= getattr(self, name) < math.inf:
                raise InvalidArgument(
                    f"{name} must be 0 (no cap) or a positive number, got {getattr(self, name)}"
                )
        for name in ("store_timeout_s", "upstream_timeout_s", "health_interval_s"):
            # A wait of zero (or less) fails every call at once; inf or nan cannot be scheduled.
            if not 0 < getattr(self, name) < math.inf:
                raise InvalidArgument(
                    f"{name} must be a positive number of seconds, got {getattr(self, name)}"
                )
        for url in self.upstream_urls:
            try:
                Origin.parse(url)
            except ValueError as error:
                raise InvalidArgument(f"upstreams: {error}") from None
        try:
            AddressSet(parse_address_list(self.peers))
        except ValueError as error:
            raise InvalidArgument(f"peers: {error}") from None
        for rule in self.model_alias:
            try:
                AliasRule.parse(rule)
            except ValueError as error:
                raise InvalidArgument(f"model_alias: {error}") from None

    @property
    def session_budget(self) -> SessionBudget:
        """The serving default's caps; a session's own (slug or header) take precedence."""
        return SessionBudget(
            calls=self.session_max_calls or None, tokens=self.session_max_tokens or None,
            completion_tokens=self.session_max_completion_tokens or None, seconds=self.session_max_seconds or None,
            context=self.session_context,
        )  # fmt: skip

    @property
    def upstream_urls(self) -> list[str]:
        return [url.strip() for url in self.upstreams.split(",") if url.strip()]


class _EmbeddedUvicorn(uvicorn.Server):
    """uvicorn inside a process whose runtime already handles SIGTERM and SIGINT, on a
    listener that accepts every waiting connection at once (see http_listener.py)."""

    def __init__(
        self, config: uvicorn.Config, tls_cert_file: str = "", tls_key_file: str = "", reuse_port: bool = False
    ) -> None:  # fmt: skip
        super().__init__(config)
        self.tls_cert_file = tls_cert_file
        self.tls_key_file = tls_key_file
        self.reuse_port = reuse_port

    def tls_context(self) -> ssl.SSLContext | None:
        """HTTPS with the certificate the gRPC port serves; agents authenticate with API keys, not certificates."""
        if not self.tls_cert_file:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return context

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's own startup for a host and port, with HttpListener in place of
        # loop.create_server; it builds the protocol from uvicorn's internals, which
        # is why pyproject pins uvicorn exactly.
        config = self.config

        def create_protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        tls = self.tls_context()
        self.servers = [HttpListener.bind(config.host, config.port, config.backlog, create_protocol, tls,  # type: ignore[list-item]
                                          self.reuse_port)]  # fmt: skip
        self.started = True


def build_bindings(config: IngestConfig) -> list[ServiceBinding]:
    api_key = read_secret(config.upstream_api_key_file, "upstream_api_key_file")
    router = ReplicaRouter(config.upstream_urls, config.health_interval_s, api_key)
    upstream = UpstreamClient(router, retries=config.upstream_retries, timeout_s=config.upstream_timeout_s,
                              api_key=api_key)  # fmt: skip
    spool = Spool(Path(config.spool_path), config.spool_max_mb << 20)
    sink = CaptureSink(
        config.store, spool, durability=config.durability,  # type: ignore[arg-type]
        batch_size=config.capture_batch_size, max_pending=config.max_pending_captures,
        store_timeout_s=config.store_timeout_s,
    )  # fmt: skip
    feedback = FeedbackSink(sink)
    policy = PolicyState(
        config.policy_version, canary=CanaryRoute(config.health_interval_s, api_key)
    )
    gate = TrafficGate()
    record = PolicyRecord(Path(config.spool_path))
    control = IngestControl(gate, router, sink, policy, record)
    recorded = record.load()
    control.adopt(recorded.version, recorded.model, recorded.adapter)
    for recorded_route in record.load_routes():
        control.adopt_route(recorded_route.version, recorded_route.model, recorded_route.adapter)
    fleet = FleetJoin(AddressSet(parse_address_list(config.peers)), control)
    external = ExternalModels(config.external_models)
    exact = ExactHistory(router, upstream, HistoryBook(config.exact_history_budget_tokens))
    backend = ChatBackend(router, upstream, sink, policy, external, exact, config.history_mode,
                          BudgetLedger(config.session_budget))  # fmt: skip
    aliases = ModelAliases(config.model_alias, backend.served, router.policy_model)
    chains = ResponseChains(config.store, config.max_message_bytes)
    endpoints = Endpoints(
        chat=OpenAIChatServing(backend, aliases),
        messages=AnthropicMessagesServing(backend, aliases, TemplateFacts(backend)),
        responses=ResponsesServing(backend, aliases, chains),
        backend=backend, sink=sink, feedback=FeedbackServing(feedback),
    )  # fmt: skip
    metrics = IngestMetrics(lambda: sink.queue_depth, lambda: spool.count, lambda: spool.bytes,
                            lambda: spool.refused_count, lambda: gate.in_flight, lambda: gate.held,
                            lambda: spool.feedback_count, lambda: spool.refused_feedback_count)  # fmt: skip
    # The HTTP API's keys are the token table's agent-role (and higher) tokens.
    app = IngestHttpApp(endpoints, gate, metrics, config.token_table(), config.max_body_mb << 20)
    http_server = _EmbeddedUvicorn(
        uvicorn.Config(
            app, host=config.host, port=config.http_port, loop="none", http="httptools", lifespan="off",
            access_log=False, log_config=None, timeout_keep_alive=30,
            # Ingest logs its own access line; X-Forwarded-For rewriting is not its job.
            proxy_headers=False,
        ),
        config.tls_cert_file, config.tls_key_file, config.http_reuse_port,
    )  # fmt: skip
    serving: list[asyncio.Task[None]] = []

    async def start() -> None:
        await router.start()
        await sink.start()
        await feedback.start()
        await fleet.join()
        serving.append(asyncio.create_task(http_server.serve(), name="ingest-http"))
        while not http_server.started:
            if serving[0].done():
                reason = serving[0].exception() if not serving[0].cancelled() else "cancelled"
                await stop()
                raise Unavailable(
                    f"cannot serve HTTP on {config.host}:{config.http_port}: {reason}"
                )
            await asyncio.sleep(0.01)
        scheme = "https" if config.tls_cert_file else "http"
        log.info("http_listening", address=f"{scheme}://{config.host}:{config.http_port}", upstreams=config.upstream_urls,
                 durability=config.durability)  # fmt: skip

    async def stop() -> None:
        http_server.should_exit = True
        await asyncio.gather(*serving, return_exceptions=True)
        # Before the call sink, which closes the spool that both write.
        await feedback.stop()
        await sink.stop()
        await fleet.close()
        record.close()
        await chains.close()
        await upstream.stop()
        await policy.canary.close()
        await router.stop()

    servicer = IngestServicer(control)
    return [
        ServiceBinding(
            FULL_NAME,
            lambda server: ingest_service_pb2_grpc.add_IngestServiceServicer_to_server(
                servicer, server
            ),
            on_start=start,
            on_stop=stop,
        )
    ]


DEFINITION = ServiceDefinition(
    name="ingest",
    description="Serve the OpenAI-compatible proxy that captures exact tokens, and its IngestService control plane.",
    config_cls=IngestConfig,
    build_bindings=build_bindings,
)
