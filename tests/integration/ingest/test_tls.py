"""A store and an ingest serving TLS with a CA of the test's own, tokens checked: the official openai and anthropic
clients reach ingest over HTTPS trusting that CA, ingest writes to the store over TLS, and the call is captured."""

from __future__ import annotations

import ssl
import subprocess

import anthropic
import httpx
import openai
import pytest

from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.clients.transport import ChannelSecurity, open_channel
from parity.services.stack.local_ca import LocalCertificateAuthority
from tests.conftest import free_port
from tests.integration.test_grpcurl import GRPCURL

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]

TOKENS = {role: f"{role}-token-{'y' * 16}" for role in ("read", "agent", "service")}


def test_agents_reach_ingest_over_https_and_calls_reach_the_store_over_tls(
    module_services, vllm_server, tmp_path
) -> None:
    certificates = LocalCertificateAuthority(tmp_path)
    ca = str(certificates.ca_file)
    table = tmp_path / "tokens"
    table.write_text("".join(f"{role} {token}\n" for role, token in TOKENS.items()))
    store_cert, store_key = certificates.issue("store")
    ingest_cert, ingest_key = certificates.issue("ingest")
    reader = ChannelSecurity(token=TOKENS["read"], tls_ca_file=ca)
    auth = ("--auth-tokens-file", str(table))
    store = module_services.start("store", "--url", "memory://", "--tls-cert-file", store_cert, "--tls-key-file", store_key,
                                  *auth, security=reader)  # fmt: skip
    http_port = free_port()
    ingest = module_services.start(
        "ingest", "--upstreams", vllm_server.base_url, "--store", store.address, "--http-port", str(http_port),
        "--spool-path", str(tmp_path / "spool.db"), "--tls-cert-file", ingest_cert, "--tls-key-file", ingest_key, *auth,
        environment={"PARITY_TOKEN": TOKENS["service"], "PARITY_TLS_CA_FILE": ca}, security=reader,
    )  # fmt: skip
    base = f"https://127.0.0.1:{http_port}"

    trust = ssl.create_default_context(cafile=ca)
    chat = openai.OpenAI(base_url=f"{base}/sessions/tls-openai/v1", api_key=TOKENS["agent"],
                         http_client=openai.DefaultHttpxClient(verify=trust))  # fmt: skip
    reply = chat.chat.completions.create(model=vllm_server.model_name, max_tokens=3,
                                         messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert reply.choices[0].message is not None
    messages = anthropic.Anthropic(base_url=f"{base}/sessions/tls-anthropic", api_key=TOKENS["agent"],
                                   http_client=anthropic.DefaultHttpxClient(verify=trust))  # fmt: skip
    message = messages.messages.create(model=vllm_server.model_name, max_tokens=3,
                                       messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert message.usage.output_tokens > 0

    # Not without the CA, and not in plaintext.
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{base}/health", timeout=10)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{http_port}/health", timeout=10)

    flushed = httpx.post(f"{base}/parity/v1/flush", headers={"Authorization": f"Bearer {TOKENS['agent']}"},
                         verify=trust, timeout=60)  # fmt: skip
    assert flushed.json()["captured"] == 2
    with open_channel(store.address, security=reader) as channel:
        stub = store_grpc.TokenStoreServiceStub(channel)
        for session in ("tls-openai", "tls-anthropic"):
            [call] = stub.ListCalls(
                store_pb.ListCallsRequest(session_id=session, view=store_pb.CALL_VIEW_FULL)
            ).calls
            assert call.prompt_token_ids and call.choices[0].token_ids

    grpcurl = subprocess.run(
        [str(GRPCURL), "-cacert", ca, "-H", f"authorization: Bearer {TOKENS['read']}", ingest.address,
         "parity.api.ingest.v1.IngestService/GetStats"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert grpcurl.returncode == 0, grpcurl.stderr
