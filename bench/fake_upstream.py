"""A vLLM-shaped upstream that answers instantly, for load benchmarks only.

It speaks just enough HTTP/1.1 (keep-alive, Content-Length bodies) to answer
/v1/models, /health and /v1/chat/completions with canned vLLM responses, streamed
or not, including `prompt_token_ids`, `token_ids` and logprobs when asked. It is
never used by tests: those run against real vLLM.

    python bench/fake_upstream.py --port 9100
"""

from __future__ import annotations

import argparse
import asyncio
import json

import uvloop

MODEL = "bench-model"
PROMPT_IDS = list(range(100, 400))
COMPLETION_IDS = list(range(1000, 1032))


def _choice(with_tokens: bool) -> dict:
    logprobs = {
        "content": [{"token": "x", "logprob": -0.5, "bytes": [120], "top_logprobs": []}]
        * len(COMPLETION_IDS)
    }
    return {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": "x" * len(COMPLETION_IDS),
            "refusal": None,
            "tool_calls": [],
        },
        "logprobs": logprobs if with_tokens else None,
        "finish_reason": "length",
        "stop_reason": None,
        "token_ids": COMPLETION_IDS if with_tokens else None,
    }


def _completion(with_tokens: bool) -> bytes:
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [_choice(with_tokens)],
        "usage": {"prompt_tokens": len(PROMPT_IDS), "completion_tokens": len(COMPLETION_IDS),
                  "total_tokens": len(PROMPT_IDS) + len(COMPLETION_IDS)},
        "prompt_token_ids": PROMPT_IDS if with_tokens else None,
    }).encode()  # fmt: skip


def _stream(with_tokens: bool) -> bytes:
    events = [{"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                            "finish_reason": None}],
               "prompt_token_ids": PROMPT_IDS if with_tokens else None}]  # fmt: skip
    for position, token in enumerate(COMPLETION_IDS):
        last = position == len(COMPLETION_IDS) - 1
        events.append({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
                       "choices": [{"index": 0, "delta": {"content": "x"},
                                    "logprobs": {"content": [{"token": "x", "logprob": -0.5, "bytes": [120],
                                                              "top_logprobs": []}]} if with_tokens else None,
                                    "finish_reason": "length" if last else None,
                                    "token_ids": [token] if with_tokens else None}]})  # fmt: skip
    return (
        b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    )


def _response(status: bytes, content_type: bytes, body: bytes) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type + b"\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\nConnection: keep-alive\r\n\r\n" + body)  # fmt: skip


RESPONSES = {
    (False, False): _response(b"200 OK", b"application/json", _completion(False)),
    (False, True): _response(b"200 OK", b"application/json", _completion(True)),
    (True, False): _response(b"200 OK", b"text/event-stream", _stream(False)),
    (True, True): _response(b"200 OK", b"text/event-stream", _stream(True)),
}
MODELS = _response(
    b"200 OK", b"application/json", json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode()
)


class FakeVllm(asyncio.Protocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            length_at = head.find(b"content-length:")
            length = (
                int(
                    head[
                        length_at + 15 : head.find(b"\r\n", length_at)
                        if head.find(b"\r\n", length_at) > 0
                        else None
                    ]
                )
                if length_at >= 0
                else 0
            )
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            if head.startswith(b"get"):
                self.transport.write(MODELS)
            else:
                stream = b'"stream": true' in body or b'"stream":true' in body
                tokens = b'"return_token_ids": true' in body or b'"return_token_ids":true' in body
                self.transport.write(RESPONSES[stream, tokens])


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(
        FakeVllm, "127.0.0.1", port, backlog=4096
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    uvloop.run(serve(parser.parse_args().port))
