"""A training run's settings: the domain side of `RunConfig`, validated once, at StartRun.

Every update setting, its default and its range come from `parity.core.update_settings`, the
definition `parity train` shares; this adds what only the trainer knows: the model's
folder, the step budget, where checkpoints go, and the values `auto` and unset resolve
to on this machine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parity.api.trainer.v1 import run_pb2
from parity.core.model_defaults import folder_learning_rate
from parity.core.settings_fields import SettingsError
from parity.core.update_settings import (
    UpdateSettings,
    from_run_config,
    is_url,
    proto_path,
    to_run_config,
)
from parity.services.runtime.errors import InvalidArgument
from parity.services.trainer.compute_defaults import resolve_dtype


@dataclass(frozen=True)
class RunSettings(UpdateSettings):
    model_path: Path = field(metadata={"help": "Hugging Face model directory to train"})
    total_steps: int = field(metadata={"help": "update steps of the run"})
    checkpoint_dir: Path = field(
        default=Path("checkpoints"), kw_only=True, metadata={"help": "where checkpoints go"}
    )
    dtype_auto: bool = field(
        # Where the dtype came from, not a setting of its own: the proto carries the resolved dtype only.
        default=False, kw_only=True, compare=False,
        metadata={"help": "dtype was auto: the run computes in what its replicas serve (run_dtype.py)"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
            if self.total_steps < 1:
                raise SettingsError("total_steps", f"must be at least 1, got {self.total_steps}")
            if self.teacher and not all(map(is_url, self.teacher_urls)):
                raise SettingsError(
                    "teacher",
                    f"must be the http(s) URL of the teacher's server, got {self.teacher!r}",
                )
        except SettingsError as error:
            raise InvalidArgument(f"{proto_path(error.key)}: {error.message}") from None
        if self.dtype == "auto":
            object.__setattr__(self, "dtype_auto", True)
        # Resolved here too, for a trainer whose replicas cannot be asked; the run loop then takes theirs.
        object.__setattr__(self, "dtype", resolve_dtype(self.dtype))
        if self.learning_rate is None:
            object.__setattr__(self, "learning_rate", folder_learning_rate(self.model_path))
        if self.lora_rank and not self.lora_alpha:
            object.__setattr__(self, "lora_alpha", 2 * self.lora_rank)

    @property
    def lr(self) -> float:
        """The learning rate, resolved: never None once the settings exist."""
        assert self.learning_rate is not None
        return self.learning_rate

    @classmethod
    def from_proto(
        cls, config: run_pb2.RunConfig, default_checkpoint_dir: Path = Path("checkpoints")
    ) -> RunSettings:
        if not config.model_path:
            raise InvalidArgument("model_path is required")
        try:
            values = from_run_config(config)
        except SettingsError as error:
            raise InvalidArgument(f"{error.key}: {error.message}") from None
        return cls(
            model_path=Path(config.model_path),
            total_steps=config.total_steps,
            checkpoint_dir=Path(config.checkpoint_dir)
            if config.checkpoint_dir
            else default_checkpoint_dir,
            **values,
        )

    def to_proto(self) -> run_pb2.RunConfig:
        return to_run_config(
            self,
            model_path=str(self.model_path),
            total_steps=self.total_steps,
            checkpoint_dir=str(self.checkpoint_dir),
        )

    def to_json(self) -> dict[str, object]:
        return {
            k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(self).items()
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSettings:
        values = dict(data)
        values["model_path"] = Path(str(values["model_path"]))
        values["checkpoint_dir"] = Path(str(values["checkpoint_dir"]))
        # Checkpoints written before these settings took their present form.
        values.setdefault("dtype", "float32")
        if isinstance(values.get("lora_target_modules"), list):
            values["lora_target_modules"] = ",".join(values["lora_target_modules"])
        return cls(**values)
