"""Writes tasks.jsonl and val_tasks.jsonl: `python -m examples.rag.make_tasks`.

Each task asks one fact of one generated town. Validation towns are towns no training task
asks about, so a held-out gain means the policy learned to search and read, not the answers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from examples.rag.corpus import towns

QUESTIONS = [
    ("In what year was {name} founded?", "founded"),
    ("When was the town of {name} founded?", "founded"),
    ("How many people live in {name}?", "population"),
    ("What is the population of {name}?", "population"),
]
HERE = Path(__file__).parent
VALIDATION_TOWNS = 32


def main() -> None:
    rng = random.Random(0)
    entries = towns()
    rng.shuffle(entries)
    held_out, training = entries[:VALIDATION_TOWNS], entries[VALIDATION_TOWNS:]
    for path, chosen in (("tasks.jsonl", training), ("val_tasks.jsonl", held_out)):
        rows = []
        for town in chosen:
            text, field = QUESTIONS[rng.randrange(len(QUESTIONS))]
            rows.append({"id": f"{town.name.lower()}-{field}", "question": text.format(name=town.name),
                         "answer": str(getattr(town, field))})  # fmt: skip
        (HERE / path).write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    main()
