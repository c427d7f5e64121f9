"""Which of a step's samples share a token-id prefix, found from the ids alone, and checked token-exact.

A GRPO group's rollouts share the system prompt, tool schemas and question; the turns of one
as_deployed session share their earlier turns; the trajectories of one task share its text. None
of that needs task or group ids: sorted by their token ids, rows that share a prefix sit next to
each other, and the prefix two rows share is the shortest of the common prefixes of the
neighbours between them. So the batch's rows, sorted, are cut into runs, and each run of at
least two rows is a cluster whose prefix the trainer computes once.

The tree is one level, a prefix and its branches. A deeper trie (a system prompt shared by every
task, each task's question shared by its rollouts) would save only the shorter of its levels
again: the cut below picks, per run, the level that saves the most tokens (one cluster over
every task's rows at the system prompt, or one per task at system prompt plus question), and
agents' shared prompts are long against the text that tells their tasks apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

# A prefix shorter than this is computed again per row: below it the prefix's own forward call
# and each branch's copy of its keys and values cost about what the shared tokens would.
MIN_SHARED_TOKENS = 64


class PrefixTreeMismatch(ValueError):
    """A cluster whose prefix is not the start of every one of its rows: training on it would be wrong."""


@dataclass(frozen=True)
class PrefixCluster:
    """Rows of a batch that start with the same `prefix` ids, each with at least one token past it."""

    rows: tuple[int, ...]
    prefix: tuple[int, ...]

    @property
    def prefix_length(self) -> int:
        return len(self.prefix)

    @property
    def tokens_saved(self) -> int:
        return (len(self.rows) - 1) * len(self.prefix)


def row_ids(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[np.ndarray]:
    """Each row's real token ids, padding cut off."""
    lengths = attention_mask.sum(dim=1).tolist()
    return [row[:length] for row, length in zip(input_ids.numpy(), lengths, strict=True)]


def common_prefix_length(a: np.ndarray, b: np.ndarray) -> int:
    shortest = min(len(a), len(b))
    differ = np.flatnonzero(a[:shortest] != b[:shortest])
    return int(differ[0]) if len(differ) else shortest


def shared_prefix_clusters(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    min_shared: int = MIN_SHARED_TOKENS,
    limits: Sequence[int] | None = None,
) -> list[PrefixCluster]:
    """The batch's rows grouped by shared prefixes of at least `min_shared` tokens; rows that share none are in no cluster.

    Each cluster's prefix is the longest common prefix of its rows, capped one token short of
    its shortest row (a row that is the start of another, as an earlier turn of a session is,
    keeps a token to compute past the prefix) and at each row's entry of `limits`, if given.
    Clusters are contiguous runs of the rows sorted by ids, cut where the tokens saved,
    (rows - 1) x prefix length summed, are largest.
    """
    ids = row_ids(input_ids, attention_mask)
    caps = [
        len(row) - 1 if limits is None else min(len(row) - 1, limits[index])
        for index, row in enumerate(ids)
    ]
    order = sorted(range(len(ids)), key=lambda row: ids[row].tolist())
    neighbours = [
        common_prefix_length(ids[a], ids[b]) for a, b in zip(order, order[1:], strict=False)
    ]

    # best[end]: the most tokens saved by cutting the first `end` sorted rows into runs; the last run
    # starts at cut[end] and shares shared[end] tokens.
    best, cut, shared = [0] * (len(order) + 1), list(range(len(order) + 1)), [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        best[end], cut[end] = best[end - 1], end - 1
        common, cap = len(ids[order[end - 1]]), caps[order[end - 1]]
        for start in range(end - 2, -1, -1):
            common = min(common, neighbours[start])
            if common < min_shared:
                break
            cap = min(cap, caps[order[start]])
            prefix = min(common, cap)
            saved = best[start] + (end - start - 1) * prefix
            if prefix >= min_shared and saved > best[end]:
                best[end], cut[end], shared[end] = saved, start, prefix
    clusters: list[PrefixCluster] = []
    end = len(order)
    while end > 0:
        start = cut[end]
        if end - start >= 2:
            rows = tuple(sorted(order[start:end]))
            clusters.append(PrefixCluster(rows, tuple(ids[rows[0]][: shared[end]].tolist())))
        end = start
    return sorted(clusters, key=lambda cluster: cluster.rows)


def check_prefix_tree(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, clusters: list[PrefixCluster]
) -> None:
    """Refuses clusters that do not match the batch token for token: every row of a cluster starts with
    its prefix and has a token past it, and no row is in two clusters."""
    ids = row_ids(input_ids, attention_mask)
    seen: set[int] = set()
    for cluster in clusters:
        prefix = np.asarray(cluster.prefix, dtype=ids[0].dtype if ids else np.int64)
        if len(cluster.rows) < 2 or not len(prefix):
            raise PrefixTreeMismatch(
                f"a cluster needs two rows and a prefix; got rows {cluster.rows}, {len(prefix)} prefix tokens"
            )
        for row in cluster.rows:
            if not 0 <= row < len(ids):
                raise PrefixTreeMismatch(
                    f"cluster row {row} is not in the batch of {len(ids)} rows"
                )
            if row in seen:
                raise PrefixTreeMismatch(f"row {row} is in two clusters")
            seen.add(row)
            if len(ids[row]) <= len(prefix):
                raise PrefixTreeMismatch(
                    f"row {row} has {len(ids[row])} tokens, none past its {len(prefix)}-token prefix"
                )
            differ = np.flatnonzero(ids[row][: len(prefix)] != prefix)
            if len(differ):
                at = int(differ[0])
                raise PrefixTreeMismatch(
                    f"row {row} differs from its cluster's prefix at token {at}: id {int(ids[row][at])}, prefix {int(prefix[at])}"
                )
