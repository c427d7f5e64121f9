"""The SDK installed next to each agent framework, as a user would: a fresh environment per framework with only
`pip install parity FRAMEWORK` (current releases, nothing pinned by Parity), then a small agent of that framework
run through ingest against real vLLM, and every call it made checked token-exact in its session.

Environments are cached between runs (tests/integration/sdk/isolated_envs.py) and built four at a time while
vLLM starts. The releases each run used are written to the test's output (`-rA`) and docs/sdk.md lists the last
ones that passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from transformers import AutoTokenizer

from parity.api.common.v1 import llm_call_pb2
from parity.services.assembler.samples import LengthLimit, build_samples
from parity.services.assembler.trajectories import split_trajectories
from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.inference.vllm_launcher import VllmServer
from tests.integration.claude_code import LONG_CONTEXT, TOOL_CALL_START, decodes_to
from tests.integration.sdk.isolated_envs import IsolatedEnv, build_wheel, cached_env
from tests.integration.stack_fixtures import IngestStack, start_ingest
from tests.integration.vllm_fixtures import serving_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]

AGENTS = Path(__file__).parent / "frameworks"
SERVED = "tiny"
PARALLEL_INSTALLS = 4


@dataclass(frozen=True)
class Framework:
    requirements: list[str]
    script: str
    main_package: str
    # The framework hands back the model's last reply as its answer (others parse it into fields or code).
    answer_is_reply: bool = False
    # How the framework may stop on the small model's replies, which are random text that seldom ends before
    # max_tokens: the error it raises for a reply cut at max_tokens, or one that does not parse. Its calls
    # are still checked; any other error fails the test.
    model_stops: tuple[str, ...] = ()
    # The framework asks again when a reply is empty and never surfaces the empty one (Claude Code).
    retries_empty_replies: bool = False
    # An agent that runs subagents in its session: the conversations its calls hold, each of which the assembler
    # must merge into one sequence. 0: one agent, not checked here.
    threads: int = 0
    # Another entry's environment, when this agent needs no other package.
    env: str = ""


FRAMEWORKS = {
    "autogen": Framework(["autogen-agentchat", "autogen-ext[openai]"], "autogen_agent.py", "autogen-agentchat", True),
    "langgraph": Framework(["langgraph", "langchain-openai"], "langgraph_agent.py", "langgraph", True),
    "openai-agents": Framework(["openai-agents"], "openai_agents_agent.py", "openai-agents", True, (
        "ModelBehaviorError: Responses stream ended with terminal event `response.incomplete`",)),
    "claude-agent-sdk": Framework(["claude-agent-sdk"], "claude_agent_sdk_agent.py", "claude-agent-sdk", True, (
        "ResultError: Claude Code returned an error result: API Error: Claude's response exceeded the 32 output token",),
        retries_empty_replies=True),
    "crewai": Framework(["crewai"], "crewai_agent.py", "crewai"),
    "dspy": Framework(["dspy"], "dspy_agent.py", "dspy", model_stops=("AdapterParseError: ",)),
    "smolagents": Framework(["smolagents"], "smolagents_agent.py", "smolagents"),
    "pydantic-ai": Framework(["pydantic-ai-slim[openai]"], "pydantic_ai_agent.py", "pydantic-ai-slim", True),
    # Multi-agent shapes: a supervisor and two workers (3 threads), an orchestrator calling an agent as a tool (2).
    "langgraph-supervisor": Framework(["langgraph", "langchain-openai"], "langgraph_supervisor_agent.py", "langgraph",
                                      threads=3, env="langgraph"),
    "openai-agents-as-tool": Framework(["openai-agents"], "openai_agents_as_tool_agent.py", "openai-agents",
                                       threads=2, env="openai-agents"),
}  # fmt: skip
ENDPOINT_PATHS = {
    llm_call_pb2.CALL_ENDPOINT_CHAT_COMPLETIONS: "chat/completions",
    llm_call_pb2.CALL_ENDPOINT_RESPONSES: "responses",
    llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES: "messages",
}


@pytest.fixture(scope="module")
def framework_envs(tmp_path_factory) -> Iterator[dict[str, Future[IsolatedEnv]]]:
    """Every framework's environment, building in the background while the module's vLLM starts."""
    wheel_dir = tmp_path_factory.mktemp("wheel")
    with ThreadPoolExecutor(PARALLEL_INSTALLS) as pool:
        wheel = pool.submit(build_wheel, wheel_dir)

        def env_of(name: str, framework: Framework) -> IsolatedEnv:
            return cached_env(f"fw-{name}", framework.requirements, wheel.result())

        futures = {
            name: pool.submit(env_of, name, f) for name, f in FRAMEWORKS.items() if not f.env
        }
        yield futures | {name: futures[f.env] for name, f in FRAMEWORKS.items() if f.env}


@pytest.fixture(scope="module")
def long_context_vllm(framework_envs, tmp_path_factory) -> Iterator[VllmServer]:
    """Claude Code's prompt is about 27,000 tokens of the small model's tokenizer; the others fit in it too."""
    model = generate_tiny_model(
        tmp_path_factory.mktemp("long-model"), TinyModelSpec(max_position_embeddings=LONG_CONTEXT)
    )
    with serving_model(
        model, tmp_path_factory, served_model_name=SERVED, max_model_len=LONG_CONTEXT
    ) as server:
        yield server


@pytest.fixture(scope="module")
def stack(module_services, long_context_vllm, tmp_path_factory) -> IngestStack:
    data = tmp_path_factory.mktemp("framework-matrix")
    store = module_services.start("store", "--url", f"sqlite:///{data}/store.db")
    ingest, http_port = start_ingest(
        module_services,
        store.address,
        long_context_vllm.base_url,
        data / "spool.db",
        "--model-alias",
        "claude-*=@policy",
    )
    return IngestStack(store, ingest, http_port, data / "spool.db")


@pytest.fixture(scope="module")
def tokenizer(long_context_vllm):
    return AutoTokenizer.from_pretrained(long_context_vllm.config.model_path)


def ids(packed: bytes) -> list[int]:
    return np.frombuffer(packed, dtype="<i4").tolist()


def check_token_exact(call: llm_call_pb2.LlmCall, vllm_url: str, tokenizer) -> None:
    """The stored prompt is what vLLM renders for the request the framework sent, and the stored sampled ids,
    with a logprob each, decode to the text the framework was answered with."""
    assert call.outcome == llm_call_pb2.CALL_OUTCOME_SUCCEEDED, call.error_message
    request = json.loads(call.request_json)
    render = httpx.post(f"{vllm_url}/v1/{ENDPOINT_PATHS[call.endpoint]}/render", json=request | {"model": SERVED},
                        timeout=120)  # fmt: skip
    assert render.status_code == 200, render.text
    # An exact_history call continues its conversation's ids instead (check_one_sequence_per_thread).
    if call.history_mode != llm_call_pb2.HISTORY_MODE_EXACT_HISTORY:
        assert ids(call.prompt_token_ids) == render.json()["token_ids"]
    for choice in call.choices:
        sampled = ids(choice.token_ids)
        assert len(sampled) == len(choice.logprobs) // 4 > 0
        decoded, text = tokenizer.decode(sampled, skip_special_tokens=True), choice.text
        if TOOL_CALL_START in decoded:
            # From a sampled tool-call token on, the text is the tool parser's reading of it.
            decoded = decoded.split(TOOL_CALL_START)[0]
            text = text[: len(decoded)]
        assert decodes_to(decoded, text, choice.finish_reason), (decoded, text)


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_a_framework_agent_is_captured_token_exactly(name: str, framework_envs, stack, long_context_vllm, tokenizer,
                                                     tmp_path: Path) -> None:  # fmt: skip
    framework = FRAMEWORKS[name]
    env = framework_envs[name].result()
    version = env.versions[framework.main_package]
    print(f"{name}: {framework.main_package} {version}, parity's protobuf {env.versions['protobuf']}, "
          f"grpcio {env.versions['grpcio']}, openai {env.versions.get('openai', '-')}")  # fmt: skip
    session_id = f"fw-{name}"
    finished = env.run(str(AGENTS / framework.script), session_id, cwd=tmp_path, timeout=600,
                       env={"PARITY_INGEST_URL": f"http://127.0.0.1:{stack.http_port}", "AGENT_MODEL": SERVED,
                            "HOME": str(tmp_path)})  # fmt: skip
    assert finished.returncode == 0, f"{name} {version} failed:\n{finished.stderr[-4000:]}"
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    stopped = result.get("stopped")
    assert stopped is None or stopped.startswith(framework.model_stops or ("-",)), (
        f"{name} {version}: {stopped}"
    )
    if stopped:
        print(f"{name} stopped on the small model's reply: {stopped[:200]}")

    calls = stack.calls_after_flush(session_id)
    assert calls, f"{name} made no call through ingest in session {session_id}"
    assert {call.session_id for call in calls} == {session_id}
    for call in calls:
        check_token_exact(call, long_context_vllm.base_url, tokenizer)
    if "replies" in result:  # every reply the agent received, in order
        texts = [call.choices[0].text for call in calls]
        assert result["replies"] == [
            text for text in texts if text or not framework.retries_empty_replies
        ], texts
    if framework.answer_is_reply and not stopped:
        assert (
            result["answer"] is not None
            and result["answer"].strip() == calls[-1].choices[0].text.strip()
        )
    if framework.threads:
        check_one_sequence_per_thread(calls, framework.threads, long_context_vllm.base_url)


def check_one_sequence_per_thread(
    calls: list[llm_call_pb2.LlmCall], threads: int, vllm_url: str
) -> None:
    """The assembler's own merge (as its service runs it) makes one sample of each conversation: every call in
    exactly one sample, its sampled ids under loss mask 1, nothing split; each call's prompt is its conversation's
    ids so far, as sampled, then its new turns exactly as vLLM renders them."""
    (trajectory,), _ = split_trajectories(calls[0].session_id, calls, [])
    built = build_samples(trajectory, "episode", "group", LengthLimit())
    assert (built.threads, built.splits, len(built.samples)) == (threads, 0, threads), (
        built.threads, dict(built.split_reasons), [list(s.call_ids) for s in built.samples],
        [(c.choices[0].finish_reason, c.choices[0].text[:80], c.choices[0].tool_calls_json[:200], c.history_fallback)
         for c in calls])  # fmt: skip
    assert sorted(c for s in built.samples for c in s.call_ids) == sorted(
        call.call_id for call in calls
    )
    by_id = {call.call_id: call for call in calls}
    for sample in built.samples:
        mask = np.frombuffer(sample.loss_mask, dtype=np.uint8)
        sampled = [t for c in sample.call_ids for t in ids(by_id[c].choices[0].token_ids)]
        assert np.frombuffer(sample.token_ids, dtype="<i4")[mask == 1].tolist() == sampled
        sequence: list[int] = []
        for call_id in sample.call_ids:
            call = by_id[call_id]
            prompt = ids(call.prompt_token_ids)
            assert prompt[: len(sequence)] == sequence and not call.history_fallback
            request = json.loads(call.request_json) | {"model": SERVED}
            rendered = httpx.post(
                f"{vllm_url}/v1/chat/completions/render", json=request, timeout=120
            ).json()["token_ids"]
            spliced = prompt[len(sequence) :]
            assert spliced and rendered[-len(spliced) :] == spliced
            sequence = prompt + ids(call.choices[0].token_ids)
