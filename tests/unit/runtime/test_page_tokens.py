"""Paging a list held in memory: every item once, in order; tokens bound to their query."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity.services.runtime.errors import InvalidArgument
from parity.services.runtime.page_tokens import MAX_PAGE_SIZE, page_of


@given(st.lists(st.integers(), max_size=60), st.integers(min_value=0, max_value=25))
def test_following_the_tokens_yields_every_item_once_in_order(items: list[int], size: int) -> None:
    seen, token = list[int](), ""
    while True:
        page, token = page_of(items, size, token, "scope")
        assert len(page) <= (size or 100)
        seen += page
        if not token:
            break
    assert seen == items


def test_a_token_is_refused_by_another_query_or_when_malformed() -> None:
    _, token = page_of(list(range(10)), 3, "", "runs")
    with pytest.raises(InvalidArgument, match="different query"):
        page_of(list(range(10)), 3, token, "checkpoints:r")
    with pytest.raises(InvalidArgument, match="page_token 'x!' is malformed"):
        page_of([], 3, "x!", "runs")
    with pytest.raises(InvalidArgument, match="page_size must not be negative"):
        page_of([], -1, "", "runs")
    assert (
        len(page_of(list(range(MAX_PAGE_SIZE + 5)), MAX_PAGE_SIZE + 5, "", "runs")[0])
        == MAX_PAGE_SIZE
    )
