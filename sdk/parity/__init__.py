"""Parity: train any agent that speaks the OpenAI API with token-exact RL.

import parity

parity.train(solve, "tasks.jsonl", steps=30)  # the whole run; see docs/training.md

client = parity.get_chat_client()          # the official OpenAI client, via ingest
with parity.session(task="add-2-3"):
    answer = client.chat.completions.create(model="policy", messages=[...])
    parity.reward(1.0)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from parity.core.supported_versions import check_installed as _check_installed

# Before anything imports the generated code: a protobuf or grpcio outside its range gets one
# error naming both versions instead of a traceback from deep inside protobuf's import.
_check_installed()

if TYPE_CHECKING:
    from parity.chat_client import get_async_chat_client, get_chat_client
    from parity.clients import RPCError
    from parity.config import configure, current_config
    from parity.core.session_budget import SessionBudget
    from parity.core.session_slug import SessionRef
    from parity.feedback import FeedbackError, FeedbackReceipt, afeedback, feedback
    from parity.flushing import FlushError, aflush, flush
    from parity.promotion import Promotion, promote, rollback
    from parity.rewards import areward, reward
    from parity.sessions import (
        TrajectoryView,
        current_session,
        session,
        session_url,
        thread,
        trajectory,
    )
    from parity.training import (
        StackAddresses,
        StepResult,
        Trainer,
        TrainResult,
        TrainSettings,
        ValidationResult,
        train,
    )
    from parity.training.run_control import RunEnded
    from parity.user_data import Deletion, delete_user_data

# Imported on first use: the services live under `parity.services`, and importing
# the openai client there for nothing cost 0.8 s at start and a heap every garbage
# collection had to walk.
_EXPORTS = {
    "get_async_chat_client": "parity.chat_client",
    "get_chat_client": "parity.chat_client",
    "RPCError": "parity.clients",
    "configure": "parity.config",
    "current_config": "parity.config",
    "FeedbackError": "parity.feedback",
    "FeedbackReceipt": "parity.feedback",
    "afeedback": "parity.feedback",
    "feedback": "parity.feedback",
    "FlushError": "parity.flushing",
    "aflush": "parity.flushing",
    "flush": "parity.flushing",
    "Promotion": "parity.promotion",
    "promote": "parity.promotion",
    "rollback": "parity.promotion",
    "areward": "parity.rewards",
    "reward": "parity.rewards",
    "SessionBudget": "parity.core.session_budget",
    "SessionRef": "parity.core.session_slug",
    "TrajectoryView": "parity.sessions",
    "current_session": "parity.sessions",
    "session": "parity.sessions",
    "thread": "parity.sessions",
    "session_url": "parity.sessions",
    "trajectory": "parity.sessions",
    "RunEnded": "parity.training.run_control",
    "StackAddresses": "parity.training.settings",
    "StepResult": "parity.training.result",
    "Trainer": "parity.training.trainer",
    "TrainResult": "parity.training.result",
    "TrainSettings": "parity.training.settings",
    "train": "parity.training.trainer",
    "ValidationResult": "parity.training.validation",
    "Deletion": "parity.user_data",
    "delete_user_data": "parity.user_data",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'parity' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "Deletion",
    "FeedbackError",
    "FeedbackReceipt",
    "FlushError",
    "Promotion",
    "RPCError",
    "RunEnded",
    "SessionBudget",
    "SessionRef",
    "StackAddresses",
    "StepResult",
    "TrainResult",
    "TrainSettings",
    "Trainer",
    "TrajectoryView",
    "ValidationResult",
    "afeedback",
    "aflush",
    "areward",
    "configure",
    "current_config",
    "current_session",
    "delete_user_data",
    "feedback",
    "flush",
    "get_async_chat_client",
    "get_chat_client",
    "promote",
    "reward",
    "rollback",
    "session",
    "session_url",
    "thread",
    "train",
    "trajectory",
]
