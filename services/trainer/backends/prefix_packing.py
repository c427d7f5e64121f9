"""A step's rows packed as prefix trees, for an engine that runs one forward per row: each cluster's
shared prefix once, then every row's tokens past it, in one row whose attention mask keeps the
rows apart.

A tree row of a cluster whose prefix is P tokens long holds the prefix's first P-1 tokens once,
then, for each of the cluster's rows, that row's tokens from position P-1 on (its segment). Every
segment starts with its own copy of the prefix's last token, so the position that scores a row's
first token past the prefix is the segment's own: the tree row's tokens, shifted by one, label each
position with its own row's next token, as the whole row would. Positions continue from the
prefix in every segment, and a token attends to the prefix and to its own segment's earlier tokens
(`tree_attention_mask`), so each position of a segment computes what its whole row computes there.

The prefix ends before any of its rows' first sampled token (`sampling_limits`): the prefix's
positions carry no loss, each sampled token of the batch sits at exactly one position of the
packed rows, and a loss summed over sampled tokens (verl's token-mean) is the unshared loss term
for term. Gradients reach the prefix from every segment and autograd sums them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from parity.services.trainer.backends.prefix_tree import (
    PrefixCluster,
    PrefixTreeMismatch,
    check_prefix_tree,
    row_ids,
)

PREFIX_SEGMENT = 0
"""The segment id of a tree row's prefix, and of every token of a row packed alone."""


def sampling_limits(response_mask: torch.Tensor) -> list[int]:
    """Per row, the longest prefix whose positions score no sampled token: one past its first sampled position."""
    sampled = response_mask.bool()
    first = torch.where(sampled.any(dim=1), sampled.int().argmax(dim=1), sampled.shape[1])
    return [int(position) + 1 for position in first]


@dataclass(frozen=True)
class PackedTrees:
    """A batch's rows as tree rows: right-padded (trees, length) tensors and the map back to the rows."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    segments: torch.Tensor
    """Each token's segment: `PREFIX_SEGMENT` for a tree's prefix and rows packed alone, 1.. for a tree's rows."""
    source: torch.Tensor
    """(trees, length-1): the flat index (row x (batch length-1) + position) of the batch position each
    shifted position stands for, -1 where it stands for none (the prefix, a segment's last token, padding)."""

    @property
    def token_count(self) -> int:
        return int(self.attention_mask.sum())

    @property
    def shares(self) -> bool:
        return bool((self.segments != PREFIX_SEGMENT).any())

    def pack(self, per_token: torch.Tensor) -> torch.Tensor:
        """A (rows, length-1) tensor in the batch's shifted layout, laid out as the tree rows' (zeros where no position maps)."""
        flat = per_token.reshape(-1)
        kept = self.source >= 0
        return torch.where(kept, flat[self.source.clamp(min=0)], torch.zeros((), dtype=flat.dtype))


def pack_prefix_trees(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    clusters: list[PrefixCluster],
    token_budget: int,
) -> PackedTrees:
    """The batch as tree rows, each at most `token_budget` tokens (a cluster too long for one is split
    over several, each with its prefix); rows in no cluster are packed alone, unchanged.

    Refuses clusters that do not match the rows token for token, or whose prefix covers a sampled token.
    """
    check_prefix_tree(input_ids, attention_mask, clusters)
    limits = sampling_limits(response_mask)
    ids = row_ids(input_ids, attention_mask)
    for cluster in clusters:
        for row in cluster.rows:
            if cluster.prefix_length > limits[row]:
                raise PrefixTreeMismatch(
                    f"row {row} samples the token after position {limits[row] - 1}, inside its cluster's "
                    f"{cluster.prefix_length}-token prefix"
                )
    trees: list[tuple[int, list[int]]] = []  # (prefix length, rows): 0 for a row alone
    clustered: set[int] = set()
    for cluster in clusters:
        clustered.update(cluster.rows)
        shared = cluster.prefix_length - 1
        current: list[int] = []
        length = shared
        for row in cluster.rows:
            segment = len(ids[row]) - shared
            if current and length + segment > token_budget:
                trees.append((cluster.prefix_length, current) if len(current) > 1 else (0, current))
                current, length = [], shared
            current.append(row)
            length += segment
        trees.append((cluster.prefix_length, current) if len(current) > 1 else (0, current))
    trees += [(0, [row]) for row in range(len(ids)) if row not in clustered]
    return _layout(ids, trees, input_ids.shape[1] - 1)


def _layout(ids: list[np.ndarray], trees: list[tuple[int, list[int]]], shifted: int) -> PackedTrees:
    packed_ids, positions, segments, sources = [], [], [], []
    for prefix, rows in trees:
        shared = max(prefix - 1, 0)
        tree_ids, tree_positions = [ids[rows[0]][:shared]], [np.arange(shared)]
        tree_segments, tree_sources = [np.full(shared, PREFIX_SEGMENT)], [np.full(shared, -1)]
        for number, row in enumerate(rows, start=1):
            n = len(ids[row])
            tree_ids.append(ids[row][shared:])
            tree_positions.append(np.arange(shared, n))
            tree_segments.append(np.full(n - shared, number if prefix else PREFIX_SEGMENT))
            # The segment's token at position p scores the row's token p+1; its last token scores none.
            tree_sources.append(np.append(row * shifted + np.arange(shared, n - 1), -1))
        packed_ids.append(np.concatenate(tree_ids))
        positions.append(np.concatenate(tree_positions))
        segments.append(np.concatenate(tree_segments))
        sources.append(np.concatenate(tree_sources)[:-1])
    length = max(len(tree) for tree in packed_ids)

    def padded(arrays: list[np.ndarray], fill: int, width: int = length) -> torch.Tensor:
        out = torch.full((len(arrays), width), fill, dtype=torch.long)
        for index, array in enumerate(arrays):
            out[index, : len(array)] = torch.from_numpy(array.astype(np.int64))
        return out

    input_ids = padded(packed_ids, 0)
    return PackedTrees(
        input_ids=input_ids,
        attention_mask=padded([np.ones(len(tree)) for tree in packed_ids], 0),
        position_ids=padded(positions, 0),
        segments=padded(segments, PREFIX_SEGMENT),
        source=padded(sources, -1, length - 1),
    )


def tree_attention_mask(segments: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(rows, 1, length, length) boolean mask, True where a query may attend a key: keys at or before it
    among the row's real tokens, in the prefix or its own segment. A row packed alone is causal."""
    positions = torch.arange(segments.shape[1], device=segments.device)
    causal = positions[None, :] <= positions[:, None]
    key_segments = segments[:, None, :]
    related = (key_segments == segments[:, :, None]) | (key_segments == PREFIX_SEGMENT)
    real = positions[None, None, :] < lengths[:, None, None]
    return (causal & related & real)[:, None]
