"""The pieces every typed settings object is made of: a field with its help text, and the error that names it.

The services' configs (flags and PARITY_* variables), `parity train`'s settings and the
trainer's run settings are dataclasses of these fields, so a flag's help, a TOML key's
reference row and an error message all come from the one definition.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any


class SettingsError(ValueError):
    """A setting that cannot be used; `key` names it, so the caller can say where it was set."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def setting(
    default: Any, help: str, choices: tuple[str, ...] | None = None, *, group: str = ""
) -> Any:
    """A settings field with the help text (and allowed values) its CLI, TOML reference and docs show."""
    return field(default=default, metadata={"help": help, "choices": choices, "group": group})
