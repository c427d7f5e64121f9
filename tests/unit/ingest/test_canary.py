"""Which sessions a canary serves, and the canaries SetCanary refuses."""

from __future__ import annotations

import asyncio

import pytest

from parity.services.ingest.upstream.canary import CanaryRoute, in_canary
from parity.services.runtime.errors import InvalidArgument

SESSIONS = [f"session-{index}" for index in range(4000)]


def test_a_share_takes_about_that_share_of_sessions_and_a_larger_one_keeps_them() -> None:
    quarter = {s for s in SESSIONS if in_canary(s, 0.25)}
    half = {s for s in SESSIONS if in_canary(s, 0.5)}
    assert 0.22 < len(quarter) / len(SESSIONS) < 0.28 and 0.47 < len(half) / len(SESSIONS) < 0.53
    assert quarter < half  # raising the share moves no session out of the canary
    assert not any(in_canary(s, 0.0) for s in SESSIONS) and all(in_canary(s, 1.0) for s in SESSIONS)
    assert all(
        in_canary(s, 0.25) == (s in quarter) for s in SESSIONS[:100]
    )  # a session stays on its side


@pytest.mark.parametrize(
    ("upstreams", "share", "version", "message"),
    [
        (["http://a:8000"], 1.5, 3, "share must be between 0 and 1"),
        (["http://a:8000"], float("nan"), 3, "share must be between 0 and 1"),
        ([], 0.5, 3, "upstreams is required"),
        (["a:8000"], 0.5, 3, "upstreams must be http(s) URLs, got a:8000"),
        (["http://a:8000"], 0.5, 2, "policy_version 2 must be above the current 2"),
    ],
)
def test_a_canary_that_could_not_serve_is_refused_naming_the_field(
    upstreams, share, version, message
) -> None:
    route = CanaryRoute(health_interval_s=60)
    with pytest.raises(InvalidArgument) as refused:
        asyncio.run(route.set(upstreams, share, version, current_version=2))
    assert message in str(refused.value)
    assert route.current is None and route.pick("session-1", "m") is None


def test_ending_a_canary_that_never_started_is_a_no_op() -> None:
    route = CanaryRoute(health_interval_s=60)
    asyncio.run(route.set([], 0.0, 0, current_version=5))
    assert route.current is None
