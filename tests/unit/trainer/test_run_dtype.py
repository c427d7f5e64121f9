"""A run computes in the dtype its replicas serve: `auto` takes theirs, a named other is refused before its start push."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.services.runtime.errors import FailedPrecondition
from parity.services.trainer.compute_defaults import CPU_BF16_ENV
from parity.services.trainer.replicas import ReplicaError, VllmReplica
from parity.services.trainer.run_dtype import settings_for_replicas
from parity.services.trainer.run_settings import RunSettings


class Replica(VllmReplica):
    """A replica serving `dtype`; None: one that does not answer."""

    def __init__(self, url: str, dtype: str | None) -> None:
        super().__init__(url)
        self.dtype = dtype

    def served_dtype(self) -> str:
        if self.dtype is None:
            raise ReplicaError(f"{self.base_url}/server_info: ConnectError")
        return self.dtype


def settings(dtype: str = "auto") -> RunSettings:
    return RunSettings(Path("/m"), 3, groups_per_batch=1, dtype=dtype)


@pytest.mark.parametrize("bf16_units", ["0", "1"])
def test_an_auto_run_computes_in_what_its_replicas_serve_on_any_cpu(
    monkeypatch, bf16_units
) -> None:
    # `parity up` serves float32 by default; on a CPU with bf16 units `auto` alone resolves to bfloat16.
    monkeypatch.setenv(CPU_BF16_ENV, bf16_units)
    for served in ("float32", "bfloat16"):
        run = settings_for_replicas(
            settings(), [Replica("http://a:8100", served), Replica("http://b:8100", served)]
        )
        assert run.dtype == served and run.dtype_auto
        # Its history and checkpoints keep that it followed, so a resume follows the replicas again.
        assert RunSettings.from_json(run.to_json()).dtype_auto


def test_a_run_that_names_another_dtype_than_served_is_refused_naming_both_and_the_flags() -> None:
    with pytest.raises(FailedPrecondition) as refused:
        settings_for_replicas(settings("bfloat16"), [Replica("http://a:8100", "float32")])
    message = str(refused.value)
    assert "bfloat16" in message and "http://a:8100 serves float32" in message
    assert "parity train --dtype" in message and "parity up --vllm-dtype bfloat16" in message
    named = settings("float32")
    assert settings_for_replicas(named, [Replica("http://a:8100", "float32")]) is named


def test_replicas_that_disagree_or_serve_a_dtype_no_run_computes_in_are_refused() -> None:
    with pytest.raises(FailedPrecondition, match="different dtypes.*http://b:8100 serves bfloat16"):
        settings_for_replicas(
            settings(), [Replica("http://a:8100", "float32"), Replica("http://b:8100", "bfloat16")]
        )
    with pytest.raises(FailedPrecondition, match="serves float16, which no run computes in"):
        settings_for_replicas(settings(), [Replica("http://a:8100", "float16")])


def test_replicas_that_cannot_be_asked_leave_the_dtype_resolved_here(monkeypatch) -> None:
    # The start push right after reports the replica, with the run's resumable checkpoint.
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    run = settings()
    assert settings_for_replicas(run, [Replica("http://a:8100", None)]) is run
    assert settings_for_replicas(run, []).dtype == "bfloat16"
    answering = settings_for_replicas(
        run, [Replica("http://a:8100", None), Replica("http://b:8100", "float32")]
    )
    assert answering.dtype == "float32"
