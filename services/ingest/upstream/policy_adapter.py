"""Which LoRA adapter serves the policy: requests for the policy's model go to it.

A LoRA run trains an adapter, not the model, and every replica serves it under a
name of its own beside the base model. Agents keep asking for the policy's model
(the name they were given); the trainer tells ingest, with each SetPolicyVersion,
which adapter serves that model from now on, and ingest sends their requests to it.
The call records the name the agent asked for as its `model` and the adapter as its
`lora_adapter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parity.services.runtime.errors import InvalidArgument


@dataclass
class PolicyAdapter:
    model: str = ""
    """The policy's model: the replicas' base model, the name agents ask for."""
    adapter: str = ""
    """The adapter loaded in every replica that serves `model`; empty when none does."""

    def set(self, model: str, adapter: str) -> None:
        if adapter and not model:
            raise InvalidArgument(
                "policy_model is required with lora_adapter: the model name the adapter serves"
            )
        if adapter and adapter == model:
            raise InvalidArgument(
                f"lora_adapter {adapter!r} must not be the policy's model name itself"
            )
        self.model, self.adapter = (model, adapter) if adapter else ("", "")

    def route(self, body: dict[str, Any]) -> str:
        """Point an upstream request for the policy's model at its adapter; returns the adapter it was sent to, or ""."""
        if self.adapter and body.get("model") == self.model:
            body["model"] = self.adapter
            return self.adapter
        return ""
