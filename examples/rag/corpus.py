"""The RAG example's knowledge: a generated gazetteer of towns that exist nowhere else, searched
with SQLite's FTS5 full-text index (through APSW, a dependency Parity already has).

No model has read these towns, so a right answer comes only from what the search returns.
Generated from a seed, so every machine builds the same corpus with nothing to download.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

import apsw

SEED = 7
TOWNS = 240
_FIRST = ["Vel", "Kor", "Ask", "Bryn", "Dal", "Essen", "Fal", "Gor", "Hal", "Ister", "Jor", "Kel", "Lun", "Mor",
          "Nor", "Orv", "Pel", "Quen", "Ros", "Sil", "Tam", "Ul", "Var", "Wen"]  # fmt: skip
_LAST = ["mora", "dale", "holm", "wick", "ford", "stead", "mere", "garth", "by", "ton"]
_RIVERS = ["Orrel", "Tamsin", "Brede", "Lisk", "Ouse", "Fenn", "Carrow", "Ymel"]
_TERM = re.compile(r"[A-Za-z0-9]+")
# At most this many of a query's words are searched: a sampled reply can be long.
MAX_TERMS = 8


@dataclass(frozen=True)
class Town:
    name: str
    founded: int
    population: int
    river: str

    @property
    def text(self) -> str:
        return (f"{self.name} is a town on the river {self.river}. It was founded in {self.founded} "
                f"and has {self.population} inhabitants.")  # fmt: skip


def towns(seed: int = SEED, count: int = TOWNS) -> list[Town]:
    rng = random.Random(seed)
    names = [first + last for first in _FIRST for last in _LAST]
    rng.shuffle(names)
    return [
        Town(name, rng.randint(1100, 1899), rng.randint(1200, 98000), rng.choice(_RIVERS))
        for name in names[:count]
    ]


class Library:
    """The corpus in an in-memory FTS5 index: `search` answers with the best-matching town's entry."""

    def __init__(self, entries: list[Town]) -> None:
        self._db = apsw.Connection(":memory:")
        self._db.execute("CREATE VIRTUAL TABLE entries USING fts5(name, text)")
        with self._db:
            self._db.executemany(
                "INSERT INTO entries VALUES (?, ?)", [(t.name, t.text) for t in entries]
            )

    def search(self, query: str) -> str:
        """The best entry for the query's words (BM25), or a line saying nothing matched. Any text is a valid
        query: its words are quoted, so FTS5's query syntax never sees the model's punctuation."""
        terms = _TERM.findall(query)[:MAX_TERMS]
        if not terms:
            return "No results: search for a town's name."
        match = " OR ".join(f'"{term}"' for term in terms)
        rows = list(
            self._db.execute(
                "SELECT text FROM entries WHERE entries MATCH ? ORDER BY bm25(entries) LIMIT 1",
                (match,),
            )
        )
        return rows[0][0] if rows else "No results."


@functools.cache
def library() -> Library:
    return Library(towns())
