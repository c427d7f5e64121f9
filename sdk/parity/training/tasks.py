"""Task datasets: JSONL, Parquet or a local Hugging Face `datasets` folder, one task dict a row.

Every row must be an object with a non-empty, unique `id` (a string or an integer):
the id names the task's group of rollouts, its sessions and its validation results.
A bad row is refused before anything starts, with the file and row (the line, in a
JSONL file).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

TASK_ID_KEY = "id"
# Filled in by the trainer for every rollout; a row may not set them itself.
RESERVED_KEYS = ("model", "max_tokens", "temperature")


class TaskFileError(ValueError):
    """A tasks file that cannot be read, or a row that is not a usable task."""


def load_tasks(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        raise TaskFileError(f"{path}: no such file or folder")
    if path.is_dir():
        rows = _read_datasets_folder(path)
    elif path.suffix == ".jsonl":
        rows = _read_jsonl(path)
    elif path.suffix == ".parquet":
        rows = _read_parquet(path)
    else:
        raise TaskFileError(
            f"{path}: tasks are a .jsonl or .parquet file or a Hugging Face datasets folder"
        )
    return check_tasks(rows, str(path))


def check_tasks(rows: Iterable[tuple[str, Any]], source: str) -> list[dict[str, Any]]:
    """`rows` are (where, row) pairs; where is "line 3" or "row 3". Returns the tasks."""
    tasks: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for where, row in rows:
        if not isinstance(row, Mapping):
            raise TaskFileError(f"{source}:{where}: a task is an object, got {type(row).__name__}")
        task_id = row.get(TASK_ID_KEY)
        if isinstance(task_id, bool) or not isinstance(task_id, str | int) or task_id == "":
            raise TaskFileError(
                f"{source}:{where}: every task needs a non-empty string or integer {TASK_ID_KEY!r}"
            )
        reserved = [key for key in RESERVED_KEYS if key in row]
        if reserved:
            raise TaskFileError(
                f"{source}:{where}: {', '.join(map(repr, reserved))} are set by the trainer; rename them"
            )
        key = str(task_id)
        if key in seen:
            raise TaskFileError(f"{source}:{where}: task id {key!r} is also the id of {seen[key]}")
        seen[key] = where
        tasks.append({**row, TASK_ID_KEY: key})
    if not tasks:
        raise TaskFileError(f"{source}: holds no tasks")
    return tasks


def tasks_from_objects(
    tasks: Iterable[Mapping[str, Any]], source: str = "tasks"
) -> list[dict[str, Any]]:
    """Tasks handed to parity.train() as Python objects, checked like a file's rows."""
    return check_tasks(((f"[{index}]", task) for index, task in enumerate(tasks)), source)


def _read_jsonl(path: Path) -> list[tuple[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rows.append((f"{number}", json.loads(line)))
            except json.JSONDecodeError as error:
                raise TaskFileError(
                    f"{path}:{number}: not valid JSON ({error.msg} at column {error.colno})"
                ) from None
    return rows


def _read_parquet(path: Path) -> list[tuple[str, Any]]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise TaskFileError(
            f"{path}: reading Parquet needs pyarrow: pip install 'parity[train]'"
        ) from None
    try:
        table = parquet.read_table(path)
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise TaskFileError(f"{path}: not a readable Parquet file ({error})") from None
    return [(f"row {index + 1}", _plain(row)) for index, row in enumerate(table.to_pylist())]


def _read_datasets_folder(path: Path) -> list[tuple[str, Any]]:
    try:
        import datasets
    except ImportError:
        raise TaskFileError(
            f"{path}: reading a datasets folder needs datasets: pip install 'parity[train]'"
        ) from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as error:  # noqa: BLE001 - datasets raises several types for a folder it cannot read
        raise TaskFileError(
            f"{path}: not a Hugging Face datasets folder saved with save_to_disk ({error})"
        ) from None
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded and len(loaded) != 1:
            raise TaskFileError(
                f"{path}: holds splits {sorted(loaded)}; point at one split's folder"
            )
        loaded = loaded["train"] if "train" in loaded else next(iter(loaded.values()))
    return [(f"row {index + 1}", _plain(row)) for index, row in enumerate(loaded)]


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """NaN from a columnar file is a missing value, not a number the agent should see."""
    return {
        key: None if isinstance(value, float) and math.isnan(value) else value
        for key, value in row.items()
    }
