"""Every captured call names its end user and tags, whichever API it came through and however the agent said who
it serves (the session's slug, the X-Parity-* headers, the API's own field): official SDKs against a real ingest,
store and vLLM. A recording relay between ingest and vLLM shows what reaches vLLM."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import anthropic
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

import parity
from parity.core.attribution import TAGS_HEADER, USER_HEADER
from parity.core.session_slug import SessionRef, encode
from tests.conftest import free_port
from tests.integration.stack_fixtures import IngestStack, start_ingest

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(300)]

# The same message in each API's request type.
HI_CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]
HI_MESSAGES: list[MessageParam] = [{"role": "user", "content": "Hi"}]


class RecordingRelay:
    """A TCP relay to vLLM that keeps every byte ingest sends through it: the requests vLLM gets, headers and all."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self._sent = bytearray()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> RecordingRelay:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", self.port), self._loop
        ).result(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def sent(self) -> bytes:
        with self._lock:
            return bytes(self._sent)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self.target_port
        )

        async def pipe(
            source: asyncio.StreamReader, sink: asyncio.StreamWriter, record: bool
        ) -> None:
            while data := await source.read(1 << 16):
                if record:
                    with self._lock:
                        self._sent += data
                sink.write(data)
                await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer, True), pipe(upstream_reader, writer, False),
                             return_exceptions=True)  # fmt: skip


@pytest.fixture(scope="module")
def relay(vllm_server) -> Iterator[RecordingRelay]:
    with RecordingRelay(vllm_server.config.port) as running:
        yield running


@pytest.fixture(scope="module")
def stack(module_services, relay, tmp_path_factory) -> IngestStack:
    data = tmp_path_factory.mktemp("attribution")
    store = module_services.start("store", "--url", f"sqlite:///{data}/store.db")
    ingest, http_port = start_ingest(module_services, store.address, f"http://127.0.0.1:{relay.port}",
                                     data / "spool.db")  # fmt: skip
    return IngestStack(store, ingest, http_port, data / "spool.db")


def openai_client(stack: IngestStack, slug: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=stack.session_url(slug), api_key="any-key", max_retries=0, default_headers=headers
    )


def anthropic_client(stack: IngestStack, slug: str, **headers: str) -> anthropic.Anthropic:
    # Anthropic clients add /v1/messages to the base URL themselves.
    return anthropic.Anthropic(base_url=stack.session_url(slug).removesuffix("/v1"), api_key="any-key", max_retries=0,
                               default_headers=headers)  # fmt: skip


def attribution(stack: IngestStack, session_id: str) -> tuple[str, list[str]]:
    [call] = stack.calls_after_flush(session_id)
    return call.end_user_id, list(call.tags)


def test_the_headers_name_the_user_and_tags_of_every_api_and_never_reach_vllm(
    stack, relay, vllm_server
) -> None:
    model = vllm_server.model_name
    headers = {USER_HEADER: "acct-7", TAGS_HEADER: "prod,checkout , prod"}
    openai_client(stack, "headers-chat", **headers).chat.completions.create(
        model=model, messages=HI_CHAT, max_tokens=2
    )
    openai_client(stack, "headers-responses", **headers).responses.create(
        model=model, input="Hi", max_output_tokens=2
    )
    anthropic_client(stack, "headers-messages", **headers).messages.create(
        model=model, max_tokens=2, messages=HI_MESSAGES
    )
    for session_id in ("headers-chat", "headers-responses", "headers-messages"):
        assert attribution(stack, session_id) == ("acct-7", ["checkout", "prod"]), session_id
    assert b"acct-7" not in relay.sent and b"x-parity" not in relay.sent.lower()


def test_the_apis_own_user_fields_name_the_user_and_openais_still_reaches_vllm(
    stack, relay, vllm_server
) -> None:
    model = vllm_server.model_name
    openai_client(stack, "field-chat").chat.completions.create(
        model=model, messages=HI_CHAT, max_tokens=2, user="acct-chat"
    )
    openai_client(stack, "field-responses").responses.create(model=model, input="Hi", max_output_tokens=2,
                                                              user="acct-responses")  # fmt: skip
    anthropic_client(stack, "field-messages").messages.create(model=model, max_tokens=2, messages=HI_MESSAGES,
                                                              metadata={"user_id": "acct-messages"})  # fmt: skip
    assert attribution(stack, "field-chat") == ("acct-chat", [])
    assert attribution(stack, "field-responses") == ("acct-responses", [])
    assert attribution(stack, "field-messages") == ("acct-messages", [])
    # Chat bodies go to vLLM as the agent sent them, `user` included.
    assert b'"user":"acct-chat"' in relay.sent


def test_the_session_slug_names_the_user_first_and_its_tags_join_the_headers(
    stack, vllm_server
) -> None:
    model = vllm_server.model_name
    with parity.session("slug-user", user="acct-slug", tags=["beta"]):
        base_url = parity.session_url(f"http://127.0.0.1:{stack.http_port}")
    client = openai.OpenAI(base_url=base_url, api_key="any-key", max_retries=0,
                           default_headers={USER_HEADER: "acct-header", TAGS_HEADER: "prod"})  # fmt: skip
    client.chat.completions.create(model=model, messages=HI_CHAT, max_tokens=2, user="acct-body")
    assert attribution(stack, "slug-user") == ("acct-slug", ["beta", "prod"])
    # Without the slug's user, the header comes before the body's field.
    slug = encode(SessionRef("slug-tags-only", tags=("beta",)))
    anthropic_client(stack, slug, **{USER_HEADER: "acct-header"}).messages.create(
        model=model, max_tokens=2, messages=HI_MESSAGES, metadata={"user_id": "acct-body"}
    )
    assert attribution(stack, "slug-tags-only") == ("acct-header", ["beta"])


def test_a_bad_tags_header_is_refused_in_each_apis_shape_and_nothing_is_recorded(
    stack, vllm_server
) -> None:
    model, bad = vllm_server.model_name, {TAGS_HEADER: "prod, has\ttab"}
    with pytest.raises(openai.BadRequestError) as chat:
        openai_client(stack, "bad-tags-chat", **bad).chat.completions.create(
            model=model, messages=HI_CHAT, max_tokens=2
        )
    with pytest.raises(openai.BadRequestError) as responses:
        openai_client(stack, "bad-tags-responses", **bad).responses.create(
            model=model, input="Hi", max_output_tokens=2
        )
    for refused in (chat.value, responses.value):
        assert refused.status_code == 400 and refused.param == TAGS_HEADER
        assert refused.type == "invalid_request_error" and "has\\ttab" in refused.message
    with pytest.raises(anthropic.BadRequestError) as messages:
        anthropic_client(stack, "bad-tags-messages", **bad).messages.create(
            model=model, max_tokens=2, messages=HI_MESSAGES
        )
    body = messages.value.body
    assert messages.value.status_code == 400 and isinstance(body, dict)
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(f"{TAGS_HEADER}: ")
    too_long = openai_client(stack, "bad-user-chat", **{USER_HEADER: "u" * 300})
    with pytest.raises(openai.BadRequestError, match="at most 256") as user:
        too_long.chat.completions.create(model=model, messages=HI_CHAT, max_tokens=2)
    assert user.value.param == USER_HEADER
    for session_id in ("bad-tags-chat", "bad-tags-responses", "bad-tags-messages", "bad-user-chat"):
        assert stack.calls_after_flush(session_id) == []
