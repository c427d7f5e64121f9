"""The reward `parity train --reward` gives Claude Code's rollouts in test_cli_agent_training.py.

It scores the share of letters in what Claude Code answered, and keeps each rollout's events
(stream-json) in $CLAUDE_CODE_EVENTS_DIR, so the test can match every call to the reply it gave.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def reward(task: dict[str, Any], stdout: str) -> float:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    (Path(os.environ["CLAUDE_CODE_EVENTS_DIR"]) / f"{uuid.uuid4().hex}.json").write_text(
        json.dumps(events)
    )
    said = "".join(
        block.get("text", "") for event in events if event.get("type") == "assistant"
        for block in event["message"]["content"]
    )  # fmt: skip
    return sum(character.isalpha() for character in said) / max(1, len(said))
