"""Task files: every format gives the same task dicts, and every bad row is named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parity.training.tasks import TaskFileError, load_tasks, tasks_from_objects

ROWS: list[dict[str, Any]] = [
    {"id": "t1", "question": "1+1", "answer": "2"},
    {"id": 7, "question": "2+2", "answer": "4"},
]
EXPECTED = [
    {"id": "t1", "question": "1+1", "answer": "2"},
    {"id": "7", "question": "2+2", "answer": "4"},
]


def test_jsonl_parquet_and_a_datasets_folder_load_the_same_tasks(tmp_path) -> None:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = tmp_path / "tasks.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in ROWS) + "\n")
    parquet = tmp_path / "tasks.parquet"
    string_ids = [{**row, "id": str(row["id"])} for row in ROWS]
    pq.write_table(pa.Table.from_pylist(string_ids), parquet)
    folder = tmp_path / "dataset"
    datasets.Dataset.from_list(string_ids).save_to_disk(str(folder))
    assert load_tasks(jsonl) == EXPECTED
    assert load_tasks(parquet) == EXPECTED
    assert load_tasks(folder) == EXPECTED


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ('{"id": "a"}\nnot json\n', r"tasks\.jsonl:2: not valid JSON"),
        ('{"id": "a"}\n["a list"]\n', r"tasks\.jsonl:2: a task is an object, got list"),
        ('{"id": "a"}\n{"id": ""}\n', r"tasks\.jsonl:2: every task needs a non-empty"),
        ('{"id": "a"}\n\n{"id": "a"}\n', r"tasks\.jsonl:3: task id 'a' is also the id of 1"),
        ('{"id": "a", "model": "x"}\n', r"tasks\.jsonl:1: 'model' are set by the trainer"),
        ("\n", r"tasks\.jsonl: holds no tasks"),
    ],
)
def test_a_bad_row_is_named_by_file_and_line(tmp_path, lines: str, message: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(lines)
    with pytest.raises(TaskFileError, match=message):
        load_tasks(path)


def test_unknown_formats_and_missing_files_are_refused(tmp_path) -> None:
    with pytest.raises(TaskFileError, match="no such file"):
        load_tasks(tmp_path / "nope.jsonl")
    csv = tmp_path / "tasks.csv"
    csv.write_text("id\n1\n")
    with pytest.raises(TaskFileError, match=r"\.jsonl or \.parquet file"):
        load_tasks(csv)


def test_task_objects_are_checked_like_rows() -> None:
    assert tasks_from_objects(ROWS) == EXPECTED
    with pytest.raises(TaskFileError, match=r"tasks:\[1\]: every task needs"):
        tasks_from_objects([{"id": "a"}, {"question": "?"}])
