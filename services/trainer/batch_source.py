"""The trainer's end of StreamBatches: subscribe, receive batches, acknowledge them, reconnect.

Runs in the training thread over the assembler's client (`AssemblerClient.stream_batches`);
a reader thread moves responses into a queue so waiting for a batch can be interrupted by
a stop. While the assembler is down (UNAVAILABLE at connect or mid-stream) it logs and
retries with backoff, forever: unacknowledged batches are redelivered on reconnect, so
nothing is lost or trained twice. Any other error ends the run with its message.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import structlog

from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.api.assembler.v1 import batch_pb2
from parity.clients.base import StreamCall
from parity.clients.errors import RPCError
from parity.clients.generated.assembler import AssemblerClient
from parity.services.runtime.errors import FailedPrecondition

log = structlog.get_logger(__name__)

_END = object()
# How long closing waits for the acks still queued to be sent.
ACK_DRAIN_S = 2.0


class BatchFeedError(FailedPrecondition):
    """The assembler ended the batch feed for a reason retrying cannot fix."""


@dataclass
class FeedSubscription:
    consumer_id: str
    groups_per_batch: int
    max_unacked_batches: int = 1
    max_policy_lag: int | None = None
    """Set in async mode: the assembler drops samples more than this many versions behind."""
    run_id: str = ""
    """The run being trained: groups closed for other runs are not batched for it."""


class BatchSource:
    def __init__(
        self,
        address: str,
        subscription: FeedSubscription,
        policy_version: Callable[[], int],
        max_message_bytes: int = 64 << 20,
        retry_backoff_s: tuple[float, float] = (0.5, 10.0),
    ) -> None:
        self.address = address
        self.subscription = subscription
        self._policy_version = policy_version
        self._client = AssemblerClient(address, max_message_bytes=max_message_bytes)
        self._backoff = retry_backoff_s
        self._requests: queue.Queue[object] | None = None
        self._responses: queue.Queue[object] = queue.Queue()
        self._call: StreamCall[pb.StreamBatchesResponse] | None = None
        self._drained = threading.Event()

    def _connect(self) -> None:
        self._close_stream()
        requests: queue.Queue[object] = queue.Queue()
        subscribe = pb.BatchSubscription(
            consumer_id=self.subscription.consumer_id, groups_per_batch=self.subscription.groups_per_batch,
            max_unacked_batches=self.subscription.max_unacked_batches, policy_version=self._policy_version(),
            run_id=self.subscription.run_id,
        )  # fmt: skip
        if self.subscription.max_policy_lag is not None:
            subscribe.max_policy_lag = self.subscription.max_policy_lag
        requests.put(pb.StreamBatchesRequest(subscribe=subscribe))
        self._requests = requests
        responses: queue.Queue[object] = queue.Queue()
        self._responses = responses
        self._drained = drained = threading.Event()
        call = self._client.stream_batches(_drain(requests, drained))
        self._call = call
        threading.Thread(
            target=_read, args=(call, responses), name="batch-feed", daemon=True
        ).start()

    def next_batch(self, stop: threading.Event) -> batch_pb2.Batch | None:
        """The next batch, or None once `stop` is set. Reconnects while the assembler is unavailable."""
        delay = self._backoff[0]
        while not stop.is_set():
            if self._call is None:
                self._connect()
            try:
                item = self._responses.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(item, pb.StreamBatchesResponse):
                return item.batch
            error = item if isinstance(item, RPCError) else None
            if error is not None and error.code not in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.CANCELLED,
            ):
                raise BatchFeedError(
                    f"assembler at {self.address} ended the batch feed: {error.code.name}: {error.message}"
                )
            log.warning(
                "assembler_unavailable", address=self.address, retry_in_s=round(delay, 1),
                detail=error.message if error is not None else "stream ended",
                hint="waiting for the assembler; unacknowledged batches are redelivered when it is back",
            )  # fmt: skip
            self._call = None
            if stop.wait(delay):
                break
            delay = min(delay * 2, self._backoff[1])
        return None

    def ack(self, batch_id: str, policy_version: int) -> None:
        if self._requests is not None:
            self._requests.put(
                pb.StreamBatchesRequest(
                    ack=pb.BatchAck(batch_id=batch_id, policy_version=policy_version)
                )
            )

    def close(self) -> None:
        self._close_stream()

    def _close_stream(self) -> None:
        if self._requests is not None:
            self._requests.put(_END)
            # The last ack (a run's final step) is handed to the stream before it is cancelled; unsent, the assembler
            # would keep the batch unacknowledged.
            if self._call is not None:
                self._drained.wait(ACK_DRAIN_S)
        if self._call is not None:
            self._call.cancel()
        self._requests, self._call = None, None


def _drain(
    requests: queue.Queue[object], drained: threading.Event
) -> Iterator[pb.StreamBatchesRequest]:
    while (item := requests.get()) is not _END:
        yield item  # type: ignore[misc]
    drained.set()


def _read(call: StreamCall[pb.StreamBatchesResponse], responses: queue.Queue[object]) -> None:
    try:
        for response in call:
            responses.put(response)
        responses.put(_END)
    except RPCError as error:
        responses.put(error)
