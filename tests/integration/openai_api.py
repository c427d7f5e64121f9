"""The OpenAI API as the tests speak it, through the openai client's types: plain-dict requests as its request
types, and what vLLM's replies carry beyond its models (`return_token_ids`: prompt_token_ids, each choice's
token_ids), which those models keep as extras."""

from __future__ import annotations

from typing import Any, cast

from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionTokenLogprob,
    ChatCompletionToolParam,
)
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel


def as_messages(messages: list[dict[str, Any]]) -> list[ChatCompletionMessageParam]:
    """Plain-dict chat messages, which transformers' chat templates take too, as openai's request type: a TypedDict
    per role, which is what these dicts are; mypy cannot tell a dict's keys apart, so this casts."""
    return cast("list[ChatCompletionMessageParam]", messages)


def as_tools(tools: list[dict[str, Any]]) -> list[ChatCompletionToolParam]:
    """Plain-dict tool definitions, which transformers' chat templates take too, as openai's request type."""
    return cast("list[ChatCompletionToolParam]", tools)


def sampled_logprobs(choice: Choice) -> list[ChatCompletionTokenLogprob]:
    """A choice's per-token logprobs, which a request with logprobs=True always gets."""
    assert choice.logprobs is not None and choice.logprobs.content is not None, (
        "no logprobs: asked with logprobs=True?"
    )
    return choice.logprobs.content


def vllm_field(reply: BaseModel, name: str) -> Any:
    """A field vLLM adds to a reply or to one of its choices: prompt_token_ids, token_ids."""
    extra = reply.model_extra or {}
    assert name in extra, f"no {name} in the {type(reply).__name__}: asked with return_token_ids?"
    return extra[name]
