"""GetStats for one run counts that run's drops only: runs trained at once share the assembler."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.services.assembler.rollout_tracker import AssemblerStats
from parity.services.assembler.servicer import AssemblerServicer


def stats_of(stats: AssemblerStats, run_id: str) -> dict[str, int]:
    assembler = SimpleNamespace(
        stats=stats, tracker=SimpleNamespace(pending_group_count=lambda run_id: 0)
    )
    servicer = AssemblerServicer(assembler)  # type: ignore[arg-type]
    request = pb.GetStatsRequest(run_id=run_id)
    response = asyncio.run(servicer.GetStats(request, None))  # type: ignore[arg-type]
    return dict(response.filtered_counts)


def test_a_runs_stats_count_its_own_drops_and_no_run_named_counts_every_runs() -> None:
    stats = AssemblerStats()
    stats.count_filtered("run-a", {"equal_rewards": 2})
    stats.count_filtered("run-b", {"equal_rewards": 5, "stale_sample": 3})
    stats.count_filtered("run-a", {"late_rollout": 1})
    stats.count_filtered("", {"failed_rollout": 1})
    assert stats_of(stats, "run-a") == {"equal_rewards": 2, "late_rollout": 1}
    assert stats_of(stats, "run-b") == {"equal_rewards": 5, "stale_sample": 3}
    assert stats_of(stats, "run-c") == {}
    assert stats_of(stats, "") == {
        "equal_rewards": 7,
        "stale_sample": 3,
        "late_rollout": 1,
        "failed_rollout": 1,
    }
