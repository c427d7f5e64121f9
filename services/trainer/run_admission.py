"""Whether a run may start beside the runs a trainer is training: several runs at once are LoRA runs
on one base model, as many as `max_concurrent_runs`.

They share one frozen copy of the base (in the trainer and in every replica), so each trains and
serves only its adapter. A full-model run changes the base itself: it trains alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from parity.services.runtime.errors import FailedPrecondition, ResourceExhausted
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.run_status import RunStatus


def check_admission(
    settings: RunSettings, backend: str, active: Sequence[RunStatus], limit: int
) -> None:
    """Refuse a run that cannot start beside `active`, saying why; `backend` is the one it would train on."""
    names = ", ".join(run.run_id for run in active)
    if limit == 1:
        if active:
            raise FailedPrecondition(
                f"run {names} is {active[0].state.value}; stop it first (or start the trainer with "
                "max_concurrent_runs above 1 to train LoRA runs at once)"
            )
        return
    if settings.lora_rank and backend != "cpu":
        raise FailedPrecondition(
            f"runs trained at once share one base model in the cpu backend; this run's backend is {backend}, "
            "which trains one run at a time (use backend cpu, or max_concurrent_runs 1)"
        )
    if not active:
        return
    if not settings.lora_rank:
        raise FailedPrecondition(
            f"a full-model run changes the base model that the active runs ({names}) share; "
            "train a LoRA adapter (lora.rank) or wait for them to end"
        )
    full = [run.run_id for run in active if not run.settings.lora_rank]
    if full:
        raise FailedPrecondition(
            f"run {full[0]} trains the whole model, which no other run can share; wait for it to end"
        )
    bases = {run.settings.model_path.resolve() for run in active}
    if settings.model_path.resolve() not in bases:
        raise FailedPrecondition(
            f"the active runs ({names}) train adapters of {', '.join(map(str, sorted(bases)))}; runs at once "
            f"share one base model, and this one asks for {settings.model_path}"
        )
    # Last: a run that could never share the base is told why, not to wait for a free place.
    if len(active) >= limit:
        raise ResourceExhausted(
            f"max_concurrent_runs is {limit} and {len(active)} runs are active ({names}); "
            "wait for one to end, stop one, or raise max_concurrent_runs"
        )
