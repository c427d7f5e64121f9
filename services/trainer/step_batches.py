"""What a step trained on, kept for readers: the batch without its token arrays, and the
advantage the loss gave each sample.

The advantages are computed again here with the same verl estimator and signal weights on
the same tensors the backend trained on; the estimators are deterministic, so they are the
ones the loss used. A distillation step also keeps, per sample, the teacher's and the
student's logprob of each sampled token, so a reader sees where the student departs.
"""

from __future__ import annotations

import numpy as np

from parity.api.assembler.v1 import batch_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.policy_loss import SignalWeights, compute_advantages


def step_batch(
    run_id: str,
    step: int,
    batch: batch_pb2.Batch,
    tensors: TrainingBatch,
    estimator: str,
    weights: SignalWeights,
) -> pb.StepBatch:
    mask = tensors.response_mask
    sampled = mask.sum(dim=1)
    advantages = (compute_advantages(tensors, estimator, weights) * mask).sum(
        dim=1
    ) / sampled.clamp(min=1)
    samples = [
        pb.TrainedSample(
            sample_id=sample.sample_id,
            session_id=sample.session_id,
            trajectory_name=sample.trajectory_name,
            episode_id=sample.episode_id,
            group_id=sample.group_id,
            reward=sample.reward,
            total_return=float(tensors.rewards[row]),
            advantage=float(advantages[row]),
            token_count=len(sample.loss_mask),
            loss_token_count=sample.loss_mask.count(1),
            policy_version=sample.policy_version,
            truncated=sample.truncated,
            call_ids=sample.call_ids,
            end_user_id=sample.end_user_id,
        )  # fmt: skip
        for row, sample in enumerate(batch.samples)
    ]
    if tensors.teacher_logprobs is not None:
        for row, trained in enumerate(samples):
            on = mask[row].bool()
            teacher = tensors.teacher_logprobs[row][on].numpy().astype("<f4")
            student = tensors.rollout_logprobs[row][on].numpy().astype("<f4")
            trained.teacher_logprobs = teacher.tobytes()
            trained.student_logprobs = student.tobytes()
            trained.teacher_gap = float(np.mean(teacher - student)) if len(teacher) else 0.0
    return pb.StepBatch(
        run_id=run_id, step=step, batch_id=batch.batch_id, group_ids=batch.group_ids, stats=batch.stats,
        samples=samples, dropped_group_ids=batch.dropped_group_ids, advantage_estimator=estimator,
    )  # fmt: skip
