"""Run ids: each names a folder of checkpoints and of history, so it is kept to what every file system takes."""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

from parity.services.runtime.errors import AlreadyExists, InvalidArgument
from parity.services.trainer import checkpoints

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_run_id(text: str) -> bool:
    return RUN_ID.fullmatch(text) is not None


def new_run_id(checkpoint_dir: Path, requested: str) -> str:
    """The requested id, refused if malformed or taken by checkpoints; a fresh timestamped one if none is asked for."""
    if not requested:
        return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    if not is_run_id(requested):
        raise InvalidArgument(
            f"run_id {requested!r} must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if checkpoints.list_checkpoints(checkpoint_dir, requested):
        raise AlreadyExists(
            f"run {requested!r} has checkpoints under {checkpoint_dir}; resume it instead"
        )
    return requested
