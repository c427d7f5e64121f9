"""A checkpoint's policy as a Hugging Face model folder that vLLM and transformers load as they are.

A checkpoint holds the trained weights and their config but no tokenizer, and beside
them training state nobody serving the model wants (optimizer, engine shards,
metrics). The export takes the tokenizer, chat template and any other serving file
from the model the run started from, then the weights and config from the
checkpoint, and is written under a temporary name and renamed, so a reader never
sees half a model.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from parity.services.runtime.errors import InvalidArgument
from parity.services.trainer.checkpoints import CheckpointInfo

# What a checkpoint contributes: the trained weights and the config that describes them.
WEIGHT_PATTERNS = ("*.safetensors", "model.safetensors.index.json", "config.json", "generation_config.json")
# Never copied from the base model: its weights are the untrained ones.
BASE_SKIPPED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")
BASE_SKIPPED_NAMES = frozenset({"model.safetensors.index.json", "pytorch_model.bin.index.json"})


def export_policy(checkpoint: CheckpointInfo, output_dir: Path) -> Path:
    """Write the checkpoint's policy to `output_dir` (replacing it) and return its absolute path."""
    output_dir = output_dir.expanduser().resolve()
    if output_dir == checkpoint.path.resolve() or checkpoint.path.resolve() in output_dir.parents:
        raise InvalidArgument(f"output_dir {output_dir} must not be inside the checkpoint it exports")
    weights = [path for pattern in WEIGHT_PATTERNS for path in checkpoint.path.glob(pattern)]
    if not any(path.suffix == ".safetensors" for path in weights):
        raise InvalidArgument(f"checkpoint {checkpoint.checkpoint_id} holds no safetensors weights")
    staging = output_dir.with_name(output_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    base = checkpoint.settings.model_path
    for path in sorted(base.iterdir()) if base.is_dir() else []:
        if path.is_file() and path.name not in BASE_SKIPPED_NAMES and not path.name.endswith(BASE_SKIPPED_SUFFIXES):
            shutil.copy2(path, staging / path.name)
    for path in weights:
        shutil.copy2(path, staging / path.name)
    if output_dir.exists():
        shutil.rmtree(output_dir)
    staging.rename(output_dir)
    return output_dir
