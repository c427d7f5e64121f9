"""The Hugging Face folder every backend writes for vLLM's `reload_weights`: config and safetensors.

A model whose output head is tied to its input embeddings (`tie_word_embeddings`,
as in Qwen2.5 0.5B-3B, Llama 3.2 1B/3B, Gemma) is saved by transformers with the
embedding matrix alone. vLLM's in-place reload then loads nothing into its
`ParallelLMHead` ("Failed to load weights") and never reruns the layer's
`process_weights_after_loading`; on CPU that step packs the head's weight for its
GEMM kernel, so the head keeps computing logits from the pre-update matrix while the
embeddings move. The folder therefore carries the head under its own name too, a
copy of the embeddings: vLLM's reload loads and repacks it, and a fresh vLLM or
transformers load sees identical tensors and ties them again. See
docs/design/tied-embeddings.md.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel


def save_pushed_weights(
    model: PreTrainedModel, directory: Path, state: dict[str, torch.Tensor] | None = None
) -> None:
    """Write `model`'s config and `state` (its own state dict by default), tied heads written out as copies."""
    state = dict(model.state_dict() if state is None else state)
    # transformers drops a key whose tensor shares storage with another; a copy of its own is kept.
    for head, embeddings in model.all_tied_weights_keys.items():
        state[head] = state[embeddings].detach().clone()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, state_dict=state, safe_serialization=True)
