"""The sampled tokens' log-probs from the engine's logits, in chunks of rows instead of one row at a time.

Without flash-attn's Triton cross-entropy, verl's engine takes log-probs with
`logprobs_from_logits_v2`, which loops over the rows of the (tokens, vocab) logits it is
given: a logsumexp (float32) or a log-softmax and gather (bf16) per token, each a kernel
launch forward and again backward. On a GPU a step of 50,000 tokens spends seconds
launching them; on CPU it shows as ~100,000 aten ops a step on the tiny model.

`chunked_logprobs` computes the same `x[label] - logsumexp(x)` in float32 over chunks of
rows holding at most `CHUNK_ELEMENTS` logits. A bf16 chunk's float32 copy is recomputed
in backward (checkpointed) rather than kept, so memory stays that of the row loop.
`install()` puts it in place of verl's function in its FSDP engine; with flash-attn's
cross-entropy available verl's own path is kept.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

# Logits per chunk: a float32 chunk is 128 MiB (Qwen2.5's 151,936-token vocabulary: 220 rows).
CHUNK_ELEMENTS = 2**25


def _chunk(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = logits.float()
    return logits.gather(-1, labels[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def chunked_logprobs(
    logits: torch.Tensor, labels: torch.Tensor, inplace_backward: bool = True
) -> torch.Tensor:
    """log_softmax(logits)[label] for each position; `labels` has `logits`' shape without the vocabulary."""
    del inplace_backward  # verl's flash-attn path option; nothing is done in place here
    flat, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    rows = max(1, CHUNK_ELEMENTS // flat.shape[-1])
    keep_copy = flat.dtype == torch.float32 or not (torch.is_grad_enabled() and flat.requires_grad)
    parts = []
    for start in range(0, flat.shape[0], rows):
        chunk = flat[start : start + rows], flat_labels[start : start + rows]
        parts.append(
            _chunk(*chunk) if keep_copy else checkpoint(_chunk, *chunk, use_reentrant=False)
        )
    return torch.cat(parts).view(labels.shape)


def install() -> None:
    """Replace verl's per-row log-probs in its FSDP engine, unless flash-attn's kernel serves them."""
    from verl.utils import torch_functional
    from verl.workers.engine.fsdp import transformer_impl

    if not torch_functional.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE:
        transformer_impl.logprobs_from_logits = chunked_logprobs
