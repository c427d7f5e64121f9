"""One frozen copy of a base model, shared by the LoRA runs a trainer trains at once.

peft holds several adapters on one model by name; only the active one computes and takes
gradients. Each run's backend activates its own adapter for whatever it does, with the
base's lock held: `FairLock` hands the base to waiting runs in the order they asked, so no
run starves another. Memory is one base plus, per run, an adapter and its optimizer state
(a few MB at rank 8 on a 135M model), instead of a base per run.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from parity.services.trainer.fair_lock import FairLock

if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel


class SharedBase:
    def __init__(self, model_path: Path) -> None:
        self.model_path = model_path
        self.lock = FairLock()
        self._model: PeftModel | None = None
        self._reference: PreTrainedModel | None = None
        # peft keys adapters in module dicts, whose keys cannot hold the '.' a run id may: names of its own.
        self._names = (f"run{n}" for n in itertools.count(1))
        # The adapters of runs not yet closed; peft may keep a closed one, as it keeps one active.
        self._live: set[str] = set()

    @property
    def model(self) -> PeftModel:
        assert self._model is not None, "no adapter has been added"
        return self._model

    @property
    def shared(self) -> bool:
        """Whether more than one run's adapter is on the base: its runs take turns."""
        return len(self._live) > 1

    def add_adapter(self, config: LoraConfig) -> str:
        """A new adapter on the base, initialised as peft does; returns its name. Call with the lock held."""
        name = next(self._names)
        if self._model is None:
            from peft import get_peft_model

            base = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
            self._model = get_peft_model(base, config, adapter_name=name)
        else:
            self._model.add_adapter(name, config)
        self._live.add(name)
        return name

    def activate(self, name: str) -> None:
        """Make `name` the adapter that computes and takes gradients; call with the lock held."""
        if self.model.active_adapter != name:
            self.model.set_adapter(name)

    def parameters_of(self, name: str) -> list[torch.nn.Parameter]:
        marker = f".{name}."
        return [param for path, param in self.model.named_parameters() if marker in path]

    def remove_adapter(self, name: str) -> None:
        """Free a run's adapter; call with the lock held. peft keeps one adapter active, so the last one stays
        until the base itself goes."""
        self._live.discard(name)
        if name in self.model.peft_config and len(self.model.peft_config) > 1:
            if self.model.active_adapter == name:
                self.model.set_adapter(next(n for n in self.model.peft_config if n != name))
            self.model.delete_adapter(name)

    def reference(self) -> PreTrainedModel:
        """The base without any adapter, for runs with a KL penalty: loaded once, shared by them all."""
        if self._reference is None:
            self._reference = (
                AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
                .eval()
                .requires_grad_(False)
            )
        return self._reference
