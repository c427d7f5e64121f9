"""The main job's agent: one chat call, rewarded for speaking in words.

    parity train --config examples/speak_in_words/train.toml     # what `make demo` runs

The reward is the share of the reply's tokens that begin a new word (start with a
space). An untrained small model scores about 0.3; a few dozen CPU steps teach it to
score about 0.9, which makes this the quickest honest check that training works.
"""

from __future__ import annotations

from typing import Any

import parity


def word_start_share(token_texts: list[str]) -> float:
    return sum(text.startswith(" ") for text in token_texts) / max(1, len(token_texts))


async def speak_in_words(task: dict[str, Any]) -> float:
    completion = await parity.get_async_chat_client().chat.completions.create(
        model=task["model"], messages=[{"role": "user", "content": task["prompt"]}],
        max_tokens=task["max_tokens"], temperature=task["temperature"], logprobs=True,
    )  # fmt: skip
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None  # asked for: logprobs=True
    return word_start_share([entry.token for entry in logprobs.content])
