"""Which sessions, and whose, each step of a run trained on: the answer to "was this user's
data trained on, and into which model".

One line per step in `<work_dir>/runs/<run_id>/lineage.jsonl` (`{"step", "time",
"sessions": {session_id: end_user_id}}`), appended when the step is recorded. A lookup
reads these small files rather than every step's batch. They are the trainer's own
record, so they still answer after the sessions were deleted from the token store: a
model once trained on data keeps what it learned, and an operator must be able to say
which checkpoints did.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

from parity.api.trainer.v1 import trainer_service_pb2 as pb

LINEAGE_FILE = "lineage.jsonl"


def step_line(step: int, time: float, batch: pb.StepBatch) -> str:
    sessions = {sample.session_id: sample.end_user_id for sample in batch.samples}
    return json.dumps({"step": step, "time": time, "sessions": sessions}) + "\n"


def find(
    runs_root: Path, end_user_id: str, session_ids: Collection[str]
) -> list[pb.TrainedSessionsStep]:
    """Every recorded step that trained a sample of `end_user_id` or of `session_ids`, by
    run (oldest first, by the run's first recorded step) and step."""
    wanted = set(session_ids)
    found: list[tuple[float, int, pb.TrainedSessionsStep]] = []
    for path in runs_root.glob(f"*/{LINEAGE_FILE}"):
        run_start = None
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            run_start = entry["time"] if run_start is None else run_start
            matched = sorted(
                session for session, user in entry["sessions"].items()
                if session in wanted or (end_user_id and user == end_user_id)
            )  # fmt: skip
            if matched:
                step = pb.TrainedSessionsStep(
                    run_id=path.parent.name, step=entry["step"], session_ids=matched
                )
                step.train_time.FromNanoseconds(int(entry["time"] * 1e9))
                found.append((run_start, entry["step"], step))
    return [
        step for _, _, step in sorted(found, key=lambda item: (item[0], item[2].run_id, item[1]))
    ]
