"""The last policy version an ingest was given, kept on disk beside its spool.

A restarted ingest must not stamp calls with a version older than the weights the
replicas serve: it starts from the version it last recorded (or a higher one from its
peers or its flags), never from 0 mid-run. One row in the spool's SQLite file, written
with synchronous=FULL like the spool itself, and one more per run's route
(upstream/policy_routes.py), so a run's calls keep their own version too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import apsw


@dataclass(frozen=True)
class RecordedPolicy:
    version: int = 0
    model: str = ""
    adapter: str = ""


@dataclass(frozen=True)
class RecordedRoute:
    model: str
    adapter: str
    version: int


class PolicyRecord:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = apsw.Connection(str(path))
        self._db.set_busy_timeout(10_000)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS policy (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL,"
            " model TEXT NOT NULL, adapter TEXT NOT NULL)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS policy_route (model TEXT PRIMARY KEY, adapter TEXT NOT NULL,"
            " version INTEGER NOT NULL)"
        )

    def load(self) -> RecordedPolicy:
        rows = self._db.execute("SELECT version, model, adapter FROM policy").fetchall()
        if not rows:
            return RecordedPolicy()
        version, model, adapter = rows[0]
        # The table's columns are NOT NULL INTEGER, TEXT, TEXT.
        assert isinstance(version, int) and isinstance(model, str) and isinstance(adapter, str), (
            rows[0]
        )
        return RecordedPolicy(version, model, adapter)

    def save(self, policy: RecordedPolicy) -> None:
        self._db.execute(
            "INSERT INTO policy (id, version, model, adapter) VALUES (1, ?, ?, ?) ON CONFLICT (id) DO UPDATE"
            " SET version = excluded.version, model = excluded.model, adapter = excluded.adapter",
            (policy.version, policy.model, policy.adapter),
        )

    def load_routes(self) -> list[RecordedRoute]:
        routes = []
        for model, adapter, version in self._db.execute(
            "SELECT model, adapter, version FROM policy_route ORDER BY model"
        ):
            # The table's columns are TEXT PRIMARY KEY, NOT NULL TEXT, INTEGER.
            assert isinstance(model, str) and isinstance(adapter, str) and isinstance(version, int)
            routes.append(RecordedRoute(model, adapter, version))
        return routes

    def save_route(self, route: RecordedRoute) -> None:
        self._db.execute(
            "INSERT INTO policy_route (model, adapter, version) VALUES (?, ?, ?) ON CONFLICT (model) DO UPDATE"
            " SET adapter = excluded.adapter, version = excluded.version",
            (route.model, route.adapter, route.version),
        )

    def close(self) -> None:
        self._db.close()
