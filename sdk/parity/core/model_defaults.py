"""What a run trains a model with when it does not say: the learning rate and max_tokens that suit the model.

The one place these defaults are decided. `parity train` settles them before a run starts
(`parity.training.model_choice`), from the model's name or its folder; the trainer applies the
same rule to a RunConfig that leaves the learning rate unset, from the folder alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "smollm2-135m-instruct"
"""What `parity train` and `parity up` train and serve when no model is named."""
TEST_MODEL = "tiny-test"
"""The generated test model (services/inference/tiny_model.py)."""
TEST_MODEL_MARKER = "parity-test-model.json"
"""Written into every generated test model, so a folder of one gets the test model's defaults too."""
DEFAULT_MAX_TOKENS = 256
"""max_tokens for a model that names none of its own."""
# A deployed trainer's model folder may not exist here to be measured: the rate for models of a few billion parameters.
UNSEEN_MODEL_LEARNING_RATE = 1e-6


@dataclass(frozen=True)
class ModelDefaults:
    learning_rate: float
    """What learns on this model with `parity train`'s other defaults (full fine-tuning, AdamW)."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    """`parity train`'s default max_tokens: longer replies of a small model ramble, at CPU time's cost."""
    suite_learning_rate: float | None = None
    """For generated task suites (`tasks = "reasoning-gym:NAME"`), whose replies are scored right or wrong, so
    that most of an untrained model's groups teach nothing; None: learning_rate."""


KNOWN_MODELS = {
    # 4e-5 for right-or-wrong rewards: the strict math agent went 0.03 -> 0.56 held-out in 6 steps at 4e-5, 0.05 ->
    # 0.27 at 1e-5 (docs/training.md, distillation where the reward is sparse).
    DEFAULT_MODEL: ModelDefaults(learning_rate=1e-5, max_tokens=64, suite_learning_rate=4e-5),
    # The generated model is random: it learns only at rates that would wreck a real model.
    TEST_MODEL: ModelDefaults(learning_rate=1e-3),
}
"""Every model `--model` takes by name (`parity model list`)."""


def learning_rate(model: str, folder: Path, suite: bool = False) -> float:
    """`parity train`'s learning rate when none is set: the named model's (empty: the default model's; for a
    generated task suite its suite_learning_rate, when it has one), else the folder's (`folder_learning_rate`),
    else, for a folder not on this machine, UNSEEN_MODEL_LEARNING_RATE."""
    known = KNOWN_MODELS.get(model or DEFAULT_MODEL)
    if known is not None:
        return (suite and known.suite_learning_rate) or known.learning_rate
    if not folder.is_dir():
        return UNSEEN_MODEL_LEARNING_RATE
    return folder_learning_rate(folder)


def folder_learning_rate(folder: Path) -> float:
    """The learning rate for a model known only by its folder: the test model's, else one by its size."""
    if (folder / TEST_MODEL_MARKER).is_file():
        return KNOWN_MODELS[TEST_MODEL].learning_rate
    return learning_rate_for_size(parameter_count(folder))


def max_tokens(model: str) -> int:
    """`parity train`'s max_tokens when none is set: the named model's (empty: the default model's), else the general default."""
    known = KNOWN_MODELS.get(model or DEFAULT_MODEL)
    return known.max_tokens if known is not None else DEFAULT_MAX_TOKENS


def learning_rate_for_size(parameters: int) -> float:
    """Full fine-tuning rates that RL recipes use at each size: smaller models take larger steps."""
    if parameters <= 300_000_000:
        return 1e-5
    if parameters <= 3_000_000_000:
        return 1e-6
    return 5e-7


def parameter_count(folder: Path) -> int:
    """Weights in the folder's safetensors files, read from their headers (nothing is loaded)."""
    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as file:
            header_size = int.from_bytes(file.read(8), "little")
            header = json.loads(file.read(header_size))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dimension in entry["shape"]:
                    count *= dimension
                total += count
    return total
