"""Writes tasks.jsonl and val_tasks.jsonl: `python -m examples.calculator.make_tasks`.

Seeded, so the files are reproducible. Validation tasks use numbers no training task
uses, in the same wordings: a held-out gain means the policy learned to use the tool,
not the answers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDINGS = [
    ("What is {a} * {b}?", lambda a, b, c: a * b),
    ("What is {a} times {b}?", lambda a, b, c: a * b),
    ("Multiply {a} by {b}.", lambda a, b, c: a * b),
    ("What is the product of {a} and {b}?", lambda a, b, c: a * b),
    ("A box holds {a} pens. How many pens are in {b} boxes?", lambda a, b, c: a * b),
    ("Compute {a} x {b}.", lambda a, b, c: a * b),
    ("What is {a} plus {b} plus {c}?", lambda a, b, c: a + b + c),
    ("What is {a} * {b} + {c}?", lambda a, b, c: a * b + c),
]
HERE = Path(__file__).parent


def tasks(
    prefix: str, per_wording: int, rng: random.Random, taken: set[tuple[int, int, int]]
) -> list[dict]:
    rows = []
    for wording, (text, answer) in enumerate(WORDINGS):
        for n in range(per_wording):
            while (
                numbers := (rng.randint(11, 99), rng.randint(11, 99), rng.randint(11, 99))
            ) in taken:
                pass
            taken.add(numbers)
            a, b, c = numbers
            rows.append(
                {
                    "id": f"{prefix}-{wording}-{n}",
                    "question": text.format(a=a, b=b, c=c),
                    "answer": str(answer(a, b, c)),
                }
            )
    return rows


def main() -> None:
    rng, taken = random.Random(0), set[tuple[int, int, int]]()
    for name, prefix, per_wording in (("tasks.jsonl", "calc", 16), ("val_tasks.jsonl", "val", 4)):
        rows = tasks(prefix, per_wording, rng, taken)
        (HERE / name).write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    main()
