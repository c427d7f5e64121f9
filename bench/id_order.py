"""Benchmark: writes into a large store, with Parity's time-ordered ids against random ones.

    .venv/bin/python bench/id_order.py [--quick] [--stored N]

Every call id and session id is a key of a unique index in the store. Parity makes
them UUIDv7 (`parity.core.ids.new_id`); the baseline is what it made before and what
most tools make, uuid4. Each side gets a fresh SQLite store (`parity store serve`,
written through its gRPC API) and fills it with N small single-call sessions, in
requests of 1,000 calls (the most one may hold). Then it writes full-size calls
(300 prompt and 200 completion tokens, each in a session of its own) in requests
of 256, as ingest batches them. Both phases are timed. Requests are serialized
ahead of time, so the client is not what is measured.

The last line printed is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import numpy as np
from scratch import scratch_dir
from store import VOCAB, StoreProcess, drive_grpc, llm_call

from parity.api.common.v1 import llm_call_pb2
from parity.api.store.v1 import store_service_pb2 as pb
from parity.core.ids import new_id

FILL_REQUEST_CALLS = 1000
FILL_WRITERS = 8
MEASURE_REQUEST_CALLS = 256  # ingest's --capture-batch-size default
MEASURE_REQUESTS = 40


def random_id() -> str:
    return os.urandom(16).hex()


def small_call(make_id: Callable[[], str]) -> llm_call_pb2.LlmCall:
    call = llm_call_pb2.LlmCall(
        call_id=make_id(), session_id=make_id(), model="policy", prompt_token_ids=b"\0" * 40
    )
    call.choices.add(index=0, token_ids=b"\0" * 40, logprobs=b"\0" * 40, finish_reason="stop")
    return call


def full_call(make_id: Callable[[], str], rng: np.random.Generator) -> llm_call_pb2.LlmCall:
    prompt, completion = rng.integers(0, VOCAB, 300), rng.integers(0, VOCAB, 200)
    return llm_call(
        make_id(), make_id(), prompt, completion, [{"role": "user", "content": "word " * 300}]
    )


def requests(
    make_call: Callable[[], llm_call_pb2.LlmCall], calls: int, per_request: int
) -> list[bytes]:
    """Serialized requests, made one at a time: a million call messages at once would take GBs."""
    return [pb.WriteCallsRequest(calls=[make_call() for _ in range(min(per_request, calls - start))]).SerializeToString()
            for start in range(0, calls, per_request)]  # fmt: skip


class Measured(TypedDict):
    ids: str
    fill_calls_per_s: float
    calls_per_s: float
    p50_ms: float
    p99_ms: float


def run(name: str, make_id: Callable[[], str], stored: int, scratch: Path) -> Measured:
    fill = requests(lambda: small_call(make_id), stored, FILL_REQUEST_CALLS)
    rng = np.random.default_rng(0)
    measure = requests(
        lambda: full_call(make_id, rng),
        MEASURE_REQUESTS * MEASURE_REQUEST_CALLS,
        MEASURE_REQUEST_CALLS,
    )
    store = StoreProcess(f"sqlite:///{scratch / name}.db")
    try:
        fill_s, _ = asyncio.run(
            drive_grpc(store.address, [fill[w::FILL_WRITERS] for w in range(FILL_WRITERS)])
        )
        measure_s, latencies = asyncio.run(drive_grpc(store.address, [measure]))
    finally:
        store.stop()
    return {
        "ids": name,
        "fill_calls_per_s": stored / fill_s,
        "calls_per_s": MEASURE_REQUESTS * MEASURE_REQUEST_CALLS / measure_s,
        "p50_ms": float(np.percentile(latencies, 50)) * 1e3,
        "p99_ms": float(np.percentile(latencies, 99)) * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a smaller store; finishes in about a minute"
    )
    parser.add_argument(
        "--stored", type=int, default=None, help="calls in the store before the measured writes"
    )
    args = parser.parse_args(argv)
    stored = args.stored or (200_000 if args.quick else 1_000_000)
    with scratch_dir("id-order") as scratch:
        baseline = run("uuid4", random_id, stored, scratch)
        parity = run("uuid7", new_id, stored, scratch)
    header = f"{'ids':<8}{'fill calls/s':>14}{'calls/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
    print(f"fill: {stored:,} one-call sessions in requests of {FILL_REQUEST_CALLS}, {FILL_WRITERS} writers; then "
          f"{MEASURE_REQUESTS} requests of {MEASURE_REQUEST_CALLS} full-size calls, one writer")  # fmt: skip
    print(header)
    print("-" * len(header))
    for r in (baseline, parity):
        print(
            f"{r['ids']:<8}{r['fill_calls_per_s']:>14,.0f}{r['calls_per_s']:>10,.0f}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}"
        )
    print(json.dumps({
        "stored_calls": stored,
        "calls_per_s": round(parity["calls_per_s"]),
        "baseline_calls_per_s": round(baseline["calls_per_s"]),
        "speedup": round(parity["calls_per_s"] / baseline["calls_per_s"], 2),
        "fill_speedup": round(parity["fill_calls_per_s"] / baseline["fill_calls_per_s"], 2),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
