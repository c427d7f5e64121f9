"""A distillation run's teacher: servers that score the exact token ids the student sampled.

Any OpenAI-compatible server that returns prompt logprobs for given ids serves (vLLM's
/v1/completions `prompt_logprobs`; the local stack serves a named or folder teacher with its
own vLLM). Each sample's ids go as they are, in one 1-token greedy request, and the teacher's
logprob of every token after the first comes back: scoring never re-tokenizes.

A teacher may run as several replicas of one model. A step's samples are spread over them,
each to the replica with the fewest of this step's requests in flight (a prompt-logprobs
request reuses no prefix cache, so nothing is gained by keeping a group on one replica), and
a sample one replica fails to score is tried on the others.

`check` runs at StartRun, before any rollout, on every replica: it answers, returns prompt
logprobs, and shares the student's tokenizer: its /tokenize of a probe text (special tokens,
digits, accents, CJK, an emoji, code) equals the student tokenizer's ids, and it scores the
student's highest token id. A sample that no replica scores fails the step with each one's
reason; a step never trains on missing scores.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import structlog

from parity.api.common.v1 import sample_pb2
from parity.core import tokens
from parity.services.runtime.errors import FailedPrecondition
from parity.services.trainer.replicas import ReplicaError, VllmReplica

log = structlog.get_logger(__name__)

# A bearer token for a teacher server that wants one (vLLM's VLLM_API_KEY); never part of the run's settings.
API_KEY_ENV = "PARITY_TEACHER_API_KEY"
# Requests in flight at once on each replica: the server batches them, and a step's samples are scored in one wave.
CONCURRENCY = 8
# One request, queueing behind the others included; past it the replica counts as failed for that sample.
TIMEOUT_S = 120.0
PROBE_TEXT = "Parity 1234 + 56.7 = ? naïve café, 東京 🙂\n<|im_start|>assistant\ndef f(x):\n\treturn x ** 2  # done"


class TeacherError(FailedPrecondition):
    """The teacher cannot score for this run; the message says which teacher and why."""


class Teacher:
    def __init__(
        self, urls: str | Sequence[str], model: str = "", timeout_s: float = TIMEOUT_S
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        api_key = os.environ.get(API_KEY_ENV, "")
        self._replicas = [
            VllmReplica(url, timeout_s=timeout_s, api_key=api_key) for url in self.urls
        ]
        self._model = model
        self._in_flight = [0] * len(self._replicas)
        # Replicas that failed a request of the step being scored: the rest of its samples go elsewhere first.
        self._failed: set[int] = set()
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        """The model scored with: the configured one, else the first the first replica lists (asked once)."""
        if not self._model:
            try:
                self._model = self._replicas[0].model_name()
            except ReplicaError as error:
                raise TeacherError(f"teacher at {self.urls[0]} does not answer: {error}") from None
        return self._model

    def check(self, student_model: Path) -> None:
        """Refuse a teacher any replica of which cannot score this student's samples; see the module's docstring."""
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(student_model))
        expected = [int(i) for i in tokenizer.encode(PROBE_TEXT, add_special_tokens=False)]
        highest = len(tokenizer) - 1
        for url, replica in zip(self.urls, self._replicas, strict=True):
            self._check_replica(url, replica, expected, highest, student_model)
        log.info("teacher_checked", urls=self.urls, model=self.model, probe_tokens=len(expected))

    def _check_replica(
        self, url: str, replica: VllmReplica, expected: list[int], highest: int, student: Path
    ) -> None:
        model = self.model
        try:
            given = replica.tokenize(PROBE_TEXT, model)
        except ReplicaError as error:
            raise TeacherError(
                f"teacher {model!r} at {url} cannot tokenize (its /tokenize): {error}"
            ) from None
        if given != expected:
            raise TeacherError(
                f"teacher {model!r} at {url} does not share the student's tokenizer ({student}): "
                f"a probe text is {len(given)} tokens there and {len(expected)} here, first differing at token "
                f"{_first_difference(given, expected)}; distillation scores the student's own token ids, so both "
                "models need one vocabulary"
            )  # fmt: skip
        try:
            replica.prompt_logprobs([*expected, highest], model)
        except ReplicaError as error:
            raise TeacherError(
                f"teacher {model!r} at {url} returns no prompt logprobs for the student's token ids "
                f"(its vocabulary must hold id {highest}): {error}"
            ) from None

    def score(self, samples: Sequence[sample_pb2.Sample]) -> list[np.ndarray]:
        """The teacher's logprob of each token of each sample, aligned to its ids (0 for the first)."""
        ids = [tokens.unpack_token_ids(sample.token_ids).tolist() for sample in samples]
        model = self.model
        self._failed.clear()
        pool = ThreadPoolExecutor(CONCURRENCY * len(self._replicas), thread_name_prefix="teacher")
        try:
            futures = [pool.submit(self._score_one, row, model) for row in ids]
            scored = [future.result() for future in futures]
        finally:
            # After a failure the step ends at once: requests still in flight finish unread, none more start.
            pool.shutdown(wait=False, cancel_futures=True)
        return [np.concatenate([[0.0], values]).astype(np.float32) for values in scored]

    def _score_one(self, ids: list[int], model: str) -> list[float]:
        """One sample's scores from the least busy replica, then from each other one in turn while they fail."""
        failures: list[str] = []
        untried = set(range(len(self._replicas)))
        while untried:
            with self._lock:
                chosen = min(
                    untried,
                    key=lambda index: (index in self._failed, self._in_flight[index], index),
                )
                self._in_flight[chosen] += 1
            untried.discard(chosen)
            try:
                return self._replicas[chosen].prompt_logprobs(ids, model)
            except ReplicaError as error:
                failures.append(str(error))
                with self._lock:
                    self._failed.add(chosen)
                log.warning("teacher_replica_failed", url=self.urls[chosen], error=str(error))
            finally:
                with self._lock:
                    self._in_flight[chosen] -= 1
        raise TeacherError(f"teacher {model!r} at {', '.join(self.urls)} failed to score the step's samples: "
                           + "; ".join(failures))  # fmt: skip


def _first_difference(given: list[int], expected: list[int]) -> int:
    return next(
        (i for i, (a, b) in enumerate(zip(given, expected, strict=False)) if a != b),
        min(len(given), len(expected)),
    )
