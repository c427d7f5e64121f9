"""A distillation teacher's scores laid onto the tokens the student sampled.

A step of a distillation run keeps, per trained sample, the teacher's and the student's
logprob of each sampled token (`TrainedSample.teacher_logprobs`, `student_logprobs`), in
order: the completion tokens of the sample's calls, call after call. Their difference, the
gap, is 0 where the student samples as the teacher would and negative where it departs.
The arrays carry no token ids, so they are placed by count; where the count disagrees with
the calls on the page, what lines up from the start is placed and the page says how many
tokens were left unscored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.core import tokens
from parity.services.console.views.trajectory import CallView, ChoiceView, TrajectorySection

DEPARTURE_GAP = -1.0
"""Teacher minus student logprob (nats) below which a token is marked: the teacher finds it
e (about 2.7) times less likely than the student did when it sampled it."""

Floats = npt.NDArray[np.float32]


@dataclass
class SampleScores:
    sample_id: str
    # The trainer's mean of teacher minus student over the sample's scored tokens.
    mean_gap: float
    # Each call's (teacher, student) logprobs of its first sampled tokens, in call order: all of
    # them when the counts agree.
    calls: dict[str, tuple[Floats, Floats]]
    score_count: int
    # Sampled tokens of the sample's calls found on the page.
    token_count: int
    truncated: bool

    @property
    def placed(self) -> int:
        return sum(len(teacher) for teacher, _ in self.calls.values())

    @property
    def unscored(self) -> int:
        return self.token_count - self.placed

    @property
    def unplaced(self) -> int:
        return self.score_count - self.placed

    @property
    def mismatch(self) -> bool:
        """Counts that disagree: scores left over, or tokens unscored that no truncation explains
        (a truncated sample was scored only up to its cut)."""
        return self.unplaced > 0 or (self.unscored > 0 and not self.truncated)


def align_scores(
    sample: trainer_pb.TrainedSample, sampled: Mapping[str, int]
) -> SampleScores | None:
    """Place a sample's scores on its calls' sampled tokens, given how many each call sampled
    (the choice the sample followed); None for a sample no teacher scored."""
    if not sample.teacher_logprobs:
        return None
    teacher = tokens.unpack_floats(sample.teacher_logprobs)
    student = tokens.unpack_floats(sample.student_logprobs)
    count = min(len(teacher), len(student))
    calls: dict[str, tuple[Floats, Floats]] = {}
    placed = token_count = 0
    for call_id in sample.call_ids:
        if call_id not in sampled:
            # A call the page does not have: where its tokens end, and so where the next call's start, is unknown.
            break
        take = min(sampled[call_id], count - placed)
        calls[call_id] = (teacher[placed : placed + take], student[placed : placed + take])
        placed += take
        token_count += sampled[call_id]
    return SampleScores(
        sample.sample_id, sample.teacher_gap, calls, count, token_count, sample.truncated
    )


def mark_trajectory(view: TrajectorySection, samples: list[trainer_pb.TrainedSample]) -> list[str]:
    """Give each scored token of the trajectory its logprobs and mark, and the trajectory each
    sample's mean gap; returns a banner for each sample whose counts disagree."""
    calls = {call.call.call_id: call for call in view.calls}
    banners = []
    for sample in samples:
        followed = {
            call_id: choice
            for call_id in sample.call_ids
            if call_id in calls and (choice := _followed_choice(calls[call_id], sample.sample_id))
        }
        scores = align_scores(sample, {call_id: len(c.tokens) for call_id, c in followed.items()})
        if scores is None:
            continue
        for call_id, (teacher, student) in scores.calls.items():
            shown = followed[call_id].tokens[: len(teacher)]
            for token, t, s in zip(shown, teacher.tolist(), student.tolist(), strict=True):
                token.teacher, token.student, token.departs = t, s, t - s < DEPARTURE_GAP
        where = _span([calls[call_id].position for call_id in sample.call_ids if call_id in calls])
        view.teacher_gaps.append((where, scores.mean_gap))
        if scores.mismatch:
            banners.append(_mismatch(view, where or f"sample {sample.sample_id}", scores))
    return banners


def _mismatch(view: TrajectorySection, where: str, scores: SampleScores) -> str:
    left = [f"{count:,} {noun}{'s' if count != 1 else ''} {what}"
            for count, noun, what in ((scores.unscored, "token", "unscored"), (scores.unplaced, "score", "with no token"))
            if count]  # fmt: skip
    return (
        f"trajectory {view.name or '(unnamed)'}, {where}: the teacher scored {scores.score_count:,} "
        f"tokens where its calls on this page sampled {scores.token_count:,}; the scores are "
        f"placed from the start, {' and '.join(left)}"
    )


def _followed_choice(call: CallView, sample_id: str) -> ChoiceView | None:
    """The choice whose tokens the sample trained on. Without the assembler's samples the
    choices cannot be told apart: the first that sampled anything (a call samples one choice
    unless its request asked for more)."""
    return next((c for c in call.choices if sample_id in c.sample_ids), None) or next(
        (c for c in call.choices if c.tokens), None
    )


def _span(positions: list[int]) -> str:
    if not positions:
        return ""
    if len(positions) == 1:
        return f"call {positions[0]}"
    return f"calls {positions[0]}–{positions[-1]}"
