"""Which model a run trains, with the learning rate and max_tokens `parity.core.model_defaults` gives it when none is set.

A local run takes a model folder or a name (`parity model list`) and prepares a named
model before anything starts, so a missing package or an unusable folder ends the run
with the fix. A deployed stack's trainer reads the model from its own disk: the run
names that folder as the trainer's host sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parity.core import model_defaults
from parity.services.inference.gguf_import import ModelPreparationError
from parity.services.inference.packaged_models import is_model_name, resolve_model
from parity.training.settings import SettingsError, TrainSettings
from parity.training.suite_settings import is_suite
from parity.training.teacher_server import teacher_folder


@dataclass(frozen=True)
class ChosenModel:
    folder: Path
    """As the trainer sees it: prepared here for a local stack, the deployed trainer's own path otherwise."""
    learning_rate: float
    max_tokens: int
    teacher: Path | None = None
    """A distillation teacher the local stack serves (named or a folder), prepared here; None: none, or a URL."""


def choose_model(settings: TrainSettings) -> ChosenModel:
    if settings.stack is not None:
        if not settings.model or is_model_name(settings.model):
            raise SettingsError(
                "model", "with a deployed stack, name the model folder as the trainer's host sees it "
                "(`parity model prepare NAME` there prints a named model's folder)",
            )  # fmt: skip
        folder = Path(settings.model)
        return ChosenModel(folder, _learning_rate(settings, folder), _max_tokens(settings))
    try:
        folder = resolve_model(settings.model)
    except ModelPreparationError as error:
        raise SettingsError("model", str(error)) from None
    return ChosenModel(folder.resolve(), _learning_rate(settings, folder), _max_tokens(settings),
                       teacher_folder(settings.teacher))  # fmt: skip


def _learning_rate(settings: TrainSettings, folder: Path) -> float:
    suite = is_suite(settings.tasks)
    return settings.learning_rate or model_defaults.learning_rate(settings.model, folder, suite)


def _max_tokens(settings: TrainSettings) -> int:
    return settings.max_tokens or model_defaults.max_tokens(settings.model)
