"""A distillation teacher's scores land on the tokens the student sampled, call after call, and
the batch and session pages show them only when the step had a teacher."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from starlette.testclient import TestClient

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import trajectory_pb2
from parity.api.common.v1 import llm_call_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import RPCError
from parity.core import tokens
from parity.services.assembler.samples import LengthLimit, build_samples
from parity.services.assembler.trajectories import split_trajectories
from parity.services.console.app import create_app
from parity.services.console.settings import ConsoleConfig
from parity.services.console.upstream import Services, Upstream
from parity.services.console.views.sessions import RUN_KEY
from parity.services.console.views.teacher_gap import align_scores, mark_trajectory
from parity.services.console.views.token_text import TokenTexts
from parity.services.console.views.trajectory import build_trajectory

TEACHER = [-0.1, -0.2, -3.0, -0.4, -0.5]
STUDENT = [-0.1, -0.1, -0.5, -0.4, -0.2]


def trained(
    call_ids: list[str], count: int = 5, truncated: bool = False, teacher: bool = True
) -> trainer_pb.TrainedSample:
    sample = trainer_pb.TrainedSample(sample_id="s-0", session_id="s", trajectory_name="", group_id="g",
                                      call_ids=call_ids, truncated=truncated, loss_token_count=count)  # fmt: skip
    if teacher:
        sample.teacher_logprobs = tokens.pack_floats(TEACHER[:count])
        sample.student_logprobs = tokens.pack_floats(STUDENT[:count])
        sample.teacher_gap = (
            sum(t - s for t, s in zip(TEACHER[:count], STUDENT[:count], strict=True)) / count
        )
    return sample


def test_scores_follow_the_calls_of_a_sample_in_order() -> None:
    scores = align_scores(trained(["c0", "c1"]), {"c0": 3, "c1": 2})
    assert scores is not None and not scores.mismatch and scores.unscored == 0
    assert scores.calls["c0"][0].tolist() == pytest.approx(TEACHER[:3])
    assert scores.calls["c1"][1].tolist() == pytest.approx(STUDENT[3:])


def test_a_truncated_sample_is_scored_up_to_its_cut() -> None:
    scores = align_scores(trained(["c0", "c1"], count=4, truncated=True), {"c0": 3, "c1": 2})
    assert scores is not None and len(scores.calls["c1"][0]) == 1
    assert scores.unscored == 1 and not scores.mismatch, "the cut tail was never trained on"


def test_counts_that_disagree_are_placed_from_the_start_and_reported() -> None:
    short = align_scores(trained(["c0", "c1"], count=4), {"c0": 3, "c1": 2})
    assert short is not None and short.mismatch and short.unscored == 1
    over = align_scores(trained(["c0", "c1"]), {"c0": 2, "c1": 2})
    assert over is not None and over.mismatch and (over.placed, over.unplaced) == (4, 1)
    # A call missing from the page: where the next call's tokens start is unknown.
    gone = align_scores(trained(["c0", "c1"]), {"c1": 2})
    assert gone is not None and gone.calls == {} and gone.unplaced == 5


def test_a_sample_no_teacher_scored_has_no_scores() -> None:
    assert align_scores(trained(["c0", "c1"], teacher=False), {"c0": 3, "c1": 2}) is None


def llm_call(index: int, prompt: list[int], completion: list[int]) -> llm_call_pb2.LlmCall:
    request = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    made = llm_call_pb2.LlmCall(call_id=f"c{index}", session_id="s", model="m", request_json=request,
                                prompt_token_ids=tokens.pack_token_ids(prompt))  # fmt: skip
    made.choices.add(index=0, token_ids=tokens.pack_token_ids(completion),
                     logprobs=tokens.pack_floats([-0.1] * len(completion)), finish_reason="stop")  # fmt: skip
    return made


def test_a_sample_forked_by_a_second_choice_is_scored_on_the_choice_it_followed() -> None:
    first = llm_call(0, [1, 2], [10, 11, 12])
    first.choices.add(index=1, token_ids=tokens.pack_token_ids([30, 31]), finish_reason="stop")
    second = llm_call(1, [1, 2, 30, 31, 5], [20, 21])
    (trajectory,), _ = split_trajectories("s", [first, second], [])
    built = build_samples(trajectory, "s", "g", LengthLimit()).samples
    view = build_trajectory("", [first, second],
                            trajectory_pb2.Trajectory(session_id="s", samples=built), TokenTexts(None, "none"))  # fmt: skip
    forked = trained(["c0", "c1"], count=4)
    forked.sample_id = next(s.sample_id for s in built if "c1" in s.call_ids)
    assert mark_trajectory(view, [forked]) == []
    choices = view.calls[0].choices
    assert [t.teacher for t in choices[0].tokens] == [None] * 3
    assert [
        t.teacher for t in choices[1].tokens + view.calls[1].choices[0].tokens
    ] == pytest.approx(TEACHER[:4])
    assert [t.departs for t in view.calls[1].choices[0].tokens] == [True, False]
    assert view.teacher_gaps == [("calls 1–2", forked.teacher_gap)]


# The pages, over fake services.
CALLS = [llm_call(0, [1, 2], [10, 11, 12]), llm_call(1, [1, 2, 10, 11, 12, 5], [20, 21])]


def services(samples: list[trainer_pb.TrainedSample]) -> Services:
    (trajectory,), _ = split_trajectories("s", CALLS, [])
    built = build_samples(trajectory, "s", "g", LengthLimit())
    assembled = trajectory_pb2.Trajectory(session_id="s", samples=built.samples)
    session = session_pb2.Session(
        session_id="s", state=session_pb2.SESSION_STATE_CLOSED, metadata={RUN_KEY: "r"}
    )

    def step_batch(request: trainer_pb.GetStepBatchRequest) -> trainer_pb.GetStepBatchResponse:
        if request.step != 1:
            raise RPCError(grpc.StatusCode.NOT_FOUND, f"run r has no step {request.step}")
        return trainer_pb.GetStepBatchResponse(
            batch=trainer_pb.StepBatch(run_id="r", step=1, group_ids=["g"], samples=samples)
        )

    # Fakes of the typed clients: the methods the pages call, answering with real messages.
    store: Any = SimpleNamespace(
        get_session=lambda _: store_pb.GetSessionResponse(session=session),
        list_calls=lambda _: store_pb.ListCallsResponse(calls=CALLS),
        list_rewards=lambda _: store_pb.ListRewardsResponse(),
    )
    assembler: Any = SimpleNamespace(
        get_trajectory=lambda _: assembler_pb.GetTrajectoryResponse(trajectory=assembled),
        list_trajectories=lambda _: assembler_pb.ListTrajectoriesResponse(),
    )
    trainer: Any = SimpleNamespace(
        get_run=lambda _: trainer_pb.GetRunResponse(run=run_pb2.Run(run_id="r", step=1)),
        get_step_batch=step_batch,
    )
    return Services(
        Upstream("store", "-", store),
        Upstream("assembler", "-", assembler),
        Upstream("trainer", "-", trainer),
    )


def page(samples: list[trainer_pb.TrainedSample], path: str) -> str:
    app = create_app(ConsoleConfig(port=0), services(samples))
    with TestClient(app) as client:
        response = client.get(path)
    assert response.status_code == 200, response.text
    return response.text


def test_the_batch_page_shows_each_rollouts_teacher_gap_only_with_a_teacher() -> None:
    html = page([trained(["c0", "c1"])], "/runs/r/steps/1")
    assert ">teacher gap</th>" in html and "negative where it departs" in html
    assert "-0.5800" in html and 'href="/sessions/s?run=r&amp;step=1"' in html
    assert "teacher gap" not in page([trained(["c0", "c1"], teacher=False)], "/runs/r/steps/1")


def test_the_session_page_marks_where_the_student_departs_from_its_teacher() -> None:
    html = page([trained(["c0", "c1"])], "/sessions/s?run=r&step=1")
    spans = re.findall(
        r'<span class="([^"]*)" data-i="(\d+)"[^>]*data-t="([^"]+)" data-s="([^"]+)"', html
    )
    # Four decimals on the page: these values survive them exactly.
    assert [(int(i), float(t), float(s)) for _, i, t, s in spans] == list(
        zip([10, 11, 12, 20, 21], TEACHER, STUDENT, strict=True)
    )
    assert [i for css, i, _, _ in spans if "dep" in css.split()] == ["12"], (
        "only a gap below -1 nat is marked"
    )
    assert 'class="teacher-legend"' in html and "-0.5800" in html and "unscored" not in html
    plain = page([trained(["c0", "c1"])], "/sessions/s")
    assert plain == page([trained(["c0", "c1"], teacher=False)], "/sessions/s?run=r&step=1")
    assert "data-t=" not in plain and "teacher-legend" not in plain


def test_the_session_page_says_how_many_tokens_went_unscored() -> None:
    html = page([trained(["c0", "c1"], count=3)], "/sessions/s?run=r&step=1")
    assert "the teacher scored 3 tokens where its calls on this page sampled 5" in html
    assert "2 tokens unscored" in html and html.count("data-t=") == 3
    missing = page([trained(["c0", "c1"])], "/sessions/s?run=r&step=7")
    assert "run r has no step 7; the teacher&#39;s scores at step 7 are not shown" in missing
