"""Simulated end users of the deployed calculator agent: they ask, some rate the answer later, some leave.

Each user asks a few word problems, each in a session of their own through the users'
ingest, tagged with the user's cohort. The agent is the calculator tutorial's
(`examples/calculator/agent.py`), unchanged: deploying it only pointed it at ingest. A user
knows whether an answer was right, as a user reading it would:

- most rate it, late (after the session, in a random order): `thumbs_up` when right,
  `thumbs_down` when wrong, each a signal of value 1 that the training rule weighs;
- the others never say anything;
- a few ask, after their sessions, for their data to be deleted.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import openai

import parity
from examples.calculator.agent import solve

MAX_TOKENS = 16


@dataclass(frozen=True)
class Visit:
    """One session of one user, and what the simulation knows about it."""

    user: str
    session_id: str
    cohort: str
    correct: bool


@dataclass(frozen=True)
class Population:
    users: int
    feedback_share: float
    """Users who rate their answers; the rest never do."""
    deletion_share: float
    """Users who ask for their data to be deleted after their sessions."""
    seed: int = 0

    def people(self) -> list[tuple[str, bool, bool]]:
        """(user id, rates answers, asks for deletion) for each user."""
        rng = random.Random(self.seed)
        return [(f"user-{index:03d}", rng.random() < self.feedback_share, rng.random() < self.deletion_share)
                for index in range(self.users)]  # fmt: skip


async def visit(user: str, task: dict[str, Any], cohort: str, model: str) -> Visit:
    """The deployed agent serving one question of `user`, in a session of its own."""
    async with parity.session(user=user, tags=["prod", cohort]) as ref:
        try:
            reward = await solve(
                {**task, "model": model, "max_tokens": MAX_TOKENS, "temperature": 1.0}
            )
        except openai.APIError:
            reward = 0.0  # an answer the user never got is a wrong one
    return Visit(user, ref.session_id, cohort, reward == 1.0)


async def traffic(
    tasks: Sequence[dict[str, Any]], users: Sequence[str], cohorts: Sequence[str], model: str, concurrency: int, seed: int,
    cohort_models: Mapping[str, str] | None = None,
) -> list[Visit]:  # fmt: skip
    """One visit per task, by users and cohorts drawn in turn, `concurrency` at a time; a cohort in
    `cohort_models` (a tenant) asks for its own model name instead of `model`."""
    rng = random.Random(seed)
    order = [
        (task, rng.choice(users), cohorts[index % len(cohorts)]) for index, task in enumerate(tasks)
    ]
    gate = asyncio.Semaphore(concurrency)

    async def one(task: dict[str, Any], user: str, cohort: str) -> Visit:
        async with gate:
            return await visit(user, task, cohort, (cohort_models or {}).get(cohort, model))

    return list(await asyncio.gather(*(one(*entry) for entry in order)))


def rate_late(visits: Sequence[Visit], raters: set[str], seed: int) -> int:
    """Feedback from the users who rate, in a random order after the sessions: returns how many signals were sent."""
    rated = [v for v in visits if v.user in raters]
    random.Random(seed).shuffle(rated)
    for v in rated:
        parity.feedback(
            v.session_id,
            1.0,
            name="thumbs_up" if v.correct else "thumbs_down",
            feedback_id=f"{v.session_id}-rating",
        )
    return len(rated)
