"""`parity train --env verifiers:PACKAGE`: an installed verifiers environment's tasks and rewards, played by Parity's
harness through the stack the run brings up, with no network.

The environments are the two test packages in verifiers_envs/, installed into .venv-verifiers by `make env` (verifiers
0.4 needs openai <3, the project's environment has 3). The sums run is single-turn and whole replies; the lookup run
is multi-turn with a tool server verifiers starts as a local process, streamed, its first call required to call the
tool (a random test model calls none on its own).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import grpc
import numpy as np
import pytest

from parity.api.store.v1 import store_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2_grpc as pb_grpc
from parity.training.settings import SettingsError, TrainSettings
from parity.training.verifiers_environment import environment_tasks
from tests.conftest import REPO_ROOT

VERIFIERS_PYTHON = REPO_ROOT / ".venv-verifiers" / "bin" / "python"


@pytest.fixture(scope="module")
def verifiers_python() -> str:
    if not VERIFIERS_PYTHON.exists():
        pytest.fail(f"{VERIFIERS_PYTHON} is missing: `make env` builds it", pytrace=False)
    return str(VERIFIERS_PYTHON)


def train(runs: Path, run_id: str, *flags: str) -> dict:
    finished = subprocess.run(
        [sys.executable, "-m", "parity.cli", "train", "--no-progress", *flags, "--model", "tiny-test",
         "--checkpoint-interval", "0", "--no-export", "--output-dir", str(runs), "--run-id", run_id],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=840,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-4000:]
    return json.loads(finished.stdout.strip().splitlines()[-1])


def calls_by_session(start_service, store_db: Path) -> dict[str, list]:
    store = start_service("store", "--url", f"sqlite:///{store_db}")
    sessions: dict[str, list] = defaultdict(list)
    with grpc.insecure_channel(store.address) as channel:
        stub = pb_grpc.TokenStoreServiceStub(channel)
        for session in stub.ListSessions(pb.ListSessionsRequest(page_size=1000)).sessions:
            listed = stub.ListCalls(pb.ListCallsRequest(session_id=session.session_id, page_size=1000,
                                                        view=pb.CALL_VIEW_FULL))  # fmt: skip
            sessions[session.session_id] = list(listed.calls)
    return sessions


def ids(data: bytes) -> list[int]:
    return np.frombuffer(data, dtype="<i4").tolist()


@pytest.mark.parametrize(
    ("values", "key", "message"),
    [
        (
            {"env": "verifiers:parity-vf-sumz"},
            "env",
            "no verifiers environment 'parity-vf-sumz' in ",
        ),
        (
            {"env_options": {"num_tasks": "many"}},
            "env_options",
            "parity-vf-sums refused them: num_tasks: ",
        ),
        (
            {"env_options": {"colour": "red"}},
            "env_options",
            "colour: Extra inputs are not permitted",
        ),
        ({"env_size": 200}, "env_size", "parity-vf-sums has 100 tasks"),
        (
            {
                "env": "verifiers:parity-vf-lookup",
                "env_options": {"task": {"tools": {"runtime": {"type": "docker"}}}},
            },
            "env",
            "tool server LookupToolset runs in a docker runtime",
        ),
    ],
)
def test_what_cannot_run_is_refused_before_anything_starts(
    verifiers_python, values, key, message
) -> None:
    settings = TrainSettings(
        **({"env": "verifiers:parity-vf-sums", "env_python": verifiers_python} | values)
    )
    with pytest.raises(SettingsError, match=message) as refused:
        environment_tasks(settings)
    assert refused.value.key == key
    if key == "env" and "sumz" in settings.env:
        assert "installed: parity-vf-lookup, parity-vf-sums" in refused.value.message


def test_the_first_tasks_train_and_the_next_are_held_out(verifiers_python) -> None:
    settings = TrainSettings(
        env="verifiers:parity-vf-sums", env_python=verifiers_python, env_size=5, env_val_size=3
    )
    train_tasks, held_out = environment_tasks(settings)
    assert [task["verifiers"]["index"] for task in train_tasks + held_out] == list(range(8))
    assert (
        train_tasks[0]["prompt"].startswith("What is ")
        and train_tasks[0]["id"] == "parity-vf-sums-0"
    )
    assert environment_tasks(settings) == (train_tasks, held_out)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_single_turn_environment_trains_with_its_own_rewards(
    tmp_path, verifiers_python, start_service
) -> None:
    runs = tmp_path / "runs"
    result = train(
        runs, "sums", "--env", "verifiers:parity-vf-sums", "--env-python", verifiers_python,
        "--env-size", "8", "--env-val-size", "4", "--steps", "2", "--groups-per-batch", "2",
        "--rollouts-per-task", "4", "--max-tokens", "8",
    )  # fmt: skip
    assert (result["state"], result["steps"]) == ("completed", 2), result
    run_dir = runs / "sums"
    validations = [
        row
        for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if row["kind"] == "validation"
    ]
    assert [row["step"] for row in validations] == [0, 2]
    assert all(row["failed"] == 0 for row in validations), validations
    # The rewards are the environment's: its shaping reward alone (a random model's sums are wrong) is
    # 0.1 x (1 - length / 200), so every rollout earned something below 0.1.
    assert 0 < validations[0]["reward"] < 0.1
    sessions = calls_by_session(start_service, run_dir / "stack" / "store.db")
    # 2 steps of 2 groups of 4 rollouts, and the 4 held-out tasks validated before and after.
    assert len(sessions) >= 2 * 2 * 4 + 4 * 2
    for calls in sessions.values():
        (call,) = calls
        request = json.loads(call.request_json)
        # The run's sampling settings, not the environment's or the harness's.
        assert request["max_tokens"] == 8 and not call.streamed
        assert request["messages"][-1]["content"].startswith("What is ")


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_multi_turn_environment_calls_its_tool_and_every_turn_is_captured(
    tmp_path, verifiers_python, start_service
) -> None:
    runs = tmp_path / "runs"
    result = train(
        runs, "lookup", "--env", "verifiers:parity-vf-lookup", "--env-python", verifiers_python,
        "--env-size", "4", "--env-val-size", "2", "--env-stream", "--env-require-tool", "--steps", "1",
        "--groups-per-batch", "2", "--rollouts-per-task", "4", "--max-tokens", "48",
    )  # fmt: skip
    assert (result["state"], result["steps"]) == ("completed", 1), result
    sessions = calls_by_session(start_service, runs / "lookup" / "stack" / "store.db")
    assert sessions
    for calls in sessions.values():
        assert len(calls) >= 2, [json.loads(call.request_json)["messages"] for call in calls]
        first, second = calls[0], calls[1]
        assert first.streamed and second.streamed
        tool_calls = json.loads(first.choices[0].tool_calls_json)
        assert tool_calls and {call["function"]["name"] for call in tool_calls} == {"codes_lookup"}
        messages = json.loads(second.request_json)["messages"]
        results = [message["content"] for message in messages if message["role"] == "tool"]
        assert len(results) == len(tool_calls)
        # The tool server answered each call the model made (a code, or none for a made-up word), and the answer
        # reached the model. Arguments cut short by max_tokens get the harness's error; arguments without the word
        # (empty ones are no arguments, as in the OpenAI API) get the tool server's, naming the field.
        for tool_call, result in zip(tool_calls, results, strict=True):
            try:
                word = json.loads(tool_call["function"]["arguments"] or "{}")["word"]
            except (ValueError, KeyError, TypeError):
                assert result.startswith("error: ") or (
                    result.startswith("Error executing tool lookup") and "word" in result
                ), result
            else:
                assert result == f"no code for {word!r}" or re.fullmatch(r"[A-Z]-\d\d", result), (
                    word,
                    result,
                )
        # The second call continues the first: its prompt starts with the first call's, token for token.
        assert ids(second.prompt_token_ids)[: len(ids(first.prompt_token_ids))] == ids(
            first.prompt_token_ids
        )
