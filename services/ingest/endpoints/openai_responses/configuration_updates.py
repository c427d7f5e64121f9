"""`configuration_update` input items: settings that change partway through a conversation, not prompt text.

An update carries `reasoning` (its `effort`) and `text` (its `format`); each setting stays
in effect until a later update replaces it, and the request's own `reasoning` and `text`
are the baseline before the first. A chat template renders a conversation under one set
of settings, so the call is generated under the settings in effect at the end of its
input: the last update's effort becomes the chat request's `reasoning_effort`, its
format the `response_format`. The response still echoes the request's own `reasoning`
and `text`, as OpenAI reports the baseline. Anything else an update carries
(`reasoning.summary`, `text.verbosity`, fields newer than this) has no chat setting to
become and is ignored, as vLLM ignores those fields of a request. A chained request
(`previous_response_id`) does not inherit an earlier request's updates: its
conversation is rebuilt as chat messages, which do not keep them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from parity.services.ingest import openai_errors

UPDATE = "configuration_update"


@dataclass(frozen=True)
class Settings:
    """The settings the request's updates leave in effect; None: no update set it."""

    effort: Any = None
    text_format: Mapping[str, Any] | None = None


def settings_in_effect(items: Any) -> Settings:
    """The reasoning effort and text format of the last `configuration_update` items that set them."""
    effort: Any = None
    text_format: Mapping[str, Any] | None = None
    for index, item in enumerate(items if isinstance(items, list) else ()):
        if not isinstance(item, Mapping) or item.get("type") != UPDATE:
            continue
        where = f"input.{index}"
        reasoning, text = item.get("reasoning"), item.get("text")
        if reasoning is not None:
            if not isinstance(reasoning, Mapping):
                raise openai_errors.bad_request("reasoning must be an object", f"{where}.reasoning")
            if reasoning.get("effort") is not None:
                # vLLM checks the value, as it checks a request's reasoning.effort; its refusal reaches the agent.
                effort = reasoning["effort"]
        if text is not None:
            if not isinstance(text, Mapping) or not isinstance(text.get("format"), Mapping):
                raise openai_errors.bad_request(
                    "a configuration_update's text needs a format object", f"{where}.text"
                )
            text_format = text["format"]
    return Settings(effort, text_format)
