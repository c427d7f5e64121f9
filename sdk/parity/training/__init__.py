"""Training an agent: `parity.train()`, `parity.Trainer` and `parity train` share this package.

    import parity
    result = parity.train("my_agent:solve", "tasks.jsonl", steps=30)

See docs/training.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parity.training.result import StepResult, TrainResult
    from parity.training.settings import StackAddresses, TrainSettings
    from parity.training.trainer import Trainer, train
    from parity.training.validation import ValidationResult

# Imported on first use: a submodule (the CLI's flags, the settings) loads without the trainer and all it imports.
_EXPORTS = {
    "StepResult": "parity.training.result",
    "TrainResult": "parity.training.result",
    "StackAddresses": "parity.training.settings",
    "TrainSettings": "parity.training.settings",
    "Trainer": "parity.training.trainer",
    "train": "parity.training.trainer",
    "ValidationResult": "parity.training.validation",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'parity.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "StackAddresses",
    "StepResult",
    "TrainResult",
    "TrainSettings",
    "Trainer",
    "ValidationResult",
    "train",
]
