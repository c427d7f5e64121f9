"""A long tool-using agent session, as ingest would capture it, built with a model's tokenizer.

Each turn the model samples a reply (text, or a tool call in the chat template's
`<tool_call>` form), the agent runs the tool and sends its result back; every prompt
is the previous prompt, the sampled reply and the new turn, token for token, as a
multi-turn agent's prompts are, so prefix merging joins the calls. One turn sends the
previous reply back re-rendered (one token differs), the way a chat template that
re-tokenizes the reply's text does, so the trajectory also shows a split.
"""

from __future__ import annotations

import json

import numpy as np
from tokenizers import Tokenizer

from parity.api.common.v1 import llm_call_pb2
from parity.core import tokens

WORDS = (
    "the",
    "sea",
    "is",
    "calm",
    "today",
    "and",
    "small",
    "boat",
    "drifts",
    "toward",
    "a",
    "quiet",
    "harbour",
    "where",
    "nets",
    "dry",
    "in",
    "sun",
    "we",
    "check",
    "forecast",
    "then",
    "plan",
    "route",
    "around",
    "northern",
    "rocks",
    "before",
    "tide",
    "turns",
    "again",
    "every",
    "answer",
    "should",
    "name",
    "source",
    "time",
    "it",
    "was",
    "read",
    "so",
    "next",
    "step",
    "can",
    "trust",
)
TOOLS = [{"type": "function", "function": {"name": "read_forecast", "description": "The marine forecast for a place.",
                                           "parameters": {"type": "object", "properties": {"place": {"type": "string"}}}}}]  # fmt: skip


def agent_session(
    tokenizer: Tokenizer,
    session_id: str,
    *,
    turns: int = 20,
    total_tokens: int = 10_000,
    split_turn: int = 12,
    seed: int = 0,
    metadata: dict[str, str] | None = None,
) -> list[llm_call_pb2.LlmCall]:
    """`turns` calls whose last prompt plus reply holds about `total_tokens` tokens."""
    rng = np.random.default_rng(seed)
    im_start, im_end = tokenizer.token_to_id("<|im_start|>"), tokenizer.token_to_id("<|im_end|>")
    system = "You are a harbour assistant. Use the tools to read forecasts before you answer."
    question = "Plan a safe trip around the northern rocks for tomorrow morning."
    messages: list[dict] = [
        {"role": "system", "content": system},
        {"role": "user", "content": question},
    ]
    prompt = _encode(tokenizer, f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
                                "<|im_start|>assistant\n")  # fmt: skip
    per_turn = max(40, (total_tokens - len(prompt)) // turns)
    calls = []
    for turn in range(turns):
        tool_turn = turn < turns - 1 and turn % 2 == 0
        reply_words = " ".join(rng.choice(WORDS, size=max(8, int(per_turn * 0.43))))
        arguments = {"place": f"rock {turn}"}
        if tool_turn:
            reply = f"{reply_words}\n<tool_call>\n{json.dumps({'name': 'read_forecast', 'arguments': arguments})}\n</tool_call>"
        else:
            reply = reply_words
        completion = [*_encode(tokenizer, reply), im_end]
        logprobs = -rng.gamma(0.6, 0.8, size=len(completion)).astype(np.float32)
        call = llm_call_pb2.LlmCall(
            call_id=f"{session_id}-c{turn:02d}", session_id=session_id, model="tiny", policy_version=3 + turn // 8,
            replica="http://127.0.0.1:8100", metadata=metadata or {}, prompt_token_ids=tokens.pack_token_ids(prompt),
            request_json=json.dumps({"model": "tiny", "messages": messages, "tools": TOOLS, "temperature": 1.0}).encode(),
            outcome=llm_call_pb2.CALL_OUTCOME_SUCCEEDED,
        )  # fmt: skip
        call.timings.start_time.FromMilliseconds(1_764_000_000_000 + turn * 1500)
        call.timings.end_time.FromMilliseconds(1_764_000_000_000 + turn * 1500 + 900)
        call.timings.time_to_first_token.FromMilliseconds(40 + turn)
        call.timings.upstream_duration.FromMilliseconds(850)
        call.timings.upstream_attempts = 1
        call.usage.prompt_tokens, call.usage.completion_tokens = len(prompt), len(completion)
        call.choices.add(
            index=0, token_ids=tokens.pack_token_ids(completion), logprobs=tokens.pack_floats(logprobs), text=reply_words,
            finish_reason="tool_calls" if tool_turn else "stop",
            tool_calls_json=json.dumps([{"id": f"call-{turn}", "type": "function", "function": {
                "name": "read_forecast", "arguments": json.dumps(arguments)}}]).encode() if tool_turn else b"",
        )  # fmt: skip
        calls.append(call)
        messages = [*messages, {"role": "assistant", "content": reply_words}]
        if tool_turn:
            result = f"wind {rng.integers(3, 30)} knots from the {rng.choice(['north', 'west', 'south'])}, swell {rng.integers(1, 4)} m"
            messages.append({"role": "tool", "tool_call_id": f"call-{turn}", "content": result})
            turn_text = f"\n<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        else:
            follow_up = "Check the next rock too."
            messages.append({"role": "user", "content": follow_up})
            turn_text = f"\n<|im_start|>user\n{follow_up}<|im_end|>\n<|im_start|>assistant\n"
        sent_back = list(completion)
        if turn + 1 == split_turn:
            # The agent's history holds the reply re-rendered from its text: one token comes back different.
            sent_back[len(sent_back) // 2] = im_start
        prompt = [*prompt, *sent_back, *_encode(tokenizer, turn_text)]
    return calls


def _encode(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids
