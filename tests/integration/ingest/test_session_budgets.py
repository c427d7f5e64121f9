"""Session budgets enforced by a real ingest in front of real vLLM, through the official SDKs: a call past a cap is
refused at once in the called API's own error shape, and recorded with the cap that stopped the session."""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from parity.api.common.v1 import llm_call_pb2
from parity.core import session_slug
from parity.core.session_budget import SessionBudget
from parity.core.session_slug import SessionRef
from tests.integration.stack_fixtures import start_ingest
from tests.time_bounds import Stopwatch, bound_s

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]

SUCCEEDED, CAPPED = llm_call_pb2.CALL_OUTCOME_SUCCEEDED, llm_call_pb2.CALL_OUTCOME_SESSION_CAPPED


def slug(session_id: str, **caps: float) -> str:
    return session_slug.encode(SessionRef(session_id, budget=SessionBudget(**caps)))  # type: ignore[arg-type]


def chat_turn(root: str, model: str, headers: dict[str, str]) -> Callable[[], object]:
    client = openai.OpenAI(
        base_url=f"{root}/v1", api_key="any", max_retries=0, default_headers=headers
    )
    return lambda: client.chat.completions.create(
        model=model, max_tokens=3, messages=[{"role": "user", "content": "Hi"}]
    )


def messages_turn(root: str, model: str, headers: dict[str, str]) -> Callable[[], object]:
    client = anthropic.Anthropic(
        base_url=root, api_key="any", max_retries=0, default_headers=headers
    )
    return lambda: client.messages.create(
        model=model, max_tokens=3, messages=[{"role": "user", "content": "Hi"}]
    )


def responses_turn(root: str, model: str, headers: dict[str, str]) -> Callable[[], object]:
    client = openai.OpenAI(
        base_url=f"{root}/v1", api_key="any", max_retries=0, default_headers=headers
    )
    return lambda: client.responses.create(model=model, max_output_tokens=3, input="Hi")


APIStatusError = openai.APIStatusError | anthropic.APIStatusError


def run_turns(
    turn: Callable[[], object], count: int, took: list[float] | None = None
) -> tuple[int, list[APIStatusError]]:
    """Up to `count` turns, as an agent that goes on after an error would: how many were served, and the errors;
    each turn's seconds appended to `took`."""
    served, errors = 0, list[APIStatusError]()
    for _ in range(count):
        with Stopwatch() as watch:
            try:
                turn()
                served += 1
            except (openai.APIStatusError, anthropic.APIStatusError) as error:
                errors.append(error)
        if took is not None:
            took.append(watch.seconds)
    return served, errors


@pytest.mark.parametrize(("make_turn", "endpoint"), [
    (chat_turn, llm_call_pb2.CALL_ENDPOINT_CHAT_COMPLETIONS),
    (messages_turn, llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES),
    (responses_turn, llm_call_pb2.CALL_ENDPOINT_RESPONSES),
], ids=["chat", "messages", "responses"])  # fmt: skip
def test_a_three_call_cap_stops_a_six_turn_agent_at_call_four_at_once_in_the_apis_own_shape(
    ingest_stack, vllm_server, make_turn, endpoint
) -> None:  # fmt: skip
    session_id = f"capped-{endpoint}"
    turn = make_turn(f"http://127.0.0.1:{ingest_stack.http_port}/sessions/{slug(session_id, calls=3)}",
                     vllm_server.model_name, {})  # fmt: skip
    took: list[float] = []
    served, errors = run_turns(turn, 6, took)
    assert served == 3 and len(errors) == 3
    # At once: a refused call waits on nothing, so it takes no longer than a served one did.
    assert max(took[3:]) <= bound_s(max(took[:3])), took
    first = errors[0]
    assert first.status_code == 400
    message = (
        f"session '{session_id}' reached its cap of 3 calls (calls); ingest serves it no more calls"
    )
    if endpoint == llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES:
        assert first.body == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
        }
    else:
        assert first.body == {
            "message": message,
            "type": "session_budget_exceeded",
            "param": "session",
            "code": 400,
        }
    calls = ingest_stack.calls_after_flush(session_id)
    assert [c.outcome for c in calls] == [SUCCEEDED] * 3 + [CAPPED] * 3
    assert {c.session_cap for c in calls[3:]} == {"calls"} and not calls[0].session_cap
    assert all(c.endpoint == endpoint and not c.choices for c in calls[3:]), (
        "a refused call is recorded, unsent"
    )


def test_a_header_tightens_a_slugs_cap_but_never_loosens_it_and_a_token_cap_stops_the_next_call(
    ingest_stack, vllm_server
) -> None:  # fmt: skip
    root = f"http://127.0.0.1:{ingest_stack.http_port}/sessions"
    model = vllm_server.model_name
    looser = chat_turn(
        f"{root}/{slug('header-loose', calls=2)}", model, {"X-Parity-Budget": "calls=5"}
    )
    assert run_turns(looser, 4)[0] == 2
    tighter = chat_turn(
        f"{root}/{slug('header-tight', calls=5)}",
        model,
        {"X-Parity-Budget": "calls=1, seconds=600"},
    )
    assert run_turns(tighter, 3)[0] == 1
    tokens = chat_turn(f"{root}/token-capped", model, {"X-Parity-Budget": "tokens=1"})
    served, errors = run_turns(tokens, 3)
    assert served == 1 and "reached its cap of 1 tokens (tokens)" in str(errors[0])
    assert [c.session_cap for c in ingest_stack.calls_after_flush("token-capped")] == [
        "",
        "tokens",
        "tokens",
    ]


@pytest.mark.parametrize(("path", "budget", "shape"), [
    ("/v1/chat/completions", "calls=0", "openai"),
    ("/v1/messages", "turns=3", "anthropic"),
    ("/v1/responses", "seconds=soon", "openai"),
])  # fmt: skip
def test_a_bad_budget_header_is_refused_naming_it_and_nothing_is_recorded(
    ingest_stack, vllm_server, path, budget, shape
) -> None:
    body = {
        "model": vllm_server.model_name,
        "max_tokens": 2,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    if path == "/v1/responses":
        body = {"model": vllm_server.model_name, "max_output_tokens": 2, "input": "Hi"}
    response = httpx.post(f"http://127.0.0.1:{ingest_stack.http_port}/sessions/bad-budget{path}", json=body,
                          headers={"X-Parity-Budget": budget}, timeout=30)  # fmt: skip
    assert response.status_code == 400
    error = response.json()["error"]
    assert (
        "X-Parity-Budget" in error["message"]
        if shape == "anthropic"
        else error["param"] == "X-Parity-Budget"
    )
    assert ingest_stack.calls_after_flush("bad-budget") == []


def test_the_serving_default_caps_sessions_that_set_none_and_a_sessions_own_cap_takes_precedence(
    module_services, ingest_stack, vllm_server, tmp_path
) -> None:  # fmt: skip
    ingest, http_port = start_ingest(module_services, ingest_stack.store.address, vllm_server.base_url,
                                     tmp_path / "spool.db", "--session-max-calls", "2", "--session-context", "refuse")  # fmt: skip
    try:
        root, model = f"http://127.0.0.1:{http_port}", vllm_server.model_name
        assert run_turns(chat_turn(f"{root}/sessions/default-capped", model, {}), 3)[0] == 2
        assert (
            run_turns(chat_turn(f"{root}/sessions/{slug('own-cap', calls=3)}", model, {}), 4)[0]
            == 3
        )
        assert run_turns(chat_turn(root, model, {}), 3)[0] == 3, (
            "calls of no session are never capped"
        )
        overrun = {
            "model": model,
            "max_tokens": 2040,
            "messages": [{"role": "user", "content": "Hi"}],
        }
        refused = httpx.post(
            f"{root}/sessions/default-refuses/v1/chat/completions", json=overrun, timeout=60
        )
        assert (refused.status_code, refused.json()["error"]["code"]) == (
            400,
            "context_length_exceeded",
        )
        own = httpx.post(f"{root}/sessions/own-clamp/v1/chat/completions", json=overrun, timeout=120,
                         headers={"X-Parity-Budget": "context=clamp"})  # fmt: skip
        assert own.status_code == 200, (
            "the session's own clamp holds over the default: served, cut if it runs long"
        )
    finally:
        ingest.terminate()


LONG = " ".join(["word"] * 2500)


@pytest.mark.parametrize(("make_turn_for", "endpoint"), [
    ("chat", llm_call_pb2.CALL_ENDPOINT_CHAT_COMPLETIONS),
    ("messages", llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES),
    ("responses", llm_call_pb2.CALL_ENDPOINT_RESPONSES),
])  # fmt: skip
def test_a_prompt_past_the_context_is_refused_as_context_length_exceeded_and_recorded_as_the_sessions_cap(
    ingest_stack, vllm_server, make_turn_for, endpoint
) -> None:  # fmt: skip
    session_id = f"too-long-{make_turn_for}"
    root, model = (
        f"http://127.0.0.1:{ingest_stack.http_port}/sessions/{session_id}",
        vllm_server.model_name,
    )
    with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as refused:
        if make_turn_for == "chat":
            openai.OpenAI(
                base_url=f"{root}/v1", api_key="any", max_retries=0
            ).chat.completions.create(
                model=model, max_tokens=4, messages=[{"role": "user", "content": LONG}]
            )
        elif make_turn_for == "messages":
            anthropic.Anthropic(base_url=root, api_key="any", max_retries=0).messages.create(
                model=model, max_tokens=4, messages=[{"role": "user", "content": LONG}]
            )
        else:
            openai.OpenAI(base_url=f"{root}/v1", api_key="any", max_retries=0).responses.create(
                model=model, max_output_tokens=4, input=LONG
            )
    error = refused.value
    assert "maximum context length is 2048 tokens" in str(error)
    if make_turn_for == "messages":
        assert isinstance(error, anthropic.BadRequestError) and isinstance(error.body, dict)
        assert error.body["error"]["type"] == "invalid_request_error"
    else:
        assert isinstance(error, openai.BadRequestError)
        assert (error.code, error.type, error.param) == (
            "context_length_exceeded",
            "invalid_request_error",
            "messages",
        )
    (call,) = ingest_stack.calls_after_flush(session_id)
    assert (call.outcome, call.session_cap, call.endpoint) == (CAPPED, "context", endpoint)


def test_a_reply_that_would_outgrow_the_context_is_cut_to_fit_with_finish_reason_length(
    ingest_stack, vllm_server
) -> None:
    model = vllm_server.model_name

    def ask(session_id: str, words: int, max_tokens: int):
        client = openai.OpenAI(
            base_url=ingest_stack.session_url(session_id), api_key="any", max_retries=0
        )
        return client.chat.completions.create(
            model=model, max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True},
            messages=[{"role": "user", "content": " ".join(["word"] * words)}],
        )  # fmt: skip

    # A prompt some 30 tokens short of the context, sized from two probes of the template and the tokenizer.
    small, large = (
        ask("cut-probe", 10, 1).usage.prompt_tokens,
        ask("cut-probe", 410, 1).usage.prompt_tokens,
    )
    words = 10 + int((2018 - small) * 400 / (large - small))
    reply = ask("cut-to-fit", words, 500)
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens < 500
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens == 2048
    (call,) = ingest_stack.calls_after_flush("cut-to-fit")
    assert call.outcome == SUCCEEDED and call.choices[0].finish_reason == "length"


def test_a_session_that_refuses_overruns_is_refused_before_anything_is_sampled_on_every_path(
    ingest_stack, vllm_server
) -> None:  # fmt: skip
    model, root = vllm_server.model_name, f"http://127.0.0.1:{ingest_stack.http_port}"
    refusing = session_slug.encode(
        SessionRef("refuses-chat", budget=SessionBudget(context="refuse"))
    )
    chat = openai.OpenAI(base_url=f"{root}/sessions/{refusing}/v1", api_key="any", max_retries=0)
    question: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]
    fits = chat.chat.completions.create(model=model, max_tokens=8, messages=question)
    assert fits.usage is not None
    prompt_tokens = fits.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError) as refused:
        chat.chat.completions.create(
            model=model, max_tokens=2049 - prompt_tokens, messages=question
        )
    assert refused.value.code == "context_length_exceeded"
    assert (f"you requested 2049 tokens ({prompt_tokens} in the messages, {2049 - prompt_tokens} in the completion)"
            in refused.value.message)  # fmt: skip

    anthropic_client = anthropic.Anthropic(base_url=f"{root}/sessions/refuses-messages", api_key="any", max_retries=0,
                                           default_headers={"X-Parity-Budget": "context=refuse"})  # fmt: skip
    with pytest.raises(anthropic.BadRequestError, match="the session's context policy is refuse"):
        anthropic_client.messages.create(
            model=model, max_tokens=2048, messages=[{"role": "user", "content": "Hi"}]
        )

    # exact_history counts the session's exact ids: its second call continues the first's.
    exact = session_slug.encode(SessionRef("refuses-exact", history_mode="exact_history",
                                           budget=SessionBudget(context="refuse")))  # fmt: skip
    client = openai.OpenAI(base_url=f"{root}/sessions/{exact}/v1", api_key="any", max_retries=0)
    first = client.chat.completions.create(model=model, max_tokens=6, messages=question)
    history: list[ChatCompletionMessageParam] = [
        *question,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "More"},
    ]
    with pytest.raises(openai.BadRequestError, match="the session's context policy is refuse"):
        client.chat.completions.create(model=model, max_tokens=2040, messages=history)

    for session_id, served in (("refuses-chat", 1), ("refuses-messages", 0), ("refuses-exact", 1)):
        calls = ingest_stack.calls_after_flush(session_id)
        capped = [c for c in calls if c.outcome == CAPPED]
        assert len(calls) - len(capped) == served and len(capped) == 1, session_id
        assert capped[0].session_cap == "context" and not capped[0].choices, (
            "refused unsent, recorded as the cap"
        )
    (refused_exact,) = [
        c for c in ingest_stack.calls_after_flush("refuses-exact") if c.outcome == CAPPED
    ]
    assert (
        refused_exact.history_mode == llm_call_pb2.HISTORY_MODE_EXACT_HISTORY
        and not refused_exact.history_fallback
    )
