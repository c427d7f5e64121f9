"""A real store and a real assembler process on free ports, and helpers to drive them."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.api.assembler.v1 import assembler_service_pb2_grpc as pb_grpc
from parity.api.assembler.v1 import batch_pb2
from parity.api.common.v1 import llm_call_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from tests.integration.service_fixtures import HEALTH_TIMEOUT_S, RunningService, wait_for_health


@dataclass
class Stack:
    store: RunningService
    assembler: RunningService
    store_stub: store_grpc.TokenStoreServiceStub
    stub: pb_grpc.AssemblerServiceStub
    store_url: str
    # ServiceLauncher.start: the start_service fixture.
    start_service: Callable[..., RunningService]
    assembler_args: tuple[str, ...]
    channels: list[grpc.Channel]
    restarted: list[RunningService] = field(default_factory=list)

    def write(self, calls: list[llm_call_pb2.LlmCall]) -> None:
        copies = [llm_call_pb2.LlmCall.FromString(c.SerializeToString()) for c in calls]
        self.store_stub.WriteCalls(store_pb.WriteCallsRequest(calls=copies))

    def close(self, session_id: str, **fields) -> pb.CloseSessionResponse:
        return self.stub.CloseSession(pb.CloseSessionRequest(session_id=session_id, **fields))

    def restart_store(self, log_dir: Path) -> None:
        """Stop the store and start it again on the same port, as a supervisor would."""
        address = self.store.address
        self.store.terminate()
        log_path = log_dir / f"store-restarted-{time.monotonic_ns()}.log"
        with log_path.open("w") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "parity.cli", "store", "serve", "--port", address.rsplit(":", 1)[1],
                 "--url", self.store_url, "--log-format", "json", "--shutdown-grace-s", "0.5"],
                stdout=log_file, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        self.store = RunningService("store", address, process, log_path)
        self.restarted.append(self.store)
        wait_for_health(address, process, log_path, HEALTH_TIMEOUT_S)

    def restart_assembler(self, *extra: str) -> None:
        self.assembler.terminate()
        self.assembler = self.start_service("assembler", *self.assembler_args, *extra)
        channel = grpc.insecure_channel(self.assembler.address)
        self.channels.append(channel)
        self.stub = pb_grpc.AssemblerServiceStub(channel)


@pytest.fixture
def start_stack(start_service, tmp_path: Path) -> Iterator:
    channels: list[grpc.Channel] = []
    stacks: list[Stack] = []

    def start(*assembler_args: str, store_url: str | None = None) -> Stack:
        url = store_url or f"sqlite:///{tmp_path}/store.db"
        # A short grace: the watch and batch streams never finish on their own.
        store = start_service("store", "--url", url, "--shutdown-grace-s", "0.5")
        args = ("--store-address", store.address, "--group-idle-s", "0.3", "--store-retry-s", "5",
                "--shutdown-grace-s", "0.5", *assembler_args)  # fmt: skip
        assembler = start_service("assembler", *args)
        store_channel = grpc.insecure_channel(store.address)
        channel = grpc.insecure_channel(assembler.address)
        channels.extend([store_channel, channel])
        stack = Stack(store, assembler, store_grpc.TokenStoreServiceStub(store_channel),
                      pb_grpc.AssemblerServiceStub(channel), url, start_service, args, channels)  # fmt: skip
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        for service in stack.restarted:
            service.terminate()
    for channel in channels:
        channel.close()


class BatchConsumer:
    """A StreamBatches client: subscribe, read batches, acknowledge them."""

    def __init__(
        self,
        stub: pb_grpc.AssemblerServiceStub,
        consumer_id: str,
        groups_per_batch: int,
        **subscribe,
    ) -> None:
        self._requests: queue.Queue = queue.Queue()
        subscription = pb.BatchSubscription(
            consumer_id=consumer_id, groups_per_batch=groups_per_batch, **subscribe
        )
        self._requests.put(pb.StreamBatchesRequest(subscribe=subscription))
        self._responses = stub.StreamBatches(iter(self._requests.get, None))
        self._batches: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for response in self._responses:
                self._batches.put(response.batch)
        except grpc.RpcError as error:
            self._batches.put(error)

    def next(self, timeout: float = 20.0) -> batch_pb2.Batch:
        item = self._batches.get(timeout=timeout)
        if isinstance(item, grpc.RpcError):
            raise item
        return item

    def nothing_within(self, seconds: float) -> bool:
        try:
            item = self._batches.get(timeout=seconds)
        except queue.Empty:
            return True
        self._batches.put(item)
        return False

    def ack(self, batch_id: str, policy_version: int | None = None) -> None:
        ack = pb.BatchAck(batch_id=batch_id)
        if policy_version is not None:
            ack.policy_version = policy_version
        self._requests.put(pb.StreamBatchesRequest(ack=ack))

    def stop(self) -> None:
        self._responses.cancel()
        self._requests.put(None)
