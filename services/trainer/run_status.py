"""Where a run stands: its state, step and policy version, as the trainer and its history keep it."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from parity.services.trainer.run_settings import RunSettings


class RunState(enum.Enum):
    STARTING = "starting"
    WAITING_FOR_DATA = "waiting_for_data"
    TRAINING = "training"
    SYNCING = "syncing"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def active(self) -> bool:
        return self not in (RunState.COMPLETED, RunState.FAILED, RunState.STOPPED)


@dataclass
class RunStatus:
    run_id: str
    settings: RunSettings
    state: RunState = RunState.STARTING
    step: int = 0
    policy_version: int = 0
    error: str = ""
    start_time: float = field(default_factory=time.time)
    update_time: float = field(default_factory=time.time)
    plot_path: str = ""
    served_model: str = ""
    """The model name the run's agents ask for, when it is one of several at once (see `Run.served_model`)."""
