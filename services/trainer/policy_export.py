"""A checkpoint's policy as a Hugging Face model folder that vLLM and transformers load as they are.

A checkpoint holds the trained weights and their config but no tokenizer, and beside
them training state nobody serving the model wants (optimizer, engine shards,
metrics). The export takes the tokenizer, chat template and any other serving file
from the model the run started from, then the weights and config from the
checkpoint, and is written under a temporary name and renamed, so a reader never
sees half a model.

A LoRA run's checkpoint holds its adapter; the export is that adapter (what peft and
vLLM's `--lora-modules` load onto the base model) and, when asked, beside it in
`merged/` the base model with the adapter merged in, a model folder like a full run's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from parity.services.runtime.errors import InvalidArgument
from parity.services.trainer.checkpoints import CheckpointInfo
from parity.services.trainer.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, is_adapter

# What a checkpoint contributes: the trained weights and the config that describes them.
WEIGHT_PATTERNS = (
    "*.safetensors",
    "model.safetensors.index.json",
    "config.json",
    "generation_config.json",
)
# Never copied from the base model: its weights are the untrained ones.
BASE_SKIPPED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")
BASE_SKIPPED_NAMES = frozenset({"model.safetensors.index.json", "pytorch_model.bin.index.json"})


MERGED_DIR = "merged"


def export_policy(
    checkpoint: CheckpointInfo, output_dir: Path, merge_lora: bool
) -> tuple[Path, Path | None]:
    """Write the checkpoint's policy to `output_dir` (replacing it); returns its absolute path and the merged model's."""
    output_dir = output_dir.expanduser().resolve()
    if output_dir == checkpoint.path.resolve() or checkpoint.path.resolve() in output_dir.parents:
        raise InvalidArgument(
            f"output_dir {output_dir} must not be inside the checkpoint it exports"
        )
    lora = is_adapter(checkpoint.path)
    if merge_lora and not lora:
        raise InvalidArgument(
            f"merge_lora: checkpoint {checkpoint.checkpoint_id} trained the whole model; it has no adapter"
        )
    weights = [path for pattern in WEIGHT_PATTERNS for path in checkpoint.path.glob(pattern)]
    if not any(path.suffix == ".safetensors" for path in weights):
        raise InvalidArgument(f"checkpoint {checkpoint.checkpoint_id} holds no safetensors weights")
    staging = output_dir.with_name(output_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if lora:
        for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
            shutil.copy2(checkpoint.path / name, staging / name)
        if merge_lora:
            _write_merged(checkpoint, staging / MERGED_DIR)
    else:
        _copy_serving_files(checkpoint.settings.model_path, staging)
        for path in weights:
            shutil.copy2(path, staging / path.name)
    if output_dir.exists():
        shutil.rmtree(output_dir)
    staging.rename(output_dir)
    return output_dir, (output_dir / MERGED_DIR if merge_lora else None)


def _copy_serving_files(base: Path, directory: Path) -> None:
    """The tokenizer, chat template and the like from the model the run started from; never its weights."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in sorted(base.iterdir()) if base.is_dir() else []:
        if (
            path.is_file()
            and path.name not in BASE_SKIPPED_NAMES
            and not path.name.endswith(BASE_SKIPPED_SUFFIXES)
        ):
            shutil.copy2(path, directory / path.name)


def _write_merged(checkpoint: CheckpointInfo, directory: Path) -> None:
    """The base model with the checkpoint's adapter folded into its weights (W + scale * B A)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(checkpoint.settings.model_path, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, checkpoint.path).merge_and_unload()
    _copy_serving_files(checkpoint.settings.model_path, directory)
    merged.save_pretrained(directory, safe_serialization=True)
