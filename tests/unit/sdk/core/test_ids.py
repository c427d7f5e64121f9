import time
import uuid

from parity.core import ids


def test_ids_are_uuid7_hex_carrying_the_time_they_were_made() -> None:
    before = time.time_ns() // 1_000_000
    made = ids.new_id()
    after = time.time_ns() // 1_000_000
    parsed = uuid.UUID(made)
    assert made == parsed.hex, "32 lowercase hex digits, as uuid4().hex ids were"
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert before <= int(made[:12], 16) <= after


def test_ids_from_a_later_millisecond_sort_after(monkeypatch) -> None:
    clock = iter(range(1_700_000_000_000_000_000, 1_700_000_001_000_000_000, 1_000_000))
    monkeypatch.setattr(ids.time, "time_ns", lambda: next(clock))
    made = [ids.new_id() for _ in range(200)]
    assert made == sorted(made)


def test_ids_made_in_the_same_millisecond_differ(monkeypatch) -> None:
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    made = {ids.new_id() for _ in range(10_000)}
    assert len(made) == 10_000
    assert len({i[:12] for i in made}) == 1
