"""Benchmark: the token store's write throughput, latency and bytes per token.

    .venv/bin/python bench/store.py [--quick] [--url URL]

`--url` is the store URL to write to (`sqlite:///PATH`, `postgresql://USER@HOST:PORT/DB`);
without it, each workload writes to a fresh SQLite file.

Parity runs as deployed (`parity store serve`, a separate process) and is written to
through its gRPC API with requests serialized ahead of time, so the client is not
what is measured. Each writer sends its batches over one StreamWriteCalls stream,
waiting for each answer before the next batch, as ingest does; the single-turn
workload at 16 writers is also run over unary WriteCalls. That workload, the
headline, runs three times and reports the median run: the development machine's
speed drifts by a fifth from one minute to the next.

The baseline, in the same run, is the layout peer projects use: one JSON row per call
holding the full prompt and completion (rLLM's traces table is one example), written
straight into SQLite with the same durability (WAL, synchronous=FULL) and no network
hop at all.

The last line printed is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import grpc
import numpy as np
from scratch import scratch_dir

from parity.api.common.v1 import llm_call_pb2
from parity.api.store.v1 import store_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2_grpc as pb_grpc
from parity.core import tokens

WRITE_CALLS = "/parity.api.store.v1.TokenStoreService/WriteCalls"
STREAM_WRITE_CALLS = "/parity.api.store.v1.TokenStoreService/StreamWriteCalls"
HEADLINE_RUNS = 3
CALLS_PER_REQUEST = 100
VOCAB = 50_000


@dataclass
class Workload:
    name: str
    # Requests in the order a writer sends them; each holds CALLS_PER_REQUEST calls.
    requests: list[list[llm_call_pb2.LlmCall]]


def llm_call(
    call_id: str, session: str, prompt: np.ndarray, completion: np.ndarray, messages: list
) -> llm_call_pb2.LlmCall:
    call = llm_call_pb2.LlmCall(
        call_id=call_id, session_id=session, model="policy", policy_version=1, replica="vllm-0",
        request_json=json.dumps({"model": "policy", "messages": messages, "temperature": 1.0, "max_tokens": 256}).encode(),
        prompt_token_ids=tokens.pack_token_ids(prompt),
    )  # fmt: skip
    call.choices.add(
        index=0, token_ids=tokens.pack_token_ids(completion), finish_reason="stop",
        logprobs=tokens.pack_floats(-np.random.default_rng(len(completion)).exponential(0.5, len(completion))),
        text="w " * len(completion),
    )  # fmt: skip
    return call


def _words(rng: random.Random, n_tokens: int) -> str:
    # About four characters per token, as English text runs.
    return " ".join(
        rng.choice(("the", "cat", "sum", "of", "two", "and", "is")) for _ in range(n_tokens)
    )


def single_turn(writer: int, calls: int, run: str = "") -> Workload:
    """`run` prefixes every id, so that each table row run against one database (--url) writes new calls."""
    rng, np_rng = random.Random(writer), np.random.default_rng(writer)
    made = [
        llm_call(f"{run}w{writer}-c{i}", f"{run}w{writer}-s{i}", np_rng.integers(0, VOCAB, 300), np_rng.integers(0, VOCAB, 200),
              [{"role": "user", "content": _words(rng, 300)}])
        for i in range(calls)
    ]  # fmt: skip
    return Workload(
        "single-turn", [made[i : i + CALLS_PER_REQUEST] for i in range(0, calls, CALLS_PER_REQUEST)]
    )


def multi_turn(writer: int, calls: int, run: str = "", turns: int = 20) -> Workload:
    """Sessions advance one turn per request, as ingest batches calls from many live sessions."""
    rng, np_rng = random.Random(writer), np.random.default_rng(writer)
    sessions = max(1, calls // turns)
    prompts = [np_rng.integers(0, VOCAB, 300) for _ in range(sessions)]
    messages = [[{"role": "user", "content": _words(rng, 300)}] for _ in range(sessions)]
    by_turn: list[list[llm_call_pb2.LlmCall]] = []
    for turn in range(turns):
        row = []
        for s in range(sessions):
            completion = np_rng.integers(0, VOCAB, 200)
            row.append(
                llm_call(
                    f"{run}w{writer}-s{s}-t{turn}",
                    f"{run}w{writer}-s{s}",
                    prompts[s],
                    completion,
                    list(messages[s]),
                )
            )
            user = np_rng.integers(0, VOCAB, 30)
            prompts[s] = np.concatenate([prompts[s], completion, user])
            messages[s] = messages[s] + [
                {"role": "assistant", "content": _words(rng, 200)},
                {"role": "user", "content": _words(rng, 30)},
            ]
        by_turn.append(row)
    flat = [call for row in by_turn for call in row]
    return Workload(
        "20-turn", [flat[i : i + CALLS_PER_REQUEST] for i in range(0, len(flat), CALLS_PER_REQUEST)]
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StoreProcess:
    def __init__(self, url: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "parity.cli", "store", "serve", "--port", str(self.port), "--url", url,
             "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.address = f"127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        with grpc.insecure_channel(self.address) as channel:
            while True:
                try:
                    grpc.channel_ready_future(channel).result(timeout=1)
                    return
                except grpc.FutureTimeoutError:
                    if time.monotonic() > deadline or self.process.poll() is not None:
                        raise SystemExit("store did not start") from None

    def stats(self) -> pb.GetStoreStatsResponse:
        with grpc.insecure_channel(self.address) as channel:
            return pb_grpc.TokenStoreServiceStub(channel).GetStoreStats(pb.GetStoreStatsRequest())

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)


async def drive_grpc(
    address: str, per_writer: list[list[bytes]], rpc: str = "unary"
) -> tuple[float, list[float]]:
    """Send every writer's pre-serialized requests concurrently, over unary WriteCalls or
    one StreamWriteCalls stream per writer; returns (seconds, latencies)."""
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(
        address,
        options=[
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20),
        ],
    ) as channel:
        # Bytes in, bytes out: no client-side (de)serialization.
        write: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(WRITE_CALLS)
        open_stream: grpc.aio.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
            STREAM_WRITE_CALLS
        )

        async def writer(requests: list[bytes]) -> None:
            stream = open_stream() if rpc == "stream" else None
            for request in requests:
                started = time.perf_counter()
                if stream is None:
                    await write(request)
                else:
                    await stream.write(request)
                    await stream.read()
                latencies.append(time.perf_counter() - started)
            if stream is not None:
                await stream.done_writing()
                await stream.read()

        started = time.perf_counter()
        await asyncio.gather(*(writer(requests) for requests in per_writer))
        return time.perf_counter() - started, latencies


def baseline_json_rows(path: Path, workloads: list[Workload]) -> tuple[float, int]:
    """One JSON row per call with the full prompt; returns (seconds, total calls)."""
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE traces (id TEXT PRIMARY KEY, session_id TEXT, data TEXT)")
    rows = []
    for workload in workloads:
        for request in workload.requests:
            batch = []
            for call in request:
                choice = call.choices[0]
                batch.append((call.call_id, call.session_id, json.dumps({
                    "request": json.loads(call.request_json),
                    "prompt_token_ids": tokens.unpack_token_ids(call.prompt_token_ids).tolist(),
                    "completion_token_ids": tokens.unpack_token_ids(choice.token_ids).tolist(),
                    "logprobs": tokens.unpack_floats(choice.logprobs).tolist(),
                    "response": {"content": choice.text, "finish_reason": choice.finish_reason},
                    "model": call.model,
                })))  # fmt: skip
            rows.append(batch)
    started = time.perf_counter()
    for batch in rows:
        with db:
            db.executemany("INSERT INTO traces VALUES (?, ?, ?)", batch)
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed, sum(len(b) for b in rows)


def logical_tokens(workloads: list[Workload]) -> int:
    return sum(
        (len(c.prompt_token_ids) + sum(len(ch.token_ids) for ch in c.choices)) // 4
        for w in workloads for r in w.requests for c in r
    )  # fmt: skip


def db_bytes(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


def run_workload(
    make: Callable[[int, int, str], Workload],
    writers: int,
    calls_per_writer: int,
    url: str | None,
    scratch: Path,
    rpc: str = "stream",
    runs: int = 1,
) -> dict[str, Any]:
    """Write the workload to a fresh store `runs` times (only without --url) and report the median run."""
    space = scratch / f"{make.__name__}-{writers}-{rpc}"
    space.mkdir()
    db_path = space / "parity.db"
    # A store given by --url keeps what earlier rows wrote (and runs only once per row):
    # each row's ids take a prefix of their own, or they would count as duplicates.
    tag = f"{make.__name__[0]}{writers}{rpc[0]}-" if url else ""
    workloads = [make(w, calls_per_writer, tag) for w in range(writers)]
    per_writer = [
        [pb.WriteCallsRequest(calls=r).SerializeToString() for r in w.requests] for w in workloads
    ]
    measured = []
    for _ in range(runs):
        # Each run's database is deleted before the next, so a run needs disk for one at a time.
        for path in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
            path.unlink(missing_ok=True)
        store = StoreProcess(url or f"sqlite:///{db_path}")
        try:
            seconds, latencies = asyncio.run(drive_grpc(store.address, per_writer, rpc))
            stats = store.stats()
        finally:
            store.stop()
        measured.append((seconds, latencies))
    seconds, latencies = sorted(measured, key=lambda run: run[0])[len(measured) // 2]
    # Measured after a clean stop, as for the baseline: SQLite has folded its WAL
    # into the database file, so both sides count settled bytes.
    parity_bytes = db_bytes(db_path) if url is None else stats.bytes_on_disk
    total = sum(len(r) for w in workloads for r in w.requests)
    base_path = space / "baseline.db"
    base_seconds, _ = baseline_json_rows(base_path, workloads)
    result = {
        "workload": workloads[0].name, "writers": writers, "rpc": rpc, "calls": total,
        "calls_per_s": total / seconds, "runs_calls_per_s": sorted(total / run[0] for run in measured),
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": float(np.percentile(latencies, 99)) * 1e3,
        "bytes_per_token": parity_bytes / stats.logical_token_count,
        "baseline_calls_per_s": total / base_seconds,
        "baseline_bytes_per_token": db_bytes(base_path) / logical_tokens(workloads),
        "backend": stats.backend,
    }  # fmt: skip
    shutil.rmtree(space)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer calls; finishes in under two minutes"
    )
    parser.add_argument(
        "--url", default=None, help="store URL (default: a fresh SQLite file per run)"
    )
    args = parser.parse_args(argv)
    calls_per_writer = {1: 4000 if args.quick else 20_000, 16: 500 if args.quick else 2500}
    # A store given by --url keeps what earlier runs wrote: it cannot be started afresh.
    headline_runs = HEADLINE_RUNS if args.url is None else 1
    with scratch_dir("store") as scratch:
        results = [
            run_workload(single_turn, 1, calls_per_writer[1], args.url, scratch),
            headline := run_workload(
                single_turn, 16, calls_per_writer[16], args.url, scratch, runs=headline_runs
            ),
            unary := run_workload(
                single_turn, 16, calls_per_writer[16], args.url, scratch, rpc="unary"
            ),
            run_workload(multi_turn, 1, calls_per_writer[1], args.url, scratch),
            multi := run_workload(multi_turn, 16, calls_per_writer[16], args.url, scratch),
        ]
    header = (f"{'workload':<12}{'writers':>8}{'rpc':>7}{'calls':>8}{'parity calls/s':>16}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'parity B/tok':>14}{'JSON calls/s':>14}{'JSON B/tok':>12}{'B/tok ratio':>13}")  # fmt: skip
    print(
        f"calls of {CALLS_PER_REQUEST} per request; Parity over gRPC, baseline straight into SQLite"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r['workload']:<12}{r['writers']:>8}{r['rpc']:>7}{r['calls']:>8}{r['calls_per_s']:>16,.0f}"
              f"{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}{r['bytes_per_token']:>14.2f}{r['baseline_calls_per_s']:>14,.0f}"
              f"{r['baseline_bytes_per_token']:>12.2f}{r['baseline_bytes_per_token'] / r['bytes_per_token']:>12.1f}x")  # fmt: skip
    runs = ", ".join(f"{value:,.0f}" for value in headline["runs_calls_per_s"])
    print(
        f"single-turn at 16 writers over StreamWriteCalls, each run (median above): {runs} calls/s"
    )
    print(json.dumps({
        "calls_per_s": round(headline["calls_per_s"]),
        "calls_per_s_runs": [round(value) for value in headline["runs_calls_per_s"]],
        "unary_calls_per_s": round(unary["calls_per_s"]),
        "multi_turn_calls_per_s": round(multi["calls_per_s"]),
        "bytes_per_token": round(multi["bytes_per_token"], 3),
        "baseline_bytes_per_token": round(multi["baseline_bytes_per_token"], 3),
        "bytes_per_token_ratio": round(multi["baseline_bytes_per_token"] / multi["bytes_per_token"], 2),
        "p50_ms": round(headline["p50_ms"], 2),
        "p99_ms": round(headline["p99_ms"], 2),
        "backend": headline["backend"],
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
