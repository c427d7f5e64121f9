"""Settings from a TOML file and from flags, merged, with every error naming where the value came from.

A key the settings do not have, a value of the wrong type or one out of range is
refused with the file, the line and the key (`train.toml:7: learning_rate: must be
greater than 0, got -1.0`), or with the flag that set it. Keys may be written
`rollouts_per_task` or `rollouts-per-task`. Input paths in a file (tasks, val_tasks,
model, unless it names a model or a task suite) are relative to the file, so a config works from any directory.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parity.services.inference.packaged_models import is_model_name
from parity.training.settings import (
    SettingsError,
    StackAddresses,
    TrainSettings,
    coerce,
    field_types,
    settings_fields,
)
from parity.training.suite_settings import is_suite

FILE_RELATIVE_KEYS = ("tasks", "val_tasks", "model")
# Keys whose setting now goes by the name the trainer's RunConfig gives it.
RENAMED_KEYS = {"mode": "rollout_mode"}
STACK_TABLE = "stack"


class ConfigError(ValueError):
    """Settings that cannot be used; the message says where they were set and why."""


@dataclass
class SettingsSources:
    """Where each setting came from, so an error can point at it."""

    file: Path | None = None
    file_text: str = ""
    flags: set[str] = field(default_factory=set)

    def where(self, key: str) -> str:
        top = key.split(".", 1)[0]
        if top in self.flags:
            return "--" + top.replace("_", "-")
        if self.file is not None:
            table, _, name = key.rpartition(".")
            line = key_line(self.file_text, table, name)
            if line is not None:
                return f"{self.file}:{line}: {key}"
        return key

    def error(self, error: SettingsError) -> ConfigError:
        return ConfigError(f"{self.where(error.key)}: {error.message}")


def load_file(path: Path) -> tuple[dict[str, Any], SettingsSources]:
    """The values of a TOML config, type-checked, with file-relative paths resolved."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror or error}") from None
    sources = SettingsSources(file=path, file_text=text)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    hints = field_types()
    known = {f.name for f in settings_fields()}
    values: dict[str, Any] = {}
    for raw_key, value in raw.items():
        key = raw_key.replace("-", "_")
        if key == STACK_TABLE:
            values[key] = _stack_table(value, sources)
            continue
        if key in RENAMED_KEYS:
            raise ConfigError(f"{_located(sources, '', raw_key)}: renamed {RENAMED_KEYS[key]!r}")
        if key not in known:
            raise ConfigError(
                f"{_located(sources, '', raw_key)}: unknown key{_suggestion(key, known)}"
            )
        try:
            value = coerce(key, value, hints[key])
        except SettingsError as error:
            raise ConfigError(f"{_located(sources, '', raw_key)}: {error.message}") from None
        # A model's name (`model = "tiny-test"`) is not a path, nor is a task suite's (`tasks = "reasoning-gym:NAME"`).
        named = (key == "model" and is_model_name(value)) or is_suite(value)
        if key in FILE_RELATIVE_KEYS and value and not named:
            value = str((path.parent / value).resolve()) if not Path(value).is_absolute() else value
        values[key] = value
    return values, sources


def build_settings(
    file_values: dict[str, Any], flag_values: dict[str, Any], sources: SettingsSources
) -> TrainSettings:
    """Flags over file values over defaults; errors name the flag or the file line."""
    sources.flags = set(flag_values)
    try:
        return TrainSettings(**(file_values | flag_values))
    except SettingsError as error:
        raise sources.error(error) from None


def key_line(text: str, table: str, key: str) -> int | None:
    """The 1-based line where `key` is set in `[table]` ('' for the top level)."""
    current = ""
    names = {key, key.replace("_", "-")}
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"\s*\[\s*([^\]]+?)\s*\]", line)
        if header:
            current = header.group(1).strip().strip("\"'")
            continue
        match = re.match(r"""\s*["']?([A-Za-z0-9_-]+)["']?\s*=""", line)
        if match and match.group(1) in names and current == table:
            return number
    return None


def _located(sources: SettingsSources, table: str, raw_key: str) -> str:
    line = key_line(sources.file_text, table, raw_key)
    name = f"{table}.{raw_key}" if table else raw_key
    return f"{sources.file}:{line}: {name}" if line is not None else f"{sources.file}: {name}"


def _suggestion(key: str, known: set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _stack_table(value: Any, sources: SettingsSources) -> StackAddresses:
    if not isinstance(value, dict):
        raise ConfigError(
            f"{_located(sources, '', STACK_TABLE)}: must be a table: [stack] with ingest_url, assembler, trainer"
        )
    known = {f.name for f in settings_fields(StackAddresses)}
    addresses: dict[str, str] = {}
    for raw_key, address in value.items():
        key = raw_key.replace("-", "_")
        key = "ingest_url" if key == "ingest" else key
        if key not in known:
            raise ConfigError(
                f"{_located(sources, STACK_TABLE, raw_key)}: unknown key{_suggestion(key, known)}"
            )
        if not isinstance(address, str):
            raise ConfigError(
                f"{_located(sources, STACK_TABLE, raw_key)}: must be a string, got {address!r}"
            )
        addresses[key] = address
    try:
        return StackAddresses(**addresses)
    except SettingsError as error:
        name = error.key.split(".", 1)[-1]
        raise ConfigError(f"{_located(sources, STACK_TABLE, name)}: {error.message}") from None
