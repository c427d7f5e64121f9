"""Sticky, healthy-only replica choice: rendezvous hashing moves only a failed replica's sessions."""

from __future__ import annotations

from collections import Counter

from parity.services.ingest.upstream.replica_router import ReplicaRouter

SESSIONS = [f"session-{i}" for i in range(400)]


def router(*urls: str, model: str = "policy") -> ReplicaRouter:
    routing = ReplicaRouter(list(urls))
    for replica in routing.replicas:
        replica.models, replica.healthy = {model}, True
    return routing


def first_choices(routing: ReplicaRouter, model: str = "policy") -> dict[str, str]:
    return {session: routing.candidates(model, session)[0].name for session in SESSIONS}


def test_a_session_always_gets_the_same_replica_and_sessions_spread_evenly() -> None:
    urls = [f"http://10.0.0.{i}:8100" for i in range(1, 5)]
    choices = first_choices(router(*urls))
    assert choices == first_choices(router(*reversed(urls))), (
        "the order replicas are listed in must not matter"
    )
    spread = Counter(choices.values())
    assert len(spread) == 4 and min(spread.values()) > len(SESSIONS) / 4 * 0.6, spread


def test_a_failed_replica_moves_only_its_own_sessions_and_gets_them_back() -> None:
    routing = router("http://a:8100", "http://b:8100", "http://c:8100")
    before = first_choices(routing)
    failed = routing.replicas[1]
    routing.mark_failed(failed, "connection refused")
    during = first_choices(routing)
    for session, name in before.items():
        if name == failed.name:
            assert during[session] != failed.name
        else:
            assert during[session] == name, (
                "a healthy replica's sessions stay where their prefix cache is"
            )
    failed.healthy = True
    assert first_choices(routing) == before


def test_fallbacks_follow_the_sessions_own_order() -> None:
    routing = router("http://a:8100", "http://b:8100", "http://c:8100")
    for session in SESSIONS[:50]:
        order = [r.name for r in routing.candidates("policy", session)]
        routing.mark_failed(next(r for r in routing.replicas if r.name == order[0]), "down")
        assert [r.name for r in routing.candidates("policy", session)] == order[1:]
        for replica in routing.replicas:
            replica.healthy = True


def test_only_replicas_serving_the_model_and_all_of_them_when_none_is_healthy() -> None:
    routing = router("http://a:8100", "http://b:8100")
    routing.replicas[1].models = {"judge"}
    assert [r.name for r in routing.candidates("judge", "s")] == ["b:8100"]
    assert routing.candidates("missing", "s") == []
    for replica in routing.replicas:
        routing.mark_failed(replica, "down")
    # With every replica down, trying one beats refusing outright.
    assert [r.name for r in routing.candidates("policy", "s")] == ["a:8100"]
