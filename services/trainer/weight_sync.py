"""Weight sync: pause ingest, push the new weights into every replica, verify them, bump the version, resume.

A LoRA run pushes its adapter instead of the model: every replica loads it under one
name beside its base model (`lora.adapter_name`), the probe is scored through it, and
ingest is told, with the new version, to send requests for the base model to it. Of
several runs trained at once, each pushes under a name of its own (`route_model`) and
holds and versions only its own agents' requests.

Verification scores a fixed probe sequence on each replica and on the trainer's own
forward pass; a replica whose logprobs differ by more than the tolerance fails the
sync. Unless one is set, the tolerance follows from the dtypes the trainer and the
replica compute in (see `probe_tolerance`). Traffic resumes either way (held agents
must not hang), but a failed sync raises `SyncFailed` and the run stops: it never
trains on against stale weights.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import structlog
from google.protobuf import duration_pb2

from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.clients import IngestClient, RPCError
from parity.services.runtime.addresses import UnresolvedAddress
from parity.services.runtime.errors import FailedPrecondition
from parity.services.trainer.backends.base import TrainingBackend
from parity.services.trainer.lora import adapter_name
from parity.services.trainer.peers import IngestFleet
from parity.services.trainer.probe_tolerance import probe_tolerance
from parity.services.trainer.replicas import ReplicaError, VllmReplica

log = structlog.get_logger(__name__)

UNREACHABLE_RETRY_S = 0.5

PROBE_LENGTH = 64
KEEP_WEIGHT_VERSIONS = 2


class SyncFailed(FailedPrecondition):
    """A replica did not take the new weights, or serves logprobs that differ from the trainer's."""


@dataclass
class ReplicaResult:
    replica: str
    verified: bool
    max_logprob_diff: float
    error: str = ""
    tolerance: float = float("nan")
    adapter: str = ""
    """The name the replica serves the pushed adapter under, in a LoRA run."""
    policy_model: str = ""
    """The base model the adapter serves, in a LoRA run: the name agents ask for."""


@dataclass
class SyncResult:
    policy_version: int
    replicas: list[ReplicaResult]
    durations_s: dict[str, float]
    complete_time: float = field(default_factory=time.time)

    @property
    def max_logprob_diff(self) -> float:
        return max((r.max_logprob_diff for r in self.replicas), default=0.0)

    @property
    def verified(self) -> bool:
        return all(r.verified for r in self.replicas)


@dataclass(frozen=True)
class PushedPolicy:
    """Weights the replicas load from a folder, and what they must then score on the probe."""

    folder: Path | None
    """A model folder (safetensors and config) or a LoRA adapter's; None: the replicas' base model as loaded,
    no adapter (what a LoRA deployment served before its first adapter)."""
    adapter: bool
    """The folder holds a LoRA adapter, served beside the base model under one name."""
    probe: list[int]
    """The token ids every replica scores to show it serves the policy."""
    expected: list[float] | None
    """The policy's own logprobs of the probe's tokens after the first; None: not verified."""
    dtype: str = "float32"
    """What `expected` was computed in; with each replica's dtype it sets the tolerance."""


def probe_tokens(vocab_size: int, length: int = PROBE_LENGTH, seed: int = 0) -> list[int]:
    """A fixed pseudo-random token sequence: it touches embeddings, attention and the head alike."""
    return np.random.default_rng(seed).integers(0, vocab_size, size=length).tolist()


def model_probe(model_path: Path) -> list[int]:
    """The probe for a model folder: drawn from its whole vocabulary."""
    return probe_tokens(int(json.loads((model_path / "config.json").read_text())["vocab_size"]))


@dataclass
class WeightSync:
    replicas: Sequence[VllmReplica]
    weights_dir: Path
    probe: list[int]
    tolerance: float = 0.0
    """Largest probe difference a verified replica may show; 0 derives it per replica from the dtypes."""
    ingests: IngestFleet = field(default_factory=lambda: IngestFleet(()))
    """Every ingest replica in front of the replicas; none in tests and offline use: nothing to pause or version."""
    drain_timeout_s: float = 120.0
    """How long each ingest has to finish its requests in flight, and one that cannot be reached to come back."""
    route_model: str = ""
    """One of several runs trained at once on the replicas' base model: the name its adapter is served under,
    which its agents ask for. Only requests for it are held, and only its route is versioned in ingest; other
    runs' traffic flows on. Empty: the only run, which holds all traffic and serves `lora.adapter_name`."""

    def sync(
        self, backend: TrainingBackend, policy_version: int, verify: bool = True
    ) -> SyncResult:
        """Push the backend's weights as `policy_version`, verified against its own forward pass."""
        target = self.weights_dir / f"policy-v{policy_version:06d}"
        if target.exists():
            shutil.rmtree(target)
        started = time.perf_counter()
        backend.save_weights(target)
        saved_s = time.perf_counter() - started
        expected = backend.probe_logprobs(self.probe) if verify else None
        policy = PushedPolicy(
            target, bool(backend.settings.lora_rank), self.probe, expected, backend.settings.dtype
        )
        result = self.push(policy, policy_version, extra_push_s=saved_s)
        self._prune(keep=target)
        return result

    def push(
        self, policy: PushedPolicy, policy_version: int, extra_push_s: float = 0.0
    ) -> SyncResult:
        """Load `policy` into every replica with traffic held, verify it, and move every ingest to `policy_version`."""
        durations: dict[str, float] = {}
        held_everything = False
        started = time.perf_counter()
        phase = time.perf_counter()
        self.hold(f"weight sync to policy version {policy_version}")
        durations["pause"] = time.perf_counter() - phase
        try:
            phase = time.perf_counter()
            results = {
                r.base_url: ReplicaResult(r.base_url, False, float("nan")) for r in self.replicas
            }
            for replica in self.replicas:
                outcome = results[replica.base_url]
                try:
                    if policy.folder is None:
                        # The base model as loaded: requests stop going to any adapter, a route's withdrawn.
                        outcome.policy_model = self.route_model
                    elif policy.adapter:
                        outcome.policy_model = self.route_model or replica.model_name()
                        outcome.adapter = self.route_model or adapter_name(outcome.policy_model)
                        replica.load_adapter(outcome.adapter, policy.folder.resolve())
                    else:
                        replica.reload_weights(policy.folder.resolve())
                except ReplicaError as error:
                    outcome.error = str(error)
            durations["push"] = time.perf_counter() - phase + extra_push_s
            phase = time.perf_counter()
            if self.route_model and policy.expected is not None:
                # vLLM 0.32 on CPU scores prompt logprobs through an adapter only alone in its batch: beside
                # other requests, its LoRA logits path fails and the engine dies. Every run's agents wait.
                held_everything = True
                self.hold(
                    f"verifying {self.route_model} at policy version {policy_version}",
                    everything=True,
                )
            self.verify(policy, results)
            durations["verify"] = time.perf_counter() - phase
            result = SyncResult(policy_version, list(results.values()), durations)
            if not result.verified:
                for replica in self.replicas:
                    if not results[replica.base_url].verified:
                        # It may have been restarted with other flags: ask it afresh next time.
                        replica.forget_server_info()
                failures = "; ".join(
                    f"{r.replica}: {r.error}" for r in result.replicas if not r.verified
                )
                raise SyncFailed(
                    f"weight sync to policy version {policy_version} failed: {failures}"
                )
            # Every replica serves the same base model, so the adapter's name is the same on each.
            policy_model, adapter = next(
                ((r.policy_model, r.adapter) for r in result.replicas), ("", "")
            )
            request = ingest_pb.SetPolicyVersionRequest(
                policy_version=policy_version, policy_model=policy_model, lora_adapter=adapter,
                route=bool(self.route_model),
            )  # fmt: skip
            self.on_every_ingest(lambda ingest: ingest.set_policy_version(request))
        finally:
            phase = time.perf_counter()
            self.release(everything=held_everything)
            durations["resume"] = time.perf_counter() - phase
            durations["total"] = time.perf_counter() - started + extra_push_s
        log.info(
            "weights_synced", policy_version=policy_version, max_logprob_diff=result.max_logprob_diff,
            tolerance=min((r.tolerance for r in result.replicas), default=None),
            **{f"{name}_s": round(value, 3) for name, value in durations.items()},
        )  # fmt: skip
        return result

    def verify(self, policy: PushedPolicy, results: dict[str, ReplicaResult]) -> None:
        """Score the probe on each replica without an error in `results` (through its `adapter`), against the
        policy's own logprobs; each result says whether it matched within the tolerance."""
        if policy.expected is None:
            return
        expected = np.array(policy.expected)
        for replica in self.replicas:
            outcome = results[replica.base_url]
            if outcome.error:
                continue
            try:
                outcome.tolerance = self.tolerance or probe_tolerance(
                    policy.dtype, replica.served_dtype()
                )
                served = np.array(replica.prompt_logprobs(policy.probe, model=outcome.adapter))
            except (ReplicaError, ValueError) as error:
                outcome.error = str(error)
                continue
            outcome.max_logprob_diff = float(np.max(np.abs(served - expected)))
            outcome.verified = outcome.max_logprob_diff <= outcome.tolerance
            if not outcome.verified:
                outcome.error = (
                    f"probe logprobs differ by {outcome.max_logprob_diff:.3g} (tolerance {outcome.tolerance:g}); "
                    "the replica is not serving the pushed weights"
                )

    def hold(self, reason: str, everything: bool = False) -> None:
        """Pause every ingest (only this run's route, unless `everything`); returns once each has finished
        its requests in flight. Idempotent.

        The ingests drain at once, each holding its new requests meanwhile, so no request of any of them
        meets the new weights half way. One that does not answer within the drain timeout fails the sync."""
        request = ingest_pb.PauseTrafficRequest(
            reason=reason,
            drain_timeout=duration_pb2.Duration(seconds=int(self.drain_timeout_s)),
            policy_model="" if everything else self.route_model,
        )
        try:
            self.on_every_ingest(
                lambda ingest: ingest.pause_traffic(request, timeout_s=self.drain_timeout_s + 30)
            )
        except SyncFailed:
            # The others paused: they must not stay so because one failed.
            with contextlib.suppress(SyncFailed):
                self.release(everything)
            raise

    def release(self, everything: bool = False) -> None:
        """Resume every ingest (this run's route, unless `everything`: then every hold), even when some cannot be
        reached: those are named in the failure."""
        request = ingest_pb.ResumeTrafficRequest(
            policy_model="" if everything else self.route_model
        )
        self.on_every_ingest(lambda ingest: ingest.resume_traffic(request))

    def on_every_ingest(self, call: Callable[[IngestClient], object]) -> None:
        """`call` on each ingest at once; every one is tried, and the failures are raised together."""
        if not self.ingests:
            return
        try:
            members = self.ingests.members()
        except UnresolvedAddress as error:
            raise SyncFailed(f"ingest {error}") from None
        deadline = time.monotonic() + self.drain_timeout_s
        with ThreadPoolExecutor(max_workers=len(members)) as pool:
            outcomes = list(pool.map(lambda ingest: _attempt(call, ingest, deadline), members))
        failures = [f"ingest at {ingest.address}: {error}" for ingest, error in zip(members, outcomes, strict=True)
                    if error is not None]  # fmt: skip
        if failures:
            raise SyncFailed("; ".join(failures))

    def _prune(self, keep: Path) -> None:
        """Old weight folders go; the live one and its predecessor stay (a replica may still be reading it)."""
        versions = sorted(p for p in self.weights_dir.glob("policy-v*") if p.is_dir())
        for old in versions[:-KEEP_WEIGHT_VERSIONS]:
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)


def _attempt(
    call: Callable[[IngestClient], object], ingest: IngestClient, deadline: float
) -> RPCError | None:
    """`call`'s error, if any. An ingest that cannot be reached is tried again until `deadline`: one restarting
    (a pod rescheduled, a process killed and started again) rejoins the sync instead of failing the run."""
    while True:
        try:
            call(ingest)
        except RPCError as error:
            if error.code != grpc.StatusCode.UNAVAILABLE or time.monotonic() >= deadline:
                return error
        else:
            return None
        time.sleep(UNREACHABLE_RETRY_S)
