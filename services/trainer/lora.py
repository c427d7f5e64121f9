"""LoRA runs: the adapter a run trains, checked against the model before anything starts.

A LoRA run freezes the model and trains a low-rank adapter on the modules it
targets, as peft builds it (the `cpu` backend through peft, `fsdp` through verl's
engine, which calls the same peft). What is pushed to the replicas, checkpointed and
exported is peft's adapter folder: `adapter_config.json` and
`adapter_model.safetensors`, which vLLM loads at run time and peft loads onto the
base model. Target modules follow peft's rule for a list of names: an entry matches
a module whose path is the entry or ends with "." and the entry. peft is imported where
an adapter is built: with transformers behind it, it would cost every trainer's start
several seconds of CPU.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from parity.core.update_settings import ALL_LINEAR
from parity.services.runtime.errors import InvalidArgument
from parity.services.trainer.run_settings import RunSettings

if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# What peft can wrap in an adapter among the layers of a language model.
_ADAPTABLE = (torch.nn.Linear, torch.nn.Embedding)


def peft_targets(settings: RunSettings) -> str | list[str]:
    """`target_modules` as peft (and verl) take it: the shorthand as a string, names as a list."""
    modules = list(settings.lora_modules)
    return ALL_LINEAR if modules == [ALL_LINEAR] else modules


def lora_config(settings: RunSettings) -> LoraConfig:
    from peft import LoraConfig

    return LoraConfig(
        task_type="CAUSAL_LM", r=settings.lora_rank, lora_alpha=settings.lora_alpha,
        target_modules=peft_targets(settings), lora_dropout=settings.lora_dropout, bias="none",
    )  # fmt: skip


def check_target_modules(settings: RunSettings) -> None:
    """Refuse target modules that match no adaptable layer of the model: a typo would train less than asked."""
    targets = peft_targets(settings)
    if targets == ALL_LINEAR:
        return
    from transformers import AutoConfig, AutoModelForCausalLM

    # On the meta device: the module tree without allocating a single weight.
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(settings.model_path))
    layers = [name for name, module in model.named_modules() if isinstance(module, _ADAPTABLE)]
    unmatched = [
        t for t in targets if not any(name == t or name.endswith(f".{t}") for name in layers)
    ]
    if unmatched:
        known = sorted({name.rsplit(".", 1)[-1] for name in layers})
        raise InvalidArgument(
            f"lora.target_modules {unmatched} match no layer of the model at {settings.model_path}; "
            f"its linear and embedding layers are named {known} (or use {ALL_LINEAR!r})"
        )


def check_run(settings: RunSettings, backend: str) -> None:
    """Refuse a LoRA config the model or the backend (`cpu` or `fsdp`) cannot train, before anything starts."""
    check_target_modules(settings)
    if backend == "fsdp" and settings.lora_dropout:
        raise InvalidArgument(
            f"lora.dropout {settings.lora_dropout:g}: verl's FSDP engine builds its adapters without dropout; "
            "use dropout 0, or the cpu backend"
        )


def save_adapter(model: PeftModel, name: str, directory: Path) -> None:
    """Write adapter `name` of a model holding several as peft's folder for one adapter, as vLLM loads it
    (peft's own `save_pretrained` puts any adapter but "default" in a subfolder of its name)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = get_peft_model_state_dict(model, adapter_name=name)
    save_file({key: tensor.contiguous() for key, tensor in state.items()}, directory / ADAPTER_WEIGHTS,
              metadata={"format": "pt"})  # fmt: skip
    config = copy.copy(model.peft_config[name])
    config.inference_mode = True
    config.save_pretrained(str(directory))


def run_model_name(base_model: str, run_id: str) -> str:
    """The name a run's adapter is served under, when several runs train at once: agents ask for it."""
    return f"{base_model}-{run_id}"


def adapter_name(policy_model: str) -> str:
    """The name every replica serves the run's adapter under, beside the base model agents ask for."""
    return f"{policy_model}-lora"


def is_adapter(directory: Path) -> bool:
    return (directory / ADAPTER_CONFIG).exists()
