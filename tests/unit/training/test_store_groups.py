"""Stored sessions a from-store step adopts, in groups the advantage can compare within."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from parity.training.store_sessions import Eligible
from parity.training.store_supply import into_groups


def sessions(count: int) -> list[Eligible]:
    return [
        Eligible(f"s{n}", float(n % 2), datetime(2026, 12, 1, tzinfo=UTC)) for n in range(count)
    ]


@pytest.mark.parametrize(
    ("count", "sizes"),
    [(16, [8, 8]), (9, [9]), (13, [8, 5]), (17, [8, 9]), (3, [3]), (1, [1])],
)
def test_a_last_group_too_small_to_compare_within_joins_the_one_before(
    count: int, sizes: list[int]
) -> None:
    groups = into_groups(sessions(count), 8)
    assert [len(group) for group in groups] == sizes
    assert [s.session_id for group in groups for s in group] == [
        s.session_id for s in sessions(count)
    ]
