"""The policy version an ingest keeps beside its spool survives a restart."""

from __future__ import annotations

from pathlib import Path

from parity.services.ingest.capture.policy_record import PolicyRecord, RecordedPolicy
from parity.services.ingest.capture.spool import Spool


def test_the_last_policy_is_read_back_after_a_restart_beside_the_spool(tmp_path: Path) -> None:
    path = tmp_path / "ingest-spool.db"
    spool, record = Spool(path, 1 << 20), PolicyRecord(path)
    assert record.load() == RecordedPolicy()
    record.save(RecordedPolicy(3, "", ""))
    record.save(RecordedPolicy(4, "tiny", "tiny-parity-lora"))
    spool.append([b"call"])
    record.close()
    spool.close()

    assert PolicyRecord(path).load() == RecordedPolicy(4, "tiny", "tiny-parity-lora")
    assert Spool(path, 1 << 20).count == 1
