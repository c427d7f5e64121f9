"""Prefix trees packed for one forward per row: each sampled token kept once, each position computing its row's."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM

from parity.services.trainer.backends.prefix_packing import (
    PREFIX_SEGMENT,
    pack_prefix_trees,
    sampling_limits,
    tree_attention_mask,
)
from parity.services.trainer.backends.prefix_tree import (
    PrefixCluster,
    PrefixTreeMismatch,
    shared_prefix_clusters,
)
from tests.unit.trainer.backends.test_prefix_tree import padded
from tests.unit.trainer.backends.test_shared_prefixes import sharing_batch

MIN_SHARED = 4


def packed(rows: list[list[int]], mask: torch.Tensor, budget: int = 10_000):
    ids, attention = padded(rows)
    clusters = shared_prefix_clusters(ids, attention, MIN_SHARED, limits=sampling_limits(mask))
    return ids, attention, clusters, pack_prefix_trees(ids, attention, mask, clusters, budget)


prompts = st.lists(st.integers(1, 3), min_size=0, max_size=10)
replies = st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=6), min_size=1, max_size=5)
steps = st.lists(st.tuples(prompts, replies), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(steps, st.one_of(st.integers(6, 40), st.just(10_000)))
def test_every_sampled_token_is_kept_once_and_labelled_as_in_its_row(groups, budget) -> None:
    rows, mask_rows = [], []
    for prompt, tails in groups:
        for reply in tails:
            rows.append([9, 9, *prompt, *reply])
            mask_rows.append(
                (len(prompt) + 1, len(prompt) + len(reply) + 1)
            )  # the reply's tokens were sampled
    ids, attention = padded(rows)
    mask = torch.zeros(len(rows), ids.shape[1] - 1)
    for row, (start, end) in enumerate(mask_rows):
        mask[row, start:end] = 1
    _, _, clusters, trees = packed(rows, mask, budget)
    # Each sampled position of the batch stands at exactly one packed position.
    flat = trees.source[trees.source >= 0]
    assert len(flat) == len(set(flat.tolist()))
    assert trees.pack(mask).sum() == mask.sum()
    shifted = ids.shape[1] - 1
    # A kept position holds its row's token at the row's position, and the packed row's next token is the row's.
    for tree, position in zip(*torch.nonzero(trees.source >= 0, as_tuple=True), strict=True):
        row, t = divmod(int(trees.source[tree, position]), shifted)
        assert int(trees.input_ids[tree, position]) == int(ids[row, t])
        assert int(trees.input_ids[tree, position + 1]) == int(ids[row, t + 1])
        assert int(trees.position_ids[tree, position]) == t
    lengths = trees.attention_mask.sum(dim=1)
    for tree in range(len(trees.input_ids)):
        if (trees.segments[tree] != PREFIX_SEGMENT).any():
            assert int(lengths[tree]) <= budget
    if budget == 10_000:
        # A tree keeps its prefix once, and each of its rows repeats the prefix's last token.
        assert trees.token_count == int(attention.sum()) - sum(
            c.tokens_saved - (len(c.rows) - 1) for c in clusters
        )


def test_a_group_and_a_session_pack_as_trees_and_a_lone_row_is_unchanged() -> None:
    batch = sharing_batch()
    clusters = shared_prefix_clusters(
        batch.input_ids, batch.attention_mask, limits=sampling_limits(batch.response_mask)
    )
    trees = pack_prefix_trees(
        batch.input_ids, batch.attention_mask, batch.response_mask, clusters, 16384
    )
    lengths = batch.attention_mask.sum(dim=1)
    # The group's four replies to one prompt, and the session's two turns (capped where its first reply starts).
    assert [len(cluster.rows) for cluster in clusters] == [4, 2]
    prompt, turn = clusters[0].prefix_length, clusters[1].prefix_length
    assert len(trees.input_ids) == 3
    assert trees.token_count == int(lengths.sum()) - 3 * prompt - turn + 3 + 1
    lone = [tree for tree in range(3) if not (trees.segments[tree] != PREFIX_SEGMENT).any()][0]
    row = int(lengths[6])
    assert torch.equal(trees.input_ids[lone, :row], batch.input_ids[6, :row])
    assert torch.equal(trees.position_ids[lone, :row], torch.arange(row))
    for name in ("response_mask", "advantages"):
        values = (
            batch.response_mask
            if name == "response_mask"
            else torch.randn_like(batch.response_mask) * batch.response_mask
        )
        assert float(trees.pack(values).sum()) == pytest.approx(float(values.sum()))


def test_each_packed_position_computes_what_its_whole_row_computes(tiny_model_dir) -> None:
    batch = sharing_batch(3)
    clusters = shared_prefix_clusters(
        batch.input_ids, batch.attention_mask, limits=sampling_limits(batch.response_mask)
    )
    trees = pack_prefix_trees(
        batch.input_ids, batch.attention_mask, batch.response_mask, clusters, 16384
    )
    assert trees.shares
    model = AutoModelForCausalLM.from_pretrained(
        tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    with torch.no_grad():
        whole = model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask
        ).logits.log_softmax(-1)
        mask = tree_attention_mask(trees.segments, trees.attention_mask.sum(dim=1))
        tree = model(
            input_ids=trees.input_ids, attention_mask=mask, position_ids=trees.position_ids
        ).logits.log_softmax(-1)
    expected = whole[:, :-1].gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    got = tree[:, :-1].gather(-1, trees.input_ids[:, 1:, None]).squeeze(-1)
    kept = trees.source >= 0
    assert torch.allclose(got[kept], expected.reshape(-1)[trees.source[kept]], atol=1e-5)
    # The sampled tokens' log-probs, laid out as the trees, sum to the batch's.
    assert float((got * trees.pack(batch.response_mask)).sum()) == pytest.approx(
        float((expected * batch.response_mask).sum()), rel=1e-5
    )


def test_the_tree_mask_keeps_rows_apart_and_padding_out() -> None:
    segments = torch.tensor([[0, 0, 1, 1, 2, 2, 0]])
    mask = tree_attention_mask(segments, torch.tensor([6]))[0, 0]
    assert mask[3].tolist() == [True, True, True, True, False, False, False]
    assert mask[5].tolist() == [True, True, False, False, True, True, False]
    assert mask[1].tolist() == [True, True, False, False, False, False, False]
    assert not mask[:, 6].any()


def test_a_prefix_over_a_sampled_token_or_the_wrong_ids_is_refused() -> None:
    rows = [[5, 6, 7, 8, 9, 1], [5, 6, 7, 8, 9, 2]]
    ids, attention = padded(rows)
    mask = torch.zeros(2, 5)
    mask[1, 2:] = 1  # row 1 sampled the token after position 2, inside a 5-token prefix
    with pytest.raises(
        PrefixTreeMismatch,
        match="row 1 samples the token after position 2, inside its cluster's 5-token prefix",
    ):
        pack_prefix_trees(ids, attention, mask, [PrefixCluster((0, 1), (5, 6, 7, 8, 9))], 100)
    with pytest.raises(
        PrefixTreeMismatch,
        match="row 0 differs from its cluster's prefix at token 4: id 9, prefix 7",
    ):
        pack_prefix_trees(
            ids, attention, torch.zeros(2, 5), [PrefixCluster((0, 1), (5, 6, 7, 8, 7))], 100
        )
