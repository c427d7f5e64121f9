"""The reward `parity train --reward` gives Codex CLI's rollouts in test_cli_agent_training.py.

It scores the share of letters in what Codex answered (its `--json` events' agent messages), and keeps each
rollout's events in $CODEX_EVENTS_DIR, so the test can match every call to the reply it gave.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def reward(task: dict[str, Any], stdout: str) -> float:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    (Path(os.environ["CODEX_EVENTS_DIR"]) / f"{uuid.uuid4().hex}.json").write_text(
        json.dumps(events)
    )
    said = "".join(
        event["item"]["text"] for event in events
        if event.get("type") == "item.completed" and event["item"].get("type") == "agent_message"
    )  # fmt: skip
    return sum(character.isalpha() for character in said) / max(1, len(said))
