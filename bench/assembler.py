"""Benchmark: samples per second the assembler builds from the store and streams to a trainer.

    .venv/bin/python bench/assembler.py [--quick]

Both services run as deployed (`parity store serve`, `parity assembler serve`, separate
processes). The store is filled first with closed, rewarded sessions in groups of four
(single-turn: 300-token prompt, 200-token completion; 20-turn: each prompt extends the
previous call by its completion and a 30-token user turn). Then a fresh assembler
starts and a trainer subscribes and acknowledges every batch at once; the clock runs
from the subscription to the last sample received, so it covers replaying the closes,
reading the calls, prefix merging, building samples and streaming them.

The last line printed is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
from scratch import scratch_dir

from parity.api.assembler.v1 import assembler_service_pb2 as apb
from parity.api.assembler.v1 import assembler_service_pb2_grpc as apb_grpc
from parity.api.common.v1 import llm_call_pb2, reward_pb2
from parity.api.store.v1 import store_service_pb2 as spb
from parity.api.store.v1 import store_service_pb2_grpc as spb_grpc
from parity.core import tokens

VOCAB = 50_000
GROUP_SIZE = 4
GROUPS_PER_BATCH = 64
TARGETS = {"single-turn": ("samples/s", 5000), "20-turn": ("trajectories/s", 500)}
_MB = 1 << 20


@dataclass
class Result:
    workload: str
    trajectories: int
    calls: int
    samples: int
    tokens: int
    merged_calls: int
    seconds: float

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds

    @property
    def trajectories_per_s(self) -> float:
        return self.trajectories / self.seconds


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Service:
    def __init__(self, name: str, *args: str) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "parity.cli", name, "serve", "--port", self.address.rsplit(":", 1)[1],
             "--log-level", "warning", "--shutdown-grace-s", "1", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        with grpc.insecure_channel(self.address) as channel:
            while True:
                try:
                    grpc.channel_ready_future(channel).result(timeout=1)
                    return
                except grpc.FutureTimeoutError:
                    if time.monotonic() > deadline or self.process.poll() is not None:
                        raise SystemExit(f"{name} did not start") from None

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)


def sessions(workload: str, count: int, seed: int = 0) -> list[list[llm_call_pb2.LlmCall]]:
    """Each session's calls, in the order an agent makes them."""
    rng = np.random.default_rng(seed)
    turns = 1 if workload == "single-turn" else 20
    made = []
    for s in range(count):
        prompt = rng.integers(0, VOCAB, 300)
        calls = []
        for turn in range(turns):
            completion = rng.integers(0, VOCAB, 200)
            call = llm_call_pb2.LlmCall(
                call_id=f"{workload}-s{s}-t{turn}", session_id=f"{workload}-s{s}", model="policy", policy_version=1,
                request_json=b'{"model": "policy", "messages": []}', prompt_token_ids=tokens.pack_token_ids(prompt),
            )  # fmt: skip
            call.choices.add(index=0, token_ids=tokens.pack_token_ids(completion), finish_reason="stop",
                             logprobs=tokens.pack_floats(-rng.exponential(0.5, 200)))  # fmt: skip
            calls.append(call)
            prompt = np.concatenate([prompt, completion, rng.integers(0, VOCAB, 30)])
        made.append(calls)
    return made


async def fill(store_address: str, workload: str, made: list[list[llm_call_pb2.LlmCall]]) -> None:
    """Write the calls, close every session in groups of GROUP_SIZE, reward them."""
    options = [
        ("grpc.max_send_message_length", 256 * _MB),
        ("grpc.max_receive_message_length", 256 * _MB),
    ]
    async with grpc.aio.insecure_channel(store_address, options=options) as channel:
        stub = spb_grpc.TokenStoreServiceStub(channel)
        # Turn by turn across sessions, as ingest batches calls from many live sessions.
        flat = [calls[turn] for turn in range(len(made[0])) for calls in made]
        for start in range(0, len(flat), 1000):
            await stub.WriteCalls(spb.WriteCallsRequest(calls=flat[start : start + 1000]))
        closes = [
            spb.CloseSessionRequest(session_id=calls[0].session_id, metadata={
                "parity.group_id": f"{workload}-g{i // GROUP_SIZE}", "parity.group_size": str(GROUP_SIZE),
                "parity.episode_id": calls[0].session_id})
            for i, calls in enumerate(made)
        ]  # fmt: skip
        for start in range(0, len(closes), 256):
            await asyncio.gather(*(stub.CloseSession(c) for c in closes[start : start + 256]))
        rewards = [
            reward_pb2.Reward(reward_id=f"r-{calls[0].session_id}", session_id=calls[0].session_id,
                              level=reward_pb2.REWARD_LEVEL_TRAJECTORY, value=float(i % 2), source="engine")
            for i, calls in enumerate(made)
        ]  # fmt: skip
        for start in range(0, len(rewards), 1000):
            await stub.WriteRewards(spb.WriteRewardsRequest(rewards=rewards[start : start + 1000]))


async def train(assembler_address: str, expected_samples: int) -> tuple[float, int, int, int]:
    """Subscribe, acknowledge every batch; returns (seconds, samples, tokens, merged calls)."""
    options = [("grpc.max_receive_message_length", 256 * _MB)]
    async with grpc.aio.insecure_channel(assembler_address, options=options) as channel:
        stub = apb_grpc.AssemblerServiceStub(channel)
        acks: asyncio.Queue[apb.StreamBatchesRequest] = asyncio.Queue()
        await acks.put(apb.StreamBatchesRequest(subscribe=apb.BatchSubscription(
            consumer_id="bench", groups_per_batch=GROUPS_PER_BATCH, max_unacked_batches=4)))  # fmt: skip

        async def requests():
            while True:
                yield await acks.get()

        started = time.perf_counter()
        samples = token_count = merged = 0
        stream = stub.StreamBatches(requests())
        async for response in stream:
            batch = response.batch
            await acks.put(apb.StreamBatchesRequest(ack=apb.BatchAck(batch_id=batch.batch_id)))
            samples += len(batch.samples)
            token_count += batch.stats.token_count
            merged += batch.stats.merged_call_count
            if samples >= expected_samples:
                break
        seconds = time.perf_counter() - started
        stream.cancel()
        return seconds, samples, token_count, merged


def run(workload: str, count: int, scratch: Path) -> Result:
    made = sessions(workload, count)
    store = Service("store", "--url", f"sqlite:///{scratch}/{workload}.db")
    try:
        asyncio.run(fill(store.address, workload, made))
        assembler = Service("assembler", "--store-address", store.address, "--group-idle-s", "3600")
        try:
            seconds, samples, token_count, merged = asyncio.run(train(assembler.address, count))
        finally:
            assembler.stop()
    finally:
        store.stop()
    return Result(workload, count, sum(map(len, made)), samples, token_count, merged, seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer sessions; finishes in under two minutes"
    )
    args = parser.parse_args(argv)
    with scratch_dir("assembler") as scratch:
        return measure(args, scratch)


def measure(args: argparse.Namespace, scratch: Path) -> int:
    # Whole batches: a multiple of GROUPS_PER_BATCH groups of GROUP_SIZE sessions.
    per_batch = GROUPS_PER_BATCH * GROUP_SIZE
    counts = {
        "single-turn": per_batch * (40 if args.quick else 160),
        "20-turn": per_batch * (4 if args.quick else 16),
    }
    results = [run(workload, count, scratch) for workload, count in counts.items()]
    print(
        f"trainer subscribes with {GROUPS_PER_BATCH} groups of {GROUP_SIZE} per batch and acknowledges at once"
    )
    header = (f"{'workload':<12}{'sessions':>9}{'calls':>9}{'samples':>9}{'seconds':>9}{'samples/s':>11}"
              f"{'traj/s':>9}{'tokens/s':>12}{'merged':>9}   target")  # fmt: skip
    print(header)
    print("-" * len(header))
    for r in results:
        unit, target = TARGETS[r.workload]
        measured = r.samples_per_s if unit == "samples/s" else r.trajectories_per_s
        verdict = f"{target:,} {unit}: {'met' if measured >= target else 'MISSED'}"
        print(f"{r.workload:<12}{r.trajectories:>9,}{r.calls:>9,}{r.samples:>9,}{r.seconds:>9.2f}"
              f"{r.samples_per_s:>11,.0f}{r.trajectories_per_s:>9,.0f}{r.tokens / r.seconds:>12,.0f}"
              f"{r.merged_calls:>9,}   {verdict}")  # fmt: skip
    single, multi = results
    print(json.dumps({
        "single_turn_samples_per_s": round(single.samples_per_s),
        "multi_turn_trajectories_per_s": round(multi.trajectories_per_s),
        "multi_turn_samples_per_s": round(multi.samples_per_s),
        "multi_turn_tokens_per_s": round(multi.tokens / multi.seconds),
        "single_turn_sessions": single.trajectories,
        "multi_turn_sessions": multi.trajectories,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
