"""A distillation run's teacher: a server that scores the exact token ids the student sampled.

Any OpenAI-compatible server that returns prompt logprobs for given ids serves (vLLM's
/v1/completions `prompt_logprobs`; the local stack serves a named or folder teacher with its
own vLLM). Each sample's ids go as they are, in one 1-token greedy request, and the teacher's
logprob of every token after the first comes back: scoring never re-tokenizes.

`check` runs at StartRun, before any rollout: the teacher answers, returns prompt logprobs,
and shares the student's tokenizer: its /tokenize of a probe text (special tokens, digits,
accents, CJK, an emoji, code) equals the student tokenizer's ids, and it scores the student's
highest token id. A teacher that stops answering mid-run fails the step with the reason; a
step never trains on missing scores.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import structlog

from parity import tokens
from parity.api.common.v1 import sample_pb2
from parity.services.runtime.errors import FailedPrecondition
from parity.services.trainer.replicas import ReplicaError, VllmReplica

log = structlog.get_logger(__name__)

# A bearer token for a teacher server that wants one (vLLM's VLLM_API_KEY); never part of the run's settings.
API_KEY_ENV = "PARITY_TEACHER_API_KEY"
# Requests in flight at once: the server batches them, and a step's samples are scored in one wave.
CONCURRENCY = 8
# One sample's scoring, queueing behind the others included; past it the teacher is taken as gone.
TIMEOUT_S = 120.0
PROBE_TEXT = "Parity 1234 + 56.7 = ? naïve café, 東京 🙂\n<|im_start|>assistant\ndef f(x):\n\treturn x ** 2  # done"


class TeacherError(FailedPrecondition):
    """The teacher cannot score for this run; the message says which teacher and why."""


class Teacher:
    def __init__(self, url: str, model: str = "", timeout_s: float = TIMEOUT_S) -> None:
        self.url = url
        self._server = VllmReplica(url, timeout_s=timeout_s, api_key=os.environ.get(API_KEY_ENV, ""))
        self._model = model

    @property
    def model(self) -> str:
        """The model scored with: the configured one, else the first the server lists (asked once)."""
        if not self._model:
            try:
                self._model = self._server.model_name()
            except ReplicaError as error:
                raise TeacherError(f"teacher at {self.url} does not answer: {error}") from None
        return self._model

    def check(self, student_model: Path) -> None:
        """Refuse a teacher that cannot score this student's samples; see the module's docstring."""
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(student_model))
        expected = [int(i) for i in tokenizer.encode(PROBE_TEXT, add_special_tokens=False)]
        model = self.model
        try:
            given = self._server.tokenize(PROBE_TEXT, model)
        except ReplicaError as error:
            raise TeacherError(f"teacher {model!r} at {self.url} cannot tokenize (its /tokenize): {error}") from None
        if given != expected:
            raise TeacherError(
                f"teacher {model!r} at {self.url} does not share the student's tokenizer ({student_model}): "
                f"a probe text is {len(given)} tokens there and {len(expected)} here, first differing at token "
                f"{_first_difference(given, expected)}; distillation scores the student's own token ids, so both "
                "models need one vocabulary"
            )  # fmt: skip
        highest = len(tokenizer) - 1
        try:
            self._server.prompt_logprobs([*expected, highest], model)
        except ReplicaError as error:
            raise TeacherError(
                f"teacher {model!r} at {self.url} returns no prompt logprobs for the student's token ids "
                f"(its vocabulary must hold id {highest}): {error}"
            ) from None
        log.info("teacher_checked", url=self.url, model=model, probe_tokens=len(expected))

    def score(self, samples: Sequence[sample_pb2.Sample]) -> list[np.ndarray]:
        """The teacher's logprob of each token of each sample, aligned to its ids (0 for the first)."""
        ids = [tokens.unpack_token_ids(sample.token_ids).tolist() for sample in samples]
        model = self.model
        with ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="teacher") as pool:
            futures = [pool.submit(self._server.prompt_logprobs, row, model) for row in ids]
            try:
                scored = [future.result() for future in futures]
            except ReplicaError as error:
                for future in futures:
                    future.cancel()
                raise TeacherError(f"teacher {model!r} at {self.url} failed to score the step's samples: {error}") from None
        return [np.concatenate([[0.0], values]).astype(np.float32) for values in scored]


def _first_difference(given: list[int], expected: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(given, expected, strict=False)) if a != b), min(len(given), len(expected)))
