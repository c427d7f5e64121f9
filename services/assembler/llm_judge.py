"""An LLM judge, over any provider LiteLLM speaks: OpenAI, Anthropic, a vLLM server
(`hosted_vllm/NAME` with --judge-api-base), and the rest.

The judge sees the task metadata and the conversation and answers with a score; the
first number in its reply is the reward. A reply with no number, or a provider that
keeps failing, is an error recorded on the rollout. Judge calls are made by the
assembler, not through ingest, so they are never captured as training data.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import structlog

from parity.services.assembler.reward_function import as_reward
from parity.services.assembler.scoring import ScoringError

log = structlog.get_logger(__name__)

DEFAULT_INSTRUCTIONS = (
    "You grade the work of an AI agent. Read the task and the conversation, then answer "
    "with one number from 0 to 1: 1 if the agent accomplished the task, 0 if it did not. "
    "Answer with the number only."
)
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class JudgeSettings:
    # A LiteLLM model string: "openai/gpt-4o-mini", "hosted_vllm/NAME", ...
    model: str
    api_base: str = ""
    # Name of the environment variable that holds the provider's API key.
    api_key_env: str = ""
    instructions: str = DEFAULT_INSTRUCTIONS
    max_tokens: int = 16
    # Provider-specific request fields, e.g. vLLM's structured outputs.
    extra_body: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 60.0
    retries: int = 2
    concurrency: int = 8


class LlmJudge:
    def __init__(self, settings: JudgeSettings) -> None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch it at import
        # Imported here: it takes seconds, and only a configured judge needs it.
        import litellm

        self._completion = litellm.acompletion
        self.settings = settings
        self.source = f"judge:{settings.model}"
        self._slots = asyncio.Semaphore(settings.concurrency)

    async def score(self, metadata: dict[str, str], messages: list[dict[str, Any]]) -> float:
        reply = await self._ask(self.prompt(metadata, messages))
        match = _NUMBER.search(reply)
        if match is None:
            raise ScoringError(
                "judge_error",
                f"judge {self.settings.model} answered without a score: {reply[:200]!r}",
            )
        return as_reward(float(match.group()), f"judge {self.settings.model}", "judge_error")

    def prompt(
        self, metadata: dict[str, str], messages: list[dict[str, Any]]
    ) -> list[dict[str, str]]:
        conversation = "\n".join(f"[{m.get('role', '?')}] {_content(m)}" for m in messages)
        task = json.dumps(metadata, sort_keys=True, ensure_ascii=False)
        return [
            {"role": "system", "content": self.settings.instructions},
            {"role": "user", "content": f"Task: {task}\n\nConversation:\n{conversation}\n\nScore:"},
        ]

    async def _ask(self, prompt: list[dict[str, str]]) -> str:
        settings = self.settings
        options: dict[str, Any] = {"max_tokens": settings.max_tokens, "temperature": 0.0,
                                   "timeout": settings.timeout_s, "num_retries": settings.retries}  # fmt: skip
        if settings.api_base:
            options["api_base"] = settings.api_base
        if settings.api_key_env:
            options["api_key"] = os.environ.get(settings.api_key_env, "")
        if settings.extra_body:
            options["extra_body"] = settings.extra_body
        async with self._slots:
            try:
                response = await self._completion(model=settings.model, messages=prompt, **options)
            except Exception as error:  # noqa: BLE001 - LiteLLM maps every provider's errors to its own
                raise ScoringError(
                    "judge_error", f"judge {settings.model} failed: {type(error).__name__}: {error}"
                ) from None
        return response.choices[0].message.content or ""


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    text = content or ""
    if message.get("tool_calls"):
        text += f" (tool calls: {json.dumps(message['tool_calls'], ensure_ascii=False)})"
    return text
