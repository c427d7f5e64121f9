"""Prefix clusters from token ids: real, maximal, disjoint, and refused when they disagree with the rows."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.services.trainer.backends.prefix_tree import (
    PrefixCluster,
    PrefixTreeMismatch,
    check_prefix_tree,
    common_prefix_length,
    row_ids,
    shared_prefix_clusters,
)

MIN_SHARED = 4


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(map(len, rows))
    ids, attention = (
        torch.zeros(len(rows), length, dtype=torch.long),
        torch.zeros(len(rows), length, dtype=torch.long),
    )
    for row, tokens in enumerate(rows):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        attention[row, : len(tokens)] = 1
    return ids, attention


# Batches as agents' steps make them: a few prompts (some starting alike, as one system prompt
# across tasks), each continued by several rows, some of which extend another (a session's turns).
stems = st.lists(st.integers(1, 3), min_size=0, max_size=12)
batches = st.lists(
    st.tuples(st.integers(0, 2), stems, st.lists(stems, min_size=1, max_size=4)),
    min_size=1,
    max_size=5,
).map(
    lambda groups: [
        [9] * (3 * system) + stem + tail for system, stem, tails in groups for tail in tails
    ]
)


@settings(max_examples=300, deadline=None)
@given(batches)
def test_clusters_are_disjoint_real_and_maximal_common_prefixes(rows: list[list[int]]) -> None:
    rows = [row + [7] for row in rows]  # no empty row
    ids, attention = padded(rows)
    clusters = shared_prefix_clusters(ids, attention, MIN_SHARED)
    check_prefix_tree(ids, attention, clusters)
    members = [row for cluster in clusters for row in cluster.rows]
    assert len(members) == len(set(members))
    for cluster in clusters:
        assert len(cluster.rows) >= 2 and cluster.prefix_length >= MIN_SHARED
        tokens = [rows[row] for row in cluster.rows]
        assert all(
            list(cluster.prefix) == t[: cluster.prefix_length] and len(t) > cluster.prefix_length
            for t in tokens
        )
        # Maximal: one token more is not shared by every row, or would leave a row nothing past the prefix.
        longest = min(len(t) for t in tokens) - 1
        common = min(common_prefix_length(*row_ids(*padded([tokens[0], t]))) for t in tokens)
        assert cluster.prefix_length == min(common, longest)


@settings(max_examples=200, deadline=None)
@given(batches)
def test_rows_sharing_a_long_enough_prefix_are_computed_once(rows: list[list[int]]) -> None:
    rows = [row + [7] for row in rows]
    ids, attention = padded(rows)
    clusters = shared_prefix_clusters(ids, attention, MIN_SHARED)
    pairs = [(a, b) for a in range(len(rows)) for b in range(a + 1, len(rows))]
    sharing = any(min(common_prefix_length(*row_ids(*padded([rows[a], rows[b]]))), len(rows[a]) - 1, len(rows[b]) - 1) >= MIN_SHARED
                  for a, b in pairs)  # fmt: skip
    # Two rows that share a prefix long enough always give a cluster; rows that share none give none.
    assert bool(clusters) == sharing


def test_groups_sessions_and_tasks_are_found_from_ids_alone() -> None:
    system, task_a, task_b = [9] * 40, [1] * 30, [2] * 30
    rows = [system + task_a + [3], system + task_a + [4, 4], system + task_b + [5], system + task_b + [6],
            [8] * 70 + [1], [8] * 70 + [1, 2, 3]]  # fmt: skip
    clusters = shared_prefix_clusters(*padded(rows), min_shared=64)
    # Both tasks under their system prompt; the session's first turn is the start of its second.
    assert [(c.rows, c.prefix_length) for c in clusters] == [
        ((0, 1), 70),
        ((2, 3), 70),
        ((4, 5), 70),
    ]
    assert shared_prefix_clusters(*padded(rows), min_shared=71) == []


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        (
            PrefixCluster((0, 1), (1, 2, 3)),
            "row 1 differs from its cluster's prefix at token 2: id 9, prefix 3",
        ),
        (PrefixCluster((0, 2), (1, 2, 3)), "row 2 has 3 tokens, none past its 3-token prefix"),
        (PrefixCluster((0,), (1, 2)), "a cluster needs two rows"),
        (PrefixCluster((0, 5), (1, 2)), "cluster row 5 is not in the batch"),
    ],
)
def test_a_tree_that_disagrees_with_the_rows_is_refused(
    cluster: PrefixCluster, message: str
) -> None:
    ids, attention = padded([[1, 2, 3, 4], [1, 2, 9, 4], [1, 2, 3]])
    with pytest.raises(PrefixTreeMismatch, match=message):
        check_prefix_tree(ids, attention, [cluster])


def test_a_row_in_two_clusters_is_refused() -> None:
    ids, attention = padded([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 6]])
    with pytest.raises(PrefixTreeMismatch, match="row 1 is in two clusters"):
        check_prefix_tree(
            ids, attention, [PrefixCluster((0, 1), (1, 2)), PrefixCluster((1, 2), (1, 2, 3))]
        )
