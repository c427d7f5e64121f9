"""Promotion: a candidate reaches the serving replicas only through the gate, and one call takes it back.

A trainer deployed for production has two sets of vLLM replicas. Its own (`--replicas`)
receive every update of a run: they serve its rollouts and validations, never users.
The serving ones (`--serving-replicas`, behind the users' ingests, `--serving-ingest-address`)
change only here:

1. The gate (`gate.judge`) compares the run's validation at the checkpoint's
   step with its validation at step 0.
2. Step 0 measured the model the run started from; the serving replicas must serve that
   model, or the comparison says nothing about them. Their probe logprobs are compared
   with the start model's own.
3. The checkpoint is exported as a model folder (or adapter) under `<work_dir>/serving/`
   and loaded with the verified weight push: the serving ingests hold traffic, every
   replica loads it and must score the probe as the exported policy does, and the ingests
   move to a new policy version. A push that fails puts the replaced policy back.

With a canary share, step 3 waits: the candidate is pushed into the trainer's own
replicas instead, and the serving ingests send that share of sessions to them, stamped
with its version, until a promotion without a share (which ends the canary) or a
rollback (which ends it and changes nothing else).

A LoRA candidate promoted under a model name of its own (`served_model`, one tenant's)
reaches only the users whose agents ask for that name: the serving replicas load the
adapter under it, and only its route in the serving ingests is held, verified and
versioned. Until then a model alias (`--model-alias 'NAME=BASE'` on those ingests)
sends such agents to the base model; a rollback of the name's first promotion withdraws
the route, so they are served so again.

Every decision, refusals included, goes to the promotion log; a rollback pushes back
what the last standing promotion replaced.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import structlog

from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.clients import RPCError
from parity.services.runtime.errors import FailedPrecondition, InvalidArgument, Unavailable
from parity.services.trainer.checkpoints import CheckpointInfo
from parity.services.trainer.lora import ADAPTER_WEIGHTS
from parity.services.trainer.peers import IngestFleet, TrainerDeployment
from parity.services.trainer.policy_export import export_policy
from parity.services.trainer.promotion.gate import GateResult, judge
from parity.services.trainer.promotion.log import (
    CANARY,
    PROMOTED,
    REFUSED,
    ROLLED_BACK,
    PromotionLog,
    PromotionRecord,
    ServedPolicy,
)
from parity.services.trainer.replicas import ReplicaError, VllmReplica
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.step_metrics import StepRecord
from parity.services.trainer.weight_sync import (
    ReplicaResult,
    SyncFailed,
    SyncResult,
    WeightSync,
    model_probe,
)

log = structlog.get_logger(__name__)

SERVING_DIR = "serving"


class Promotions:
    def __init__(self, deployment: TrainerDeployment) -> None:
        self.log = PromotionLog(deployment.work_dir)
        self._folder = deployment.work_dir / SERVING_DIR
        self._ingests = IngestFleet(deployment.serving_ingest_addresses)
        replicas = [
            VllmReplica(url, api_key=deployment.replica_api_key)
            for url in deployment.serving_replica_urls
        ]
        self._sync = WeightSync(
            replicas,
            self._folder,
            probe=[],
            tolerance=deployment.sync_tolerance,
            ingests=self._ingests,
        )
        self._lock = threading.Lock()

    def promote(
        self, checkpoint: CheckpointInfo, validations: Sequence[StepRecord], metric: str, margin: float,
        canary_share: float = 0.0, candidate_replicas: WeightSync | None = None, served_model: str = "",
    ) -> PromotionRecord:  # fmt: skip
        """Serve the checkpoint to users if it passes the gate; with `canary_share`, first to that share of sessions
        from `candidate_replicas` (the trainer's own); with `served_model`, only to the users asking for it."""
        if not math.isfinite(margin) or margin < 0:
            raise InvalidArgument(f"margin must be a finite number >= 0, got {margin}")
        if not math.isfinite(canary_share) or not 0 <= canary_share <= 1:
            raise InvalidArgument(f"canary_share must be between 0 and 1, got {canary_share}")
        self._require_replicas()
        if served_model:
            self._check_served_model(
                served_model, bool(checkpoint.settings.lora_rank), canary_share
            )
        with self._lock:
            settings = checkpoint.settings
            gate = judge(validations, checkpoint.step, metric, margin)
            if not gate.passed:
                return self._refuse(checkpoint, gate, gate.reason)
            probe = model_probe(settings.model_path)
            start = self._start_policy(checkpoint, probe)
            mismatch = self._mismatch(start, served_model)
            if mismatch:
                return self._refuse(checkpoint, gate, (
                    f"the serving replicas do not serve the model run {checkpoint.run_id} started from ({mismatch}), "
                    "so its step-0 validation did not measure what serves; train from the serving policy"
                ))  # fmt: skip
            promotion_id = self.log.next_id()
            path, _ = export_policy(checkpoint, self._folder / promotion_id, merge_lora=False)
            candidate = ServedPolicy(
                checkpoint.run_id, checkpoint.checkpoint_id, str(path), bool(settings.lora_rank), probe,
                policy_probe(settings, probe, path), settings.dtype,
            )  # fmt: skip
            current = self._serving_version(served_model)
            canary = None if served_model else self.log.running_canary()
            if canary is not None and canary.checkpoint_id == checkpoint.checkpoint_id:
                version = (
                    canary.policy_version
                )  # the same weights its canary calls were stamped with
            else:
                version = max(checkpoint.policy_version, self._fresh_version(current))
            record = PromotionRecord(
                promotion_id, PROMOTED, checkpoint.run_id, checkpoint.checkpoint_id, version, gate.metric, gate.baseline,
                gate.candidate, margin, "", time.time(), path=str(path), served_model=served_model,
            )  # fmt: skip
            if canary_share > 0:
                return self._start_canary(record, candidate, canary_share, candidate_replicas)
            result = self._push_or_restore(candidate, version, start, current, served_model)
            if canary is not None:
                self._set_canary([], 0.0, 0)  # everyone gets the promoted policy now
            log.info("policy_promoted", promotion_id=promotion_id, checkpoint_id=checkpoint.checkpoint_id,
                     policy_version=version, metric=metric, baseline=gate.baseline, candidate=gate.candidate,
                     served_model=served_model)  # fmt: skip
            return self.log.append(
                replace(
                    record,
                    max_logprob_diff=result.max_logprob_diff,
                    served=candidate,
                    replaced=start,
                )
            )

    def rollback(self, served_model: str = "") -> PromotionRecord:
        """End a running canary; otherwise serve again what the last standing promotion (under `served_model`)
        replaced."""
        self._require_replicas()
        with self._lock:
            canary = None if served_model else self.log.running_canary()
            if canary is not None:
                self._set_canary([], 0.0, 0)
                log.info("canary_ended", promotion_id=canary.promotion_id)
                return self.log.append(PromotionRecord(
                    self.log.next_id(), ROLLED_BACK, canary.run_id, canary.checkpoint_id, self._serving_version(),
                    canary.metric, math.nan, math.nan, canary.margin,
                    f"ended the canary of {canary.promotion_id}: the serving replicas serve every session", time.time(),
                ))  # fmt: skip
            standing = self.log.standing(served_model)
            if not standing:
                raise FailedPrecondition(
                    f"no promotion under served_model {served_model!r} stands: its users get the base model"
                    if served_model
                    else "no promotion stands: the serving replicas serve what they were started with"
                )
            undone = standing[-1]
            restored = undone.replaced
            assert restored is not None  # every promotion records what it replaced
            current = self._serving_version(served_model)
            result = self._push_or_restore(
                restored, self._fresh_version(current), undone.served, current, served_model
            )
            record = PromotionRecord(
                self.log.next_id(), ROLLED_BACK, restored.run_id, restored.checkpoint_id, result.policy_version,
                undone.metric, math.nan, math.nan, undone.margin, f"took back {undone.promotion_id}: {restored.describe()} serves again",
                time.time(), result.max_logprob_diff, restored.folder, served=restored, served_model=served_model,
            )  # fmt: skip
            log.info(
                "policy_rolled_back",
                undone=undone.promotion_id,
                policy_version=result.policy_version,
                served_model=served_model,
            )
            return self.log.append(record)

    def canary_running(self) -> str:
        """The promotion whose canary serves from the trainer's replicas; empty when none does."""
        canary = self.log.running_canary()
        return canary.promotion_id if canary else ""

    def decisions(self) -> list[PromotionRecord]:
        """Newest first."""
        return list(reversed(self.log.records()))

    def highest_policy_version(self) -> int:
        """The highest version a promotion or rollback stamped: runs start past it."""
        return self.log.highest_policy_version()

    # ----- steps

    def _require_replicas(self) -> None:
        if not self._sync.replicas:
            raise FailedPrecondition(
                "this trainer has no serving replicas: start it with --serving-replicas (and --serving-ingest-address) "
                "to promote into them"
            )

    def _check_served_model(self, served_model: str, lora: bool, canary_share: float) -> None:
        if not lora:
            raise InvalidArgument(
                f"served_model {served_model!r} needs a LoRA run's checkpoint: a whole model's weights would change "
                "what every user is served"
            )
        if canary_share:
            raise InvalidArgument(
                "served_model and canary_share do not combine: a canary serves a share of every user's sessions"
            )
        try:
            base = self._sync.replicas[0].model_name()
        except ReplicaError as error:
            raise Unavailable(f"serving replica: {error}") from None
        if served_model == base:
            raise InvalidArgument(
                f"served_model must not be {base!r}, the serving replicas' own model: its users are every user "
                "(leave served_model empty to serve them all)"
            )

    def _refuse(self, checkpoint: CheckpointInfo, gate: GateResult, reason: str) -> PromotionRecord:
        record = PromotionRecord(
            self.log.next_id(), REFUSED, checkpoint.run_id, checkpoint.checkpoint_id, 0, gate.metric, gate.baseline,
            gate.candidate, gate.margin, reason, time.time(),
        )  # fmt: skip
        log.info("promotion_refused", checkpoint_id=checkpoint.checkpoint_id, reason=reason)
        return self.log.append(record)

    def _start_policy(self, checkpoint: CheckpointInfo, probe: list[int]) -> ServedPolicy:
        """The model the run started from, as the serving replicas would load it back."""
        settings = checkpoint.settings
        if settings.lora_rank:
            folder = (
                ""  # the base model, no adapter: LoRA runs never change the replicas' base weights
            )
        elif any(settings.model_path.glob("*.safetensors")):
            folder = str(settings.model_path.resolve())
        else:
            raise FailedPrecondition(
                f"model_path {settings.model_path} holds no safetensors weights, so a rollback could not load it back "
                "into the serving replicas"
            )
        return ServedPolicy(
            checkpoint.run_id,
            "",
            folder,
            False,
            probe,
            policy_probe(settings, probe),
            settings.dtype,
        )

    def _mismatch(self, policy: ServedPolicy, served_model: str) -> str:
        """Why the serving replicas do not serve `policy` as users (asking for `served_model`) reach it; empty when
        they all do."""
        adapter = self._served_adapter(served_model)
        results = {
            r.base_url: ReplicaResult(r.base_url, False, math.nan, adapter=adapter)
            for r in self._sync.replicas
        }
        self._sync.verify(policy.pushed(), results)
        if unscored := next((r for r in results.values() if math.isnan(r.max_logprob_diff)), None):
            raise Unavailable(f"serving replica {unscored.replica}: {unscored.error}")
        return "; ".join(
            f"{r.replica}: probe logprobs differ by {r.max_logprob_diff:.3g}, tolerance {r.tolerance:g}"
            for r in results.values() if not r.verified
        )  # fmt: skip

    def _served_adapter(self, served_model: str) -> str:
        """The adapter the serving ingests send users' requests (for `served_model`) to; empty when they send them
        to the base model."""
        for stats in self._ingest_stats()[:1]:
            route = next(
                (r for r in stats.routes if r.policy_model == served_model and r.lora_adapter), None
            )
            return str(route.lora_adapter if route is not None else stats.lora_adapter)
        return ""

    def _ingest_stats(self) -> list[ingest_pb.GetStatsResponse]:
        found = []
        for ingest in self._ingests.members():
            try:
                found.append(ingest.get_stats(ingest_pb.GetStatsRequest()))
            except RPCError as error:
                raise Unavailable(f"serving ingest at {ingest.address}: {error}") from None
        return found

    def _start_canary(
        self,
        record: PromotionRecord,
        candidate: ServedPolicy,
        share: float,
        replicas: WeightSync | None,
    ) -> PromotionRecord:
        if replicas is None or not replicas.replicas:
            raise FailedPrecondition(
                "a canary is served from the trainer's own replicas (--replicas); it has none"
            )
        result = replicas.push(candidate.pushed(), record.policy_version)
        self._set_canary(
            [replica.base_url for replica in replicas.replicas], share, record.policy_version
        )
        log.info(
            "canary_started",
            promotion_id=record.promotion_id,
            share=share,
            policy_version=record.policy_version,
        )
        return self.log.append(
            replace(
                record, outcome=CANARY, canary_share=share, max_logprob_diff=result.max_logprob_diff
            )
        )

    def _set_canary(self, upstreams: list[str], share: float, policy_version: int) -> None:
        request = ingest_pb.SetCanaryRequest(
            upstreams=upstreams, share=share, policy_version=policy_version
        )
        self._sync.on_every_ingest(lambda ingest: ingest.set_canary(request))

    def _serving_version(self, served_model: str = "") -> int:
        """The version users' calls (for `served_model`'s route) are stamped with now."""
        if self._ingests and served_model:
            return max((int(r.policy_version) for stats in self._ingest_stats() for r in stats.routes
                        if r.policy_model == served_model), default=0)  # fmt: skip
        if self._ingests:
            return self._ingests.highest_policy_version()
        served = [
            record for record in self.log.records() if record.outcome in (PROMOTED, ROLLED_BACK)
        ]
        return served[-1].policy_version if served else 0

    def _fresh_version(self, serving: int) -> int:
        """A version no policy was served under yet, here or in a canary."""
        return max(serving, self.log.highest_policy_version()) + 1

    def _push_or_restore(
        self,
        policy: ServedPolicy,
        version: int,
        fallback: ServedPolicy | None,
        current: int,
        served_model: str,
    ) -> SyncResult:
        """Push `policy` (under `served_model`'s route); if the push fails, push `fallback` back at the version that
        serves now, then raise."""
        sync = replace(self._sync, route_model=served_model)
        try:
            return sync.push(policy.pushed(), version)
        except SyncFailed as error:
            if fallback is None:
                raise
            try:
                sync.push(fallback.pushed(), current)
            except SyncFailed as restore_error:
                raise SyncFailed(
                    f"{error}; putting {fallback.describe()} back failed too: {restore_error}"
                ) from None
            raise SyncFailed(f"{error}; {fallback.describe()} serves again") from None


def policy_probe(
    settings: RunSettings, probe: list[int], folder: Path | None = None
) -> list[float]:
    """A policy's own logprobs of `probe`, by the cpu backend's forward pass in the run's dtype: the model the run
    started from, or the weights (a LoRA run: the adapter) in `folder`."""
    from parity.services.trainer.backends.cpu import CpuBackend

    lora_adapter = folder if folder is not None and settings.lora_rank else None
    model_path = folder if folder is not None and not settings.lora_rank else settings.model_path
    backend = CpuBackend(replace(settings, model_path=model_path, backend="cpu", kl_coef=0.0))
    try:
        if lora_adapter is not None:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(backend.model, load_file(lora_adapter / ADAPTER_WEIGHTS))
        return backend.probe_logprobs(probe)
    finally:
        backend.close()
