"""What `parity train` takes to generate its tasks instead of reading them: `tasks = "reasoning-gym:NAME"`.

A task suite is named where a tasks file would be, by the generator's name after `reasoning-gym:`;
these settings say how to generate it: the generator's own settings, a seed, how many training
tasks and how many held-out ones. TrainSettings is made of these fields too: each is a flag, a
TOML key (`suite_options` also a `[suite_options]` table) and a keyword of `parity.train()`.
Nothing here imports reasoning-gym; `parity.training.reasoning_gym_tasks` generates the tasks.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any

from parity.core.settings_fields import SettingsError, setting

SUITE_PREFIX = "reasoning-gym:"


def is_suite(tasks: object) -> bool:
    """Whether a `tasks` setting names a generated suite rather than a file."""
    return isinstance(tasks, str) and tasks.startswith(SUITE_PREFIX)


def suite_name(tasks: str) -> str:
    return tasks[len(SUITE_PREFIX) :]


def parse_options(text: str, setting_name: str = "suite_options") -> dict[str, Any]:
    """`max_terms=3,operators=["+", "-"],format_style=natural`: KEY=VALUE pairs, each VALUE a TOML value
    (a number, true/false, a quoted string, an array), or else a bare string. A malformed pair is refused as
    `setting_name`'s error."""
    text = text.strip()
    if not text:
        return {}
    try:
        return tomllib.loads(f"options = {{ {text} }}")["options"]
    except tomllib.TOMLDecodeError:
        pass
    options: dict[str, Any] = {}
    for part in _top_level_parts(text):
        name, equals, value = part.partition("=")
        if not equals or not name.strip():
            raise SettingsError(setting_name, f"expected KEY=VALUE pairs, got {part.strip()!r}")
        options[name.strip()] = _value(value.strip())
    return options


def check_options(settings: object, key: str, what: str) -> None:
    """Settings' `key` as a table (KEY=VALUE pairs parsed), None when empty; refused unless it is a table of
    `what` with string keys."""
    options = getattr(settings, key)
    if isinstance(options, str):
        options = parse_options(options, key)
    if options is not None and not (
        isinstance(options, dict) and all(isinstance(name, str) for name in options)
    ):
        raise SettingsError(key, f"must be a table of {what}, got {options!r}")
    object.__setattr__(settings, key, options or None)


def check_sizes(settings: object, size: str, val_size: str) -> None:
    """How many tasks to train on (at least 1) and how many to hold out (0: none)."""
    for key, least in ((size, 1), (val_size, 0)):
        value = getattr(settings, key)
        if value < least:
            raise SettingsError(key, f"must be at least {least}, got {value}")


def _top_level_parts(text: str) -> list[str]:
    """`text` split at the commas outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part for part in parts if part.strip()]


def _value(text: str) -> Any:
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


# kw_only: TrainSettings' own fields keep their places as positional arguments.
@dataclass(frozen=True, kw_only=True)
class SuiteSettings:
    suite_options: dict[str, Any] | None = setting(
        None,
        "tasks = reasoning-gym:NAME: the generator's settings, as KEY=VALUE pairs (max_terms=3,max_digits=2) or a [suite_options] table, over the generator's defaults; none: the first (easiest) level of its reasoning-gym curriculum (basic_arithmetic: 2 terms of 1 digit), else its defaults",
        group="suite",
    )
    suite_size: int = setting(
        64, "tasks = reasoning-gym:NAME: how many training tasks to generate", group="suite"
    )
    suite_val_size: int = setting(
        32,
        "tasks = reasoning-gym:NAME: how many held-out tasks (none a training task's question) to generate and validate on when val_tasks is not set; 0: none",
        group="suite",
    )
    suite_seed: int = setting(
        0,
        "tasks = reasoning-gym:NAME: the generator's seed; the same name, settings, seed and sizes give the same tasks",
        group="suite",
    )

    def _check_suite(self, tasks: str, val_tasks: str) -> None:
        check_options(self, "suite_options", "the generator's settings")
        check_sizes(self, "suite_size", "suite_val_size")
        if is_suite(val_tasks):
            raise SettingsError(
                "val_tasks",
                "a reasoning-gym suite's held-out tasks come with tasks = reasoning-gym:NAME (suite_val_size); name a file here, or leave it out",
            )
        if is_suite(tasks):
            if not suite_name(tasks):
                raise SettingsError(
                    "tasks", "name the generator: reasoning-gym:NAME (basic_arithmetic)"
                )
        elif self.suite_options:
            raise SettingsError(
                "suite_options", "sets a generator's settings; it needs tasks = reasoning-gym:NAME"
            )
