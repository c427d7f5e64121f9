"""Prometheus metrics for GET /metrics."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
)


class IngestMetrics:
    def __init__(self, queue_depth: Callable[[], int], spool_calls: Callable[[], int], spool_bytes: Callable[[], int],
                 refused_calls: Callable[[], int], in_flight: Callable[[], int], held: Callable[[], int],
                 spool_feedback: Callable[[], int], refused_feedback: Callable[[], int]) -> None:  # fmt: skip
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "parity_ingest_requests",
            "HTTP requests answered",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "parity_ingest_request_seconds", "Time from request to the end of the response", ["endpoint"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        for name, help_text, read in (
            (
                "parity_ingest_capture_queue_depth",
                "Captured calls waiting to be written",
                queue_depth,
            ),
            ("parity_ingest_spool_calls", "Captured calls held in the local spool", spool_calls),
            (
                "parity_ingest_spool_bytes",
                "Bytes of captured calls in the local spool",
                spool_bytes,
            ),
            (
                "parity_ingest_refused_calls",
                "Captured calls the store refused, kept in the spool's refused table",
                refused_calls,
            ),
            (
                "parity_ingest_spool_feedback",
                "Feedback held in the local spool until the store takes it",
                spool_feedback,
            ),
            (
                "parity_ingest_refused_feedback",
                "Spooled feedback the store refused, kept in the spool's refused table",
                refused_feedback,
            ),
            ("parity_ingest_in_flight", "Requests being served", in_flight),
            ("parity_ingest_held", "Requests waiting for paused traffic to resume", held),
        ):
            Gauge(name, help_text, registry=self.registry).set_function(read)
        # Every request is observed: its labelled series are looked up once, not per request.
        self._series: dict[tuple[str, int], tuple[Counter, Histogram]] = {}

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        series = self._series.get((endpoint, status))
        if series is None:
            series = self._series[endpoint, status] = (
                self.requests.labels(endpoint, str(status)), self.latency.labels(endpoint),
            )  # fmt: skip
        series[0].inc()
        series[1].observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
