"""One cluster's shared prefix, computed once, and each branch's log-probs on its keys and values.

The prefix's forward runs once and keeps its keys and values (Hugging Face's `DynamicCache`);
each micro-batch of branches (the rows' tokens past the prefix) runs on a fresh cache built from
them, at positions continuing from the prefix, so the branches see exactly the context the whole
rows would. The log-prob of token t+1 needs the output at t: the prefix's last position scores
each branch's first token, per branch, and prefix positions whose next token was sampled (an
earlier turn kept in a session's later one) are scored from the prefix's logits alone.

Gradients come back in two stages, so memory stays one micro-batch of branches beside the
prefix: the prefix's keys, values and logits are handed to the branches as leaves, each
micro-batch's backward accumulates into them, and `backward` then sends their gradients through
the prefix's forward once. Autograd's sum over branches is the unshared path's gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer
from verl.utils import torch_functional as verl_F

from parity.services.trainer.policy_loss import token_logprobs

ModelCall = Callable[..., Any]
"""A causal LM's forward in the run's compute dtype, taking Hugging Face's keyword arguments."""


def shares_exactly(config: PretrainedConfig) -> bool:
    """Whether every layer's cache keeps the whole prefix's keys and values, and training draws no dropout.
    A sliding-window layer keeps only its window and a linear-attention layer a state, so branches on them
    would not see what the whole rows see; dropout would draw one mask for a prefix all its rows share.
    Such models train unshared."""
    dropout = any(
        isinstance(value, float) and value > 0
        for key, value in vars(config).items()
        if "drop" in key
    )
    return not dropout and all(
        type(layer) is DynamicLayer for layer in DynamicCache(config=config).layers
    )


def first_sampled_position(response_mask: torch.Tensor) -> int:
    """The first shifted position any row's next token was sampled at (0 when none was)."""
    sampled = response_mask.any(dim=0).nonzero()
    return int(sampled[0]) if len(sampled) else 0


class SharedPrefix:
    """A prefix's forward, done once for every branch of its cluster."""

    def __init__(
        self, call: ModelCall, config: PretrainedConfig, prefix: torch.Tensor, head_from: int
    ) -> None:
        """`prefix`: its ids (length P); `head_from`: the first position (at most P-1) whose logits a branch needs."""
        self.call, self.config, self.prefix = call, config, prefix
        self.head_from = min(head_from, len(prefix) - 1)
        output = call(
            input_ids=prefix[None],
            use_cache=True,
            logits_to_keep=torch.arange(self.head_from, len(prefix)),
        )
        cache = output.past_key_values
        self._computed = [t for layer in cache.layers for t in (layer.keys, layer.values)] + [
            output.logits
        ]
        # float32 leaves: their gradients sum over every micro-batch of branches, as the weights' do; in the
        # compute dtype (bf16) that sum would round at each micro-batch.
        self._leaves = [t.detach().float().requires_grad_(t.requires_grad) for t in self._computed]

    @property
    def length(self) -> int:
        return len(self.prefix)

    def branch_logprobs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logprob of each next token and the entropy at each position for rows that start with the
        prefix, (rows, length-1) as the unshared forward gives them, zeros before `head_from`."""
        rows, length = input_ids.shape
        shared = self.length
        *keys_values, logits = self._leaves
        inside, inside_entropy = token_logprobs(logits, self.prefix[None, self.head_from :])
        last = logits[:, -1].float()
        boundary = (
            torch.log_softmax(last, dim=-1)
            .expand(rows, -1)
            .gather(-1, input_ids[:, shared : shared + 1])
        )
        boundary_entropy = verl_F.entropy_from_logits(last).expand(rows)[:, None]
        logprobs = [inside.expand(rows, -1), boundary]
        entropies = [inside_entropy.expand(rows, -1), boundary_entropy]
        # Branch positions up to the piece's first sampled one are scored by no loss; the head skips them.
        start = max(first_sampled_position(response_mask), shared) - shared
        if start < length - shared - 1:
            dtype = self._computed[0].dtype
            cache = DynamicCache(
                [(keys.to(dtype).expand(rows, -1, -1, -1), values.to(dtype).expand(rows, -1, -1, -1))
                 for keys, values in zip(keys_values[::2], keys_values[1::2], strict=True)],
                config=self.config,
            )  # fmt: skip
            output = self.call(
                input_ids=input_ids[:, shared:], attention_mask=attention_mask, past_key_values=cache, use_cache=True,
                logits_to_keep=torch.arange(start, length - shared),
            )  # fmt: skip
            branch, branch_entropy = token_logprobs(output.logits, input_ids[:, shared + start :])
            logprobs.append(torch.nn.functional.pad(branch, (start, 0)))
            entropies.append(torch.nn.functional.pad(branch_entropy, (start, 0)))
        else:
            gap = length - shared - 1
            logprobs.append(boundary.new_zeros(rows, gap))
            entropies.append(boundary.new_zeros(rows, gap))
        pad = (self.head_from, 0)
        return (
            torch.nn.functional.pad(torch.cat(logprobs, dim=1), pad),
            torch.nn.functional.pad(torch.cat(entropies, dim=1), pad),
        )

    def backward(self) -> None:
        """The branches' gradients on the prefix's keys, values and logits, through the prefix's forward."""
        pairs = [
            (t, leaf.grad)
            for t, leaf in zip(self._computed, self._leaves, strict=True)
            if leaf.grad is not None
        ]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [grad.to(t.dtype) for t, grad in pairs])
        self._computed, self._leaves = [], []
