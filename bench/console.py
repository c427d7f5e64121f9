"""Benchmark: the console at scale, in a real browser.

    .venv/bin/python bench/console.py [--quick] [--calls N]

Two questions, each against real processes (`parity store serve`, `parity assembler
serve`, `parity console serve`) on this machine:

1. How long a 20-turn agent trajectory of 10,000 tokens (tool calls and their results,
   one prefix split) takes to show in headless Chromium (Debian's, through Playwright):
   the server's answer, DOMContentLoaded, the load event, and the first frame after it,
   median of 5 loads. Calls off screen are laid out when scrolled to
   (`content-visibility: auto`), so the table also times laying out every call at once.
   Target: the first frame in under one second.
2. How long the latest sessions take to list from a store of N calls (1,000,000: 50,000
   sessions of 20 calls): ListSessions newest first over gRPC, with and without a run
   filter, and the console's sessions page, which adds each session's rewards. The
   baseline is what listing the latest sessions took before ListSessions could order
   newest first: paging oldest first to the end. Target: under 200 ms.

The last line printed is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import grpc
import httpx
import numpy as np
from agent_session import agent_session
from grpc_health.v1 import health_pb2, health_pb2_grpc
from scratch import scratch_dir
from store import StoreProcess, drive_grpc, free_port
from tokenizers import Tokenizer

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import llm_call_pb2, reward_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import AssemblerClient, StoreClient
from parity.core import tokens
from parity.services.inference.tiny_model import generate_tiny_model

CHROMIUM = "/usr/bin/chromium"
LOADS = 5
LIST_REPEATS = 30
SESSION_CALLS = 20
FILL_REQUEST_SESSIONS = 50
FILL_WRITERS = 4
PAGE = 50


class Service:
    """One `parity <name> serve` process on a free port, healthy before it is returned."""

    def __init__(self, scratch: Path, name: str, *args: str, http: bool = False) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        log = (scratch / f"{name}.log").open("w")
        self.process = subprocess.Popen([sys.executable, "-m", "parity.cli", name, "serve", "--port", str(self.port),
                                         "--log-level", "warning", *args], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 60
        while not self._healthy(http):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"{name} did not start; see {scratch / f'{name}.log'}")
            time.sleep(0.2)

    def _healthy(self, http: bool) -> bool:
        try:
            if http:
                return httpx.get(f"http://{self.address}/healthz", timeout=1).status_code == 200
            with grpc.insecure_channel(self.address) as channel:
                # types-grpcio-health-checking's HealthStub declares none of the service's methods.
                stub = health_pb2_grpc.HealthStub(channel)
                status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status  # type: ignore[attr-defined]
                return status == health_pb2.HealthCheckResponse.SERVING
        except (httpx.HTTPError, grpc.RpcError):
            return False

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def timed(call: Callable[[], object], repeats: int) -> list[float]:
    """Milliseconds per call, after one call that warms caches and connections."""
    call()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e3)
    return samples


def trajectory_in_browser(scratch: Path, model: Path) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    store = StoreProcess(f"sqlite:///{scratch / 'trajectory.db'}")
    assembler = Service(scratch, "assembler", "--store-address", store.address)
    console = Service(scratch, "console", "--store-address", store.address, "--assembler-address", assembler.address,
                      "--trainer-address", f"127.0.0.1:{free_port()}", "--tokenizer", str(model), http=True)  # fmt: skip
    try:
        calls = agent_session(
            Tokenizer.from_file(str(model / "tokenizer.json")), "bench-trajectory"
        )
        StoreClient(store.address).write_calls(store_pb.WriteCallsRequest(calls=calls))
        AssemblerClient(assembler.address).close_session(
            assembler_pb.CloseSessionRequest(session_id="bench-trajectory", reward=0.5))  # fmt: skip
        last = calls[-1]
        sequence = len(last.prompt_token_ids) // 4 + len(last.choices[0].token_ids) // 4
        url = f"http://{console.address}/sessions/bench-trajectory"
        loads: dict[str, list[float]] = {
            "server": [],
            "dom": [],
            "load": [],
            "frame": [],
            "all calls": [],
        }
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url, wait_until="load")
            spans = page.locator(".tk").count()
            for _ in range(LOADS):
                page.goto("about:blank")
                page.goto(url, wait_until="load")
                frame = page.evaluate(
                    "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
                )
                timing = page.evaluate(
                    "() => performance.getEntriesByType('navigation')[0].toJSON()"
                )
                everything = page.evaluate("""() => { const t = performance.now();
                    document.querySelectorAll('.call').forEach(c => c.style.contentVisibility = 'visible');
                    document.body.getBoundingClientRect(); return performance.now() - t; }""")  # fmt: skip
                loads["server"].append(timing["responseStart"])
                loads["dom"].append(timing["domContentLoadedEventEnd"])
                loads["load"].append(timing["loadEventEnd"])
                loads["frame"].append(frame)
                loads["all calls"].append(frame + everything)
            browser.close()
        size = len(httpx.get(url, timeout=30).content)
        return {"calls": len(calls), "sequence_tokens": sequence, "token_spans": spans, "html_bytes": size,
                **{k: statistics.median(v) for k, v in loads.items()}, "frame_max": max(loads["frame"])}  # fmt: skip
    finally:
        console.stop()
        assembler.stop()
        store.stop()


def session_requests(first: int, count: int, total: int, rng: np.random.Generator) -> list[bytes]:
    """WriteCalls requests for `count` 20-call sessions, numbered from `first`; the last tenth of `total` is run-b's."""
    requests = []
    for start in range(first, first + count, FILL_REQUEST_SESSIONS):
        calls = []
        for number in range(start, min(start + FILL_REQUEST_SESSIONS, first + count)):
            session = f"s{number:07d}"
            metadata = {
                "parity.run_id": "run-b" if number >= total * 0.9 else "run-a",
                "task": f"t{number % 97}",
            }
            prompt = rng.integers(0, 1000, 40)
            for turn in range(SESSION_CALLS):
                completion = rng.integers(0, 1000, 12)
                call = llm_call_pb2.LlmCall(call_id=f"{session}-{turn:02d}", session_id=session, model="policy",
                                            metadata=metadata, prompt_token_ids=tokens.pack_token_ids(prompt))  # fmt: skip
                call.choices.add(index=0, token_ids=tokens.pack_token_ids(completion),
                                 logprobs=tokens.pack_floats(np.full(12, -0.5)), finish_reason="stop")  # fmt: skip
                calls.append(call)
                prompt = np.concatenate([prompt, completion, rng.integers(0, 1000, 4)])
        requests.append(store_pb.WriteCallsRequest(calls=calls).SerializeToString())
    return requests


class Listing(TypedDict):
    calls: int
    sessions: int
    fill_s: float
    # Per measurement: the milliseconds of each repeat.
    rows: dict[str, list[float]]


def listing_at_scale(scratch: Path, calls: int) -> Listing:
    sessions = calls // SESSION_CALLS
    store = StoreProcess(f"sqlite:///{scratch / 'million.db'}?synchronous=NORMAL")
    rng = np.random.default_rng(0)
    try:
        started = time.perf_counter()
        chunk = FILL_REQUEST_SESSIONS * FILL_WRITERS * 10
        for first in range(0, sessions, chunk):
            batch = session_requests(first, min(chunk, sessions - first), sessions, rng)
            asyncio.run(
                drive_grpc(store.address, [batch[w::FILL_WRITERS] for w in range(FILL_WRITERS)])
            )
        fill_s = time.perf_counter() - started
        client = StoreClient(store.address, timeout_s=300)
        latest = [f"s{n:07d}" for n in range(sessions - 1000, sessions)]
        client.write_rewards(store_pb.WriteRewardsRequest(rewards=[reward_pb2.Reward(
            reward_id=f"r-{s}", session_id=s, level=reward_pb2.REWARD_LEVEL_TRAJECTORY, value=0.5) for s in latest]))  # fmt: skip
        stats = client.get_store_stats(store_pb.GetStoreStatsRequest())

        def newest(**filters: Any) -> Callable[[], object]:
            request = store_pb.ListSessionsRequest(
                page_size=PAGE, order=store_pb.SESSION_ORDER_NEWEST_FIRST, **filters
            )
            return lambda: client.list_sessions(request)

        def oldest_first_to_the_end() -> None:
            token = ""
            while True:
                token = client.list_sessions(
                    store_pb.ListSessionsRequest(page_size=1000, page_token=token)
                ).next_page_token
                if not token:
                    return

        rows = {
            "ListSessions newest first": timed(newest(), LIST_REPEATS),
            "ListSessions newest first, run filter (latest run)": timed(
                newest(metadata={"parity.run_id": "run-b"}), LIST_REPEATS
            ),
            "ListSessions newest first, run filter (older run)": timed(
                newest(metadata={"parity.run_id": "run-a"}), LIST_REPEATS
            ),
            "baseline: paging oldest first to the newest": timed(oldest_first_to_the_end, 3),
        }
        assembler = Service(scratch, "assembler", "--store-address", store.address)
        console = Service(scratch, "console", "--store-address", store.address, "--assembler-address", assembler.address,
                          "--trainer-address", f"127.0.0.1:{free_port()}", "--page-size", str(PAGE), http=True)  # fmt: skip
        try:
            page = f"http://{console.address}/sessions"
            rows["console sessions page (HTTP)"] = timed(
                lambda: httpx.get(page, timeout=60).raise_for_status(), LIST_REPEATS
            )
        finally:
            console.stop()
            assembler.stop()
    finally:
        store.stop()
    return {
        "calls": stats.call_count,
        "sessions": stats.session_count,
        "fill_s": fill_s,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a store of 100,000 calls instead of 1,000,000"
    )
    parser.add_argument(
        "--calls", type=int, default=None, help="calls in the store for the listing measurements"
    )
    args = parser.parse_args(argv)
    calls = args.calls or (100_000 if args.quick else 1_000_000)
    with scratch_dir("console") as scratch:
        model = generate_tiny_model(scratch / "model")
        page = trajectory_in_browser(scratch, model)
        listing = listing_at_scale(scratch, calls)
    print(f"trajectory: {page['calls']} calls, a {page['sequence_tokens']:,}-token sequence, {page['token_spans']:,} token "
          f"spans, {page['html_bytes'] / 1e6:.2f} MB of HTML; median of {LOADS} loads in Chromium")  # fmt: skip
    header = f"{'measurement':<56}{'p50 ms':>10}{'p99 ms':>10}{'target':>10}"
    print(header)
    print("-" * len(header))
    for label, key in (("server answered (responseStart)", "server"), ("DOMContentLoaded", "dom"),
                       ("load event", "load"), ("first frame after load", "frame"), ("every call laid out", "all calls")):  # fmt: skip
        target = "1000" if key == "frame" else ""
        print(f"{label:<56}{page[key]:>10.0f}{'':>10}{target:>10}")
    print(f"\nlisting: {listing['calls']:,} calls in {listing['sessions']:,} sessions (filled in {listing['fill_s']:.0f} s); "
          f"pages of {PAGE}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for label, samples in listing["rows"].items():
        target = "" if label.startswith("baseline") else "200"
        print(
            f"{label:<56}{np.percentile(samples, 50):>10.1f}{np.percentile(samples, 99):>10.1f}{target:>10}"
        )
    headline = listing["rows"]
    print(json.dumps({
        "trajectory_tokens": page["sequence_tokens"], "trajectory_first_frame_ms": round(page["frame"]),
        "trajectory_every_call_laid_out_ms": round(page["all calls"]), "stored_calls": listing["calls"],
        "list_sessions_p50_ms": round(float(np.percentile(headline["ListSessions newest first"], 50)), 1),
        "console_sessions_page_p50_ms": round(float(np.percentile(headline["console sessions page (HTTP)"], 50)), 1),
        "baseline_ms": round(float(np.percentile(headline["baseline: paging oldest first to the newest"], 50))),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
