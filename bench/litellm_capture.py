"""The baseline's capture: a LiteLLM callback that stores each call, as peer projects do.

Loaded by the LiteLLM proxy in bench/ingest.py (`litellm_settings.callbacks`). It
keeps one JSON row per call in SQLite, the layout the store benchmark compares with.
"""

from __future__ import annotations

import json
import os

import apsw
from litellm.integrations.custom_logger import CustomLogger


class CaptureLogger(CustomLogger):
    def __init__(self) -> None:
        super().__init__()
        self.db = apsw.Connection(os.environ.get("BENCH_CAPTURE_DB", "litellm-capture.db"))
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS traces (id TEXT, data TEXT)")

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        row = {"messages": kwargs.get("messages"), "response": response_obj.model_dump(mode="json")}
        with self.db:
            self.db.execute("INSERT INTO traces VALUES (?, ?)", (response_obj.id, json.dumps(row)))


capture_logger = CaptureLogger()
