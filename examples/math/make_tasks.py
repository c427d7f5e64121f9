"""Writes tasks.jsonl and val_tasks.jsonl: `python -m examples.math.make_tasks`.

Two-digit additions: the default model (SmolLM2-135M-Instruct) gets about one in ten
right untrained. Seeded, so the files are reproducible; no validation question is a
training question.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
QUESTION = "What is {a} + {b}? Reply with the number only."


def main() -> None:
    rng = random.Random(0)
    pairs: list[tuple[int, int]] = []
    while len(pairs) < 80:
        pair = (rng.randint(10, 99), rng.randint(10, 99))
        if pair not in pairs:
            pairs.append(pair)
    for name, prefix, chosen in (
        ("tasks.jsonl", "add", pairs[:64]),
        ("val_tasks.jsonl", "val", pairs[64:]),
    ):
        rows = [
            {"id": f"{prefix}-{n:03d}", "question": QUESTION.format(a=a, b=b), "answer": str(a + b)}
            for n, (a, b) in enumerate(chosen)
        ]
        (HERE / name).write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    main()
