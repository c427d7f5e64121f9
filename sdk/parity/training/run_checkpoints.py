"""A run's checkpoints as `parity train` finds them: the one to resume from, the newest, and
the folder the model is exported to beside them.

Embedded, the stack's trainer keeps a run's checkpoints in the run folder
(RUN_DIR/checkpoints); a deployed trainer keeps them in its own work dir, where only it
can list them.
"""

from __future__ import annotations

import json
from pathlib import Path

from parity.api.trainer.v1 import run_pb2
from parity.clients import RPCError
from parity.training.run_control import RunControl
from parity.training.settings import SettingsError

CHECKPOINTS_DIR = "checkpoints"
MODEL_DIR = "model"


def resume_checkpoint(
    control: RunControl, run_dir: Path, run_id: str, embedded: bool
) -> run_pb2.Checkpoint:
    """The newest checkpoint of `run_id`, which a resumed run starts from."""
    if not embedded:
        latest = control.latest_checkpoint()
        found = [latest] if latest is not None else []
    else:
        # The embedded trainer started with no run, so it looks under its own work dir; ask for the run's folder.
        found = _local_checkpoints(run_dir / CHECKPOINTS_DIR, run_id)
    if not found:
        raise SettingsError("resume", f"run {run_id} has no checkpoint to resume from")
    return found[0]


def latest_checkpoint_id(control: RunControl | None) -> str:
    """The run's newest checkpoint, or "" when there is none or the trainer cannot say."""
    if control is None:
        return ""
    try:
        latest = control.latest_checkpoint()
    except RPCError:
        return ""
    return latest.checkpoint_id if latest is not None else ""


def default_export_dir(control: RunControl, run_dir: Path, embedded: bool) -> str:
    if embedded:
        return str(run_dir / MODEL_DIR)
    # A deployed trainer writes on its own machine, beside the run's checkpoints.
    latest = control.latest_checkpoint()
    return str(Path(latest.path).parent / MODEL_DIR) if latest is not None else ""


def _local_checkpoints(root: Path, run_id: str) -> list[run_pb2.Checkpoint]:
    found = []
    for manifest in (root / run_id).glob("step-*/checkpoint.json"):
        data = json.loads(manifest.read_text())
        found.append(run_pb2.Checkpoint(checkpoint_id=f"{run_id}/{manifest.parent.name}", run_id=run_id,
                                        step=data["step"], path=str(manifest.parent)))  # fmt: skip
    return sorted(found, key=lambda c: c.step, reverse=True)
