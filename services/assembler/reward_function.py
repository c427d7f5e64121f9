"""A reward function named by import path, `package.module:function`.

It is called as `function(metadata, messages)`: the task metadata (the session's own
metadata, a dict of strings) and the final messages (OpenAI chat messages, the
agent's last reply included). It returns a number; it may be a coroutine function.
Plain functions run in a worker thread so a slow one does not stall the service.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

from parity.services.assembler.scoring import ScoringError
from parity.services.runtime.errors import InvalidArgument


class RewardFunction:
    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self.source = f"function:{path}"
        self.timeout_s = timeout_s
        self._function = load(path)

    async def score(self, metadata: dict[str, str], messages: list[dict[str, Any]]) -> float:
        try:
            if inspect.iscoroutinefunction(self._function):
                call = self._function(dict(metadata), messages)
            else:
                call = asyncio.to_thread(self._function, dict(metadata), messages)
            value = await asyncio.wait_for(call, self.timeout_s)
        except TimeoutError:
            raise ScoringError(
                "reward_function_error",
                f"reward function {self.path} took over {self.timeout_s:g} s",
            ) from None
        except Exception as error:  # noqa: BLE001 - user code; whatever it raises is its error
            raise ScoringError(
                "reward_function_error",
                f"reward function {self.path} raised {type(error).__name__}: {error}",
            ) from None
        return as_reward(value, f"reward function {self.path}", "reward_function_error")


def load(path: str) -> Callable[..., Any]:
    """The callable at `package.module:function`; InvalidArgument saying why it is not there."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise InvalidArgument(
            f"reward function must be given as package.module:function, got {path!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidArgument(
            f"reward function {path}: cannot import {module_name}: {error}"
        ) from None
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise InvalidArgument(f"reward function {path}: {module_name} has no {attribute}")
    if not callable(target):
        raise InvalidArgument(
            f"reward function {path} is a {type(target).__name__}, not a function"
        )
    return target


def as_reward(value: Any, who: str, kind: str) -> float:
    """`value` as a finite float; ScoringError when it is anything else (bools included)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ScoringError(kind, f"{who} returned {value!r} ({type(value).__name__}), not a number")
    result = float(value)
    if not math.isfinite(result):
        raise ScoringError(kind, f"{who} returned {result}, not a finite number")
    return result
