"""A distillation teacher checked as StartRun checks it, against real servers: one that shares the
student's tokenizer passes; one with another vocabulary, one that does not answer, and one that
answers without prompt logprobs are refused with a message that says which and why. A teacher's replicas
share a step's samples, and the others score what one that died cannot."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest

from parity.api.common.v1 import sample_pb2
from parity.core import tokens
from parity.services.trainer.teacher import Teacher, TeacherError
from tests.conftest import free_port
from tests.integration.tcp_relay import TcpRelay

pytestmark = [pytest.mark.vllm]


@pytest.fixture
def without_prompt_logprobs(vllm_server) -> Iterator[str]:
    """An OpenAI-compatible server in front of real vLLM that, like most hosted APIs, ignores `prompt_logprobs`."""
    upstream = vllm_server.base_url

    class Handler(BaseHTTPRequestHandler):
        def _relay(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answer = httpx.request(method, upstream + self.path, content=body or None, timeout=60,
                                   headers={"Content-Type": "application/json"})  # fmt: skip
            payload = answer.json()
            for choice in payload.get("choices", []):
                choice.pop("prompt_logprobs", None)
            data = json.dumps(payload).encode()
            self.send_response(answer.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._relay("GET")

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self._relay("POST")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_teacher_sharing_the_students_tokenizer_passes_and_scores_exact_ids(
    vllm_server, tiny_model_dir: Path
) -> None:
    teacher = Teacher(vllm_server.base_url)
    teacher.check(tiny_model_dir)
    assert teacher.model == vllm_server.model_name
    ids = [3, 17, 42, 8, 99, 5]
    sample = sample_pb2.Sample(token_ids=tokens.pack_token_ids(ids))
    (scores,) = teacher.score([sample])
    assert len(scores) == len(ids) and scores[0] == 0.0 and np.all(scores[1:] < 0)


def test_a_teacher_with_another_vocabulary_is_refused_before_any_rollout(
    vllm_server, real_model_dir: Path
) -> None:
    # The tiny model's generated vocabulary is not SmolLM2's.
    with pytest.raises(TeacherError, match="does not share the student's tokenizer") as refused:
        Teacher(vllm_server.base_url).check(real_model_dir)
    assert vllm_server.base_url in str(refused.value) and str(real_model_dir) in str(refused.value)


def test_a_teacher_that_does_not_answer_is_refused(tiny_model_dir: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TeacherError, match=f"teacher at {url} does not answer"):
        Teacher(url).check(tiny_model_dir)


def test_a_teacher_that_returns_no_prompt_logprobs_is_refused(
    without_prompt_logprobs: str, tiny_model_dir: Path
) -> None:
    with pytest.raises(
        TeacherError, match="returns no prompt logprobs for the student's token ids"
    ):
        Teacher(without_prompt_logprobs).check(tiny_model_dir)


def test_a_teachers_replicas_share_a_steps_samples_and_the_others_score_what_a_dead_one_cannot(
    vllm_server, tiny_model_dir: Path
) -> None:  # fmt: skip
    samples = [
        sample_pb2.Sample(token_ids=tokens.pack_token_ids([3, 17, 42, 8, n])) for n in range(16)
    ]
    direct = Teacher(vllm_server.base_url).score(samples)
    # Two replicas of one teacher: each its own address, in front of the same vLLM.
    with TcpRelay(vllm_server.config.port) as first, TcpRelay(vllm_server.config.port) as second:
        urls = [f"http://127.0.0.1:{relay.port}" for relay in (first, second)]
        teacher = Teacher(urls)
        teacher.check(tiny_model_dir)
        taken = first.accepted, second.accepted
        assert all(
            np.allclose(a, b, atol=1e-4)
            for a, b in zip(teacher.score(samples), direct, strict=True)
        )
        assert first.accepted > taken[0] and second.accepted > taken[1], (
            "each replica scored some of the samples"
        )

        second.cut()
        assert all(
            np.allclose(a, b, atol=1e-4)
            for a, b in zip(teacher.score(samples), direct, strict=True)
        )
        first.cut()
        with pytest.raises(TeacherError, match="failed to score the step's samples") as failed:
            teacher.score(samples)
        assert all(url in str(failed.value) for url in urls), "the reason names every replica"


def test_a_replica_that_does_not_answer_refuses_the_whole_teacher_naming_it(
    vllm_server, tiny_model_dir: Path
) -> None:
    gone = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TeacherError, match=f"at {gone} cannot tokenize"):
        Teacher([vllm_server.base_url, gone]).check(tiny_model_dir)
