"""The dtype a run computes in against the one its vLLM replicas serve: they must be the same.

Weight sync verifies every push by comparing the replica's probe logprobs with the
trainer's. A bfloat16 trainer against a float32 vLLM (a bf16 CPU or CUDA trainer under
`parity up`'s default) showed 0.37 on the tiny model, past the 0.25 the two dtypes derive,
so a mismatch failed the run at its first sync. Hence a run whose dtype is `auto` takes the
dtype its replicas serve, and one that names another dtype is refused before its start
push, naming both and the flags that change either (docs/design/run-dtype.md).

A replica that cannot be asked decides nothing here: the start push that follows reports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import structlog

from parity.services.runtime.errors import FailedPrecondition
from parity.services.trainer.compute_defaults import DTYPE_CHOICES
from parity.services.trainer.replicas import ReplicaError, VllmReplica
from parity.services.trainer.run_settings import RunSettings

log = structlog.get_logger(__name__)

_SERVE_FLAGS = "`parity up --vllm-dtype {0}` or `parity vllm serve --dtype {0}`"


def served_dtypes(replicas: Sequence[VllmReplica]) -> dict[str, str]:
    """The dtype each replica that answers serves in, by its URL."""
    served = {}
    for replica in replicas:
        try:
            served[replica.base_url] = replica.served_dtype()
        except ReplicaError as error:
            log.warning("served_dtype_unknown", replica=replica.base_url, error=str(error))
    return served


def settings_for_replicas(settings: RunSettings, replicas: Sequence[VllmReplica]) -> RunSettings:
    """`settings` with the dtype `replicas` serve where the run's was `auto`; FailedPrecondition where the
    run named another, or the replicas serve several or one no run computes in."""
    served = served_dtypes(replicas)
    if not served:
        return settings
    dtypes = sorted(set(served.values()))
    if len(dtypes) > 1:
        each = ", ".join(f"{url} serves {dtype}" for url, dtype in served.items())
        raise FailedPrecondition(
            f"the replicas serve different dtypes ({each}); a run's weights are verified against each, "
            "so start them all with one --dtype"
        )
    (dtype,) = dtypes
    url = next(iter(served))
    if dtype not in DTYPE_CHOICES:
        trainable = [choice for choice in DTYPE_CHOICES if choice != "auto"]
        raise FailedPrecondition(
            f"replica {url} serves {dtype}, which no run computes in ({', '.join(trainable)}); "
            f"serve one of them ({_SERVE_FLAGS.format(trainable[0])})"
        )
    if settings.dtype_auto:
        if dtype != settings.dtype:
            log.info("compute_dtype", detail=f"dtype auto: {dtype} (what replica {url} serves)")
        return dataclasses.replace(settings, dtype=dtype)
    if settings.dtype != dtype:
        raise FailedPrecondition(
            f"the run's dtype is {settings.dtype} but replica {url} serves {dtype}, so its weight sync could not "
            f"verify the replica; set the run's dtype to {dtype} or auto (`parity train --dtype`), or serve "
            f"{settings.dtype} ({_SERVE_FLAGS.format(settings.dtype)})"
        )
    return settings
