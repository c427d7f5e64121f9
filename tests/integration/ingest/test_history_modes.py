"""The history modes against real vLLM serving the small model with a template that strips earlier reasoning.

Replies are `<think>…</think>` then a tool call or an answer, by vLLM's structured outputs. In `as_deployed` every
call is token-exact and the rewritten history splits the trajectory, counted; in `exact_history` a 5-turn tool
agent on the official openai client is one sequence, streamed or not, answered in the same shapes; an agent that
edits its history falls back with a counted split; and a short training run in `exact_history` raises its reward.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import numpy as np
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

import parity
from parity import engine
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import llm_call_pb2
from parity.clients import AssemblerClient
from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.inference.vllm_launcher import VllmLaunchConfig, VllmServer
from tests.conftest import free_port
from tests.integration.openai_api import sampled_logprobs
from tests.integration.stack_fixtures import TrainingStack, start_training_stack
from tests.integration.vllm_fixtures import VLLM_STARTUP_TIMEOUT_S, inference_python
from tests.learning_bounds import assert_learned, run_rewards, trend

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

MODEL = "thinking"
TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluates an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}}]  # fmt: skip
THINK = r"<think>[a-z ]{1,12}</think>"
TOOL_REPLY = (
    THINK
    + r'\n<tool_call>\n\{"name": "calculator", "arguments": \{"expression": "[0-9] \+ [0-9]"\}\}\n</tool_call>'
)
ANSWER_REPLY = THINK + r"[a-z ]{1,12}"
# Turns 1, 2 and 4 call the tool; 3 and 5 answer, and the agent asks on.
TURNS = [TOOL_REPLY, TOOL_REPLY, ANSWER_REPLY, TOOL_REPLY, ANSWER_REPLY]
HISTORY_MODE = llm_call_pb2.HistoryMode


@pytest.fixture(scope="module")
def thinking_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    model = generate_tiny_model(
        tmp_path_factory.mktemp("thinking_model"), TinyModelSpec(chat_template="chatml-thinking")
    )
    config = VllmLaunchConfig(
        model_path=model, port=free_port(), python=inference_python(), served_model_name=MODEL,
        log_path=tmp_path_factory.mktemp("thinking-vllm") / "vllm.log", startup_timeout_s=VLLM_STARTUP_TIMEOUT_S,
    )  # fmt: skip
    with VllmServer(config) as server:
        yield server


@pytest.fixture(scope="module")
def stack(module_services, thinking_vllm, tmp_path_factory) -> Iterator[TrainingStack]:
    stack = start_training_stack(
        module_services, thinking_vllm, tmp_path_factory.mktemp("history-modes")
    )
    previous = parity.current_config()
    parity.configure(ingest_url=f"http://127.0.0.1:{stack.http_port}", assembler_address=stack.assembler.address,
                     store_address=stack.store.address)  # fmt: skip
    yield stack
    parity.configure(
        **{k: getattr(previous, k) for k in ("ingest_url", "assembler_address", "store_address")}
    )


def ids(packed: bytes) -> list[int]:
    return np.frombuffer(packed, dtype="<i4").tolist()


async def ask(client: Any, messages: list[dict], regex: str, stream: bool) -> tuple[dict, tuple]:
    """One turn: the assistant message to send back, and the shape of the answer."""
    request = {"model": MODEL, "messages": messages, "tools": TOOLS, "max_tokens": 100, "temperature": 1.0,
               "extra_body": {"structured_outputs": {"regex": regex}}}  # fmt: skip
    if not stream:
        answer = await client.chat.completions.create(**request)
        choice = answer.choices[0]
        message = choice.message.model_dump(exclude_none=True)
        shape: tuple = ("whole", choice.finish_reason, sorted(message), answer.usage is not None)
        return message, shape + _tool_call_shape(message)
    content, finish = "", None
    calls: dict[int, dict[str, Any]] = {}
    # "usage", or the kinds of delta a chunk carried.
    events: list[str | frozenset[str]] = []
    async for chunk in await client.chat.completions.create(stream=True, **request):
        if not chunk.choices:
            events.append("usage")
            continue
        delta = chunk.choices[0].delta
        kinds = {"role": delta.role, "content": delta.content, "tool_call": delta.tool_calls,
                 "finish": chunk.choices[0].finish_reason}  # fmt: skip
        events.append(frozenset(kind for kind, present in kinds.items() if present))
        content += delta.content or ""
        for call in delta.tool_calls or ():
            merged = calls.setdefault(
                call.index,
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            merged["id"] = call.id or merged["id"]
            merged["function"]["name"] += (call.function and call.function.name) or ""
            merged["function"]["arguments"] += (call.function and call.function.arguments) or ""
        finish = chunk.choices[0].finish_reason or finish
    message = {"role": "assistant", "content": content} | (
        {"tool_calls": [calls[i] for i in sorted(calls)]} if calls else {}
    )
    # The role alone first, the finish reason last, and which kinds of delta came between: how many chunks a
    # reply takes (vLLM merges steps when its reader falls behind) is the sampler's and the network's business.
    answer_events = [e for e in events if e != "usage"]
    shape = ("stream", finish, answer_events[0], "finish" in answer_events[-1], sorted(set().union(*answer_events)),
             "usage" in events)  # fmt: skip
    return message, shape + _tool_call_shape(message)


def _tool_call_shape(message: dict) -> tuple:
    calls = message.get("tool_calls") or []
    return (len(calls), all(c["id"].startswith("chatcmpl-tool-") for c in calls),
            [json.loads(c["function"]["arguments"]) and c["function"]["name"] for c in calls])  # fmt: skip


SHAPES: dict[str, list[tuple]] = {}


def tool_agent(stream: bool, edit_history_at: int | None = None, edited_message: int = 2):
    """`edited_message` 0 edits the opening (the question), 2 the first tool result, after it."""

    async def agent(task: dict) -> float:
        client = parity.get_async_chat_client()
        messages: list[dict] = [{"role": "user", "content": task["prompt"]}]
        shapes = []
        for turn, regex in enumerate(TURNS):
            if turn == edit_history_at:
                edited = messages[edited_message]
                messages[edited_message] = edited | {"content": edited["content"] + " Please."}
            message, shape = await ask(client, messages, regex, stream)
            shapes.append(shape)
            messages.append(message)
            for call in message.get("tool_calls") or ():
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "7"})
            if not message.get("tool_calls"):
                messages.append({"role": "user", "content": "And then?"})
        session = parity.current_session()
        assert session is not None  # the engine runs each rollout in a session
        SHAPES[session.session_id] = shapes
        return 1.0

    return agent


def run(agent, mode: str, name: str, count: int = 2) -> list:
    tasks = [{"id": f"{name}-{n}", "prompt": f"What is {n} plus 3?"} for n in range(count)]
    # Batched for a run of their own, so the training test below trains on its rollouts alone.
    results = engine.run(agent, tasks, rollouts_per_task=1, retries=0, progress=False, run_id=name, history_mode=mode,
                         training_run="history-mode-checks")  # fmt: skip
    assert [r.outcome for r in results] == ["succeeded"] * count, [r.error for r in results]
    return results


def trajectory(stack: TrainingStack, session_id: str):
    request = assembler_pb.GetTrajectoryRequest(
        session_id=session_id, view=assembler_pb.TRAJECTORY_VIEW_FULL
    )
    return AssemblerClient(stack.assembler.address).get_trajectory(request).trajectory


def calls_of(stack: TrainingStack, session_id: str) -> list[llm_call_pb2.LlmCall]:
    from parity.api.store.v1 import store_service_pb2 as store_pb
    from parity.clients import StoreClient

    request = store_pb.ListCallsRequest(session_id=session_id, view=store_pb.CALL_VIEW_FULL)
    return list(StoreClient(stack.store.address).list_calls(request).calls)


def rendered(stack: TrainingStack, call: llm_call_pb2.LlmCall) -> list[int]:
    """What vLLM's own render gives the call's request: the prompt a deployment would have sent."""
    request = json.loads(call.request_json)
    body = {"model": MODEL, "messages": request["messages"], "tools": request["tools"]}
    return httpx.post(
        f"{stack.vllm.base_url}/v1/chat/completions/render", json=body, timeout=60
    ).json()["token_ids"]


def test_as_deployed_calls_are_token_exact_and_the_rewritten_history_splits_counted(stack) -> None:
    for result in run(tool_agent(stream=False), "as_deployed", "deployed"):
        calls = calls_of(stack, result.session_id)
        assert len(calls) == len(TURNS)
        for call in calls:
            assert (
                call.history_mode == HISTORY_MODE.HISTORY_MODE_AS_DEPLOYED
                and not call.history_fallback
            )
            assert ids(call.prompt_token_ids) == rendered(stack, call)
        view = trajectory(stack, result.session_id)
        assert view.history_mode == HISTORY_MODE.HISTORY_MODE_AS_DEPLOYED
        # The template drops each earlier reply's reasoning once a user turn follows it.
        assert view.split_count >= 1 and sum(view.split_reasons.values()) == view.split_count
        assert len(view.samples) == 1 + view.split_count
        assert view.unique_token_count < view.token_count


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_exact_history_trains_a_five_turn_tool_agent_as_one_sequence(stack, stream: bool) -> None:
    deployed = run(tool_agent(stream), "as_deployed", f"shape-{stream}", count=1)
    for result in run(tool_agent(stream), "exact_history", f"exact-{stream}"):
        calls = calls_of(stack, result.session_id)
        assert [c.history_mode for c in calls] == [HISTORY_MODE.HISTORY_MODE_EXACT_HISTORY] * len(
            TURNS
        )
        assert [c.history_fallback for c in calls] == [""] * len(TURNS)
        sequence: list[int] = []
        for call in calls:
            prompt, completion = ids(call.prompt_token_ids), ids(call.choices[0].token_ids)
            # The prompt is the sequence so far, as sampled, then the new turns exactly as vLLM renders them.
            assert prompt[: len(sequence)] == sequence
            spliced = prompt[len(sequence) :]
            assert spliced and rendered(stack, call)[-len(spliced) :] == spliced
            assert call.choices[0].text.startswith("<think>")
            sequence = prompt + completion
        view = trajectory(stack, result.session_id)
        assert view.history_mode == HISTORY_MODE.HISTORY_MODE_EXACT_HISTORY
        assert view.split_count == 0 and view.merged_call_count == len(TURNS) - 1
        assert view.token_count == view.unique_token_count == len(sequence)
        (sample,) = view.samples
        assert sample.history_mode == HISTORY_MODE.HISTORY_MODE_EXACT_HISTORY
        assert ids(sample.token_ids) == sequence
        mask = np.frombuffer(sample.loss_mask, dtype=np.uint8)
        logprobs = np.frombuffer(sample.rollout_logprobs, dtype="<f4")
        sampled = np.zeros(len(sequence), dtype=np.uint8)
        for call in calls:
            start = len(ids(call.prompt_token_ids))
            completion = ids(call.choices[0].token_ids)
            sampled[start : start + len(completion)] = 1
            np.testing.assert_array_equal(logprobs[start : start + len(completion)],
                                          np.frombuffer(call.choices[0].logprobs, dtype="<f4"))  # fmt: skip
        np.testing.assert_array_equal(mask, sampled)
        # What the agent read is shaped as the as_deployed answers were.
        assert SHAPES[result.session_id] == SHAPES[deployed[0].session_id]


def test_an_agent_that_edits_its_history_falls_back_with_a_counted_split(stack) -> None:
    (result,) = run(tool_agent(stream=False, edit_history_at=2), "exact_history", "edited", count=1)
    calls = calls_of(stack, result.session_id)
    assert [c.history_fallback for c in calls] == ["", "", "history_changed", "", ""]
    view = trajectory(stack, result.session_id)
    assert view.split_count == 1 and view.split_reasons == {"history_changed": 1}
    assert (len(view.samples), view.thread_count) == (2, 1)


def test_an_agent_that_edits_its_opening_starts_a_new_conversation(stack) -> None:
    """The question itself rewritten: no call of the trajectory opened that way, so it is a thread of its own (as a
    subagent's first call is), rendered as deployed without a fallback; its next turns continue it exactly."""
    (result,) = run(tool_agent(stream=False, edit_history_at=2, edited_message=0), "exact_history", "reopened",
                    count=1)  # fmt: skip
    calls = calls_of(stack, result.session_id)
    assert [c.history_fallback for c in calls] == [""] * 5
    view = trajectory(stack, result.session_id)
    assert (view.split_count, view.thread_count, len(view.samples), view.merged_call_count) == (
        0,
        2,
        2,
        3,
    )
    assert [list(s.call_ids) for s in view.samples] == [
        [c.call_id for c in calls[:2]],
        [c.call_id for c in calls[2:]],
    ]


def anthropic_agent(task: dict) -> float:
    client = anthropic.Anthropic(
        base_url=parity.session_url(api="anthropic"), api_key="any-key", max_retries=0
    )
    messages: list[MessageParam] = [{"role": "user", "content": task["prompt"]}]
    for _ in range(3):
        reply = client.messages.create(model=MODEL, max_tokens=12, messages=messages)
        messages += [
            {"role": "assistant", "content": reply.content},
            {"role": "user", "content": "And then?"},
        ]
    return 1.0


def responses_agent(task: dict) -> float:
    client = openai.OpenAI(base_url=parity.session_url(), api_key="any-key", max_retries=0)
    previous = None
    for question in (task["prompt"], "And then?", "Why?"):
        previous = client.responses.create(model=MODEL, max_output_tokens=12, input=question,
                                           previous_response_id=previous.id if previous else None)  # fmt: skip
    return 1.0


@pytest.mark.parametrize(("agent", "endpoint"), [
    (anthropic_agent, llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES),
    (responses_agent, llm_call_pb2.CALL_ENDPOINT_RESPONSES),
], ids=["messages", "responses"])  # fmt: skip
def test_exact_history_serves_the_messages_and_responses_apis_as_one_sequence(
    stack, agent, endpoint
) -> None:
    for result in run(agent, "exact_history", f"exact-{endpoint}"):
        calls = calls_of(stack, result.session_id)
        assert [c.endpoint for c in calls] == [endpoint] * 3
        assert [(c.history_mode, c.history_fallback) for c in calls] == [
            (HISTORY_MODE.HISTORY_MODE_EXACT_HISTORY, "")
        ] * 3
        view = trajectory(stack, result.session_id)
        assert view.split_count == 0 and len(view.samples) == 1 and view.merged_call_count == 2


def word_start_share(token_texts: list[str]) -> float:
    return sum(text.startswith(" ") for text in token_texts) / max(1, len(token_texts))


async def thinking_chat_agent(task: dict[str, Any]) -> float:
    """Three turns of think-then-answer; rewarded on how many answer tokens begin a word."""
    client = parity.get_async_chat_client()
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task["prompt"]}]
    shares = []
    for _ in range(3):
        reply = await client.chat.completions.create(
            model=task["model"], messages=messages, max_tokens=task["max_tokens"], temperature=task["temperature"],
            logprobs=True, extra_body={"structured_outputs": {"regex": r"<think>[a-z ]{1,6}</think>[a-z ]{1,32}"}},
        )  # fmt: skip
        tokens = [entry.token for entry in sampled_logprobs(reply.choices[0])]
        thought = next(i for i in range(len(tokens)) if "</think>" in "".join(tokens[: i + 1]))
        shares.append(word_start_share(tokens[thought + 1 :]))
        messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                     {"role": "user", "content": "Say more."}]  # fmt: skip
    return sum(shares) / len(shares)


def test_a_short_training_run_in_exact_history_completes_and_its_reward_rises(
    stack, tmp_path
) -> None:
    tasks = [{"id": f"t{n}", "prompt": prompt} for n, prompt in enumerate(
        ["Tell me about your day.", "Describe the sea.", "What do you like?", "Say something kind."])]  # fmt: skip
    result = parity.train(
        thinking_chat_agent, tasks, model=stack.vllm.config.model_path, stack=stack.addresses, steps=16,
        groups_per_batch=2, rollouts_per_task=4, max_tokens=48, learning_rate=1.5e-2, history_mode="exact_history",
        output_dir=str(tmp_path / "runs"), progress=False,
    )  # fmt: skip
    assert result.state == "completed", result.error
    assert result.history_mode == "exact_history"
    assert (
        result.merge_rate == 1.0
        and not result.splits
        and result.tokens_trained == result.tokens_unique
    )
    # The rise is the trend of every rollout's reward across the 16 steps (each prompt's own mean taken out), with
    # its standard error: no rollouts beyond the run's own. Measured on 128 rollouts: 0.349 -> 0.570 fitted, gain
    # 0.221, SE 0.029, z 7.7 (123 degrees of freedom); passes at z >= 3.16 (Student's t), which a run that learns
    # nothing reaches with probability 1e-3. `reward_last > reward_first` alone passed such a run half the time.
    rollouts = run_rewards(stack.assembler.address, result.run_id, "s")
    assert_learned(trend([r.step for r in rollouts], [r.reward for r in rollouts], "training reward across steps",
                         tasks=[r.task for r in rollouts]))  # fmt: skip


def interleaved_agent(rounds: int, threads: tuple[str, ...] = ("", "")):
    """Conversations of one episode (an orchestrator and a worker) whose calls alternate, each re-sending its own
    history; a named thread's calls go through `parity.thread`, and the worker rewards its own thread."""

    async def agent(task: dict) -> float:
        client = parity.get_async_chat_client()
        histories = [
            [{"role": "user", "content": f"{task['prompt']} Part {t}."}]
            for t in range(len(threads))
        ]
        for _ in range(rounds):
            for name, messages in zip(threads, histories, strict=True):
                if name:
                    with parity.thread(name):
                        message, _ = await ask(
                            parity.get_async_chat_client(), messages, ANSWER_REPLY, stream=False
                        )
                else:
                    message, _ = await ask(client, messages, ANSWER_REPLY, stream=False)
                messages += [message, {"role": "user", "content": "And then?"}]
        if threads[-1]:
            with parity.thread(threads[-1]):
                await parity.areward(0.5)
        return 1.0

    return agent


def test_interleaved_threads_in_exact_history_train_each_token_once(stack) -> None:
    """The issue's shape: two conversations interleaved for 8 rounds in one session; each merges on its own."""
    (result,) = run(interleaved_agent(rounds=8), "exact_history", "interleaved", count=1)
    calls = calls_of(stack, result.session_id)
    assert len(calls) == 16 and [c.history_fallback for c in calls] == [""] * 16
    view = trajectory(stack, result.session_id)
    assert (view.thread_count, view.split_count, view.merged_call_count, len(view.samples)) == (
        2,
        0,
        14,
        2,
    )
    # Unique tokens: what each conversation's last call saw and sampled.
    last = {s.thread_index: s.call_ids[-1] for s in view.samples}
    by_id = {c.call_id: c for c in calls}
    unique = sum(
        len(ids(by_id[c].prompt_token_ids)) + len(ids(by_id[c].choices[0].token_ids))
        for c in last.values()
    )
    assert view.token_count == view.unique_token_count == unique
    placed = [c for s in view.samples for c in s.call_ids]
    assert sorted(placed) == sorted(by_id)
    for sample in view.samples:
        mask = np.frombuffer(sample.loss_mask, dtype=np.uint8)
        sampled = [t for c in sample.call_ids for t in ids(by_id[c].choices[0].token_ids)]
        assert np.frombuffer(sample.token_ids, dtype="<i4")[mask == 1].tolist() == sampled
    assert {
        s.thread_index: [c.call_id for c in calls].index(s.call_ids[0]) % 2 for s in view.samples
    } == {0: 0, 1: 1}


def test_named_threads_are_recorded_kept_apart_and_rewarded_on_their_own(stack) -> None:
    (result,) = run(interleaved_agent(rounds=3, threads=("orchestrator", "researcher")), "exact_history", "named",
                    count=1)  # fmt: skip
    calls = calls_of(stack, result.session_id)
    assert [c.thread_id for c in calls] == ["orchestrator", "researcher"] * 3
    view = trajectory(stack, result.session_id)
    assert (view.thread_count, view.split_count) == (2, 0)
    assert {s.thread_id: s.reward for s in view.samples} == {"orchestrator": 1.0, "researcher": 1.5}
    assert {step.thread_id for step in view.steps} == {"orchestrator", "researcher"}
