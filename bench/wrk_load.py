"""wrk, the load generator: a request sent on every connection, saturated or paced, and what wrk reports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

# The request every load sends unless it names another; the stub answers it at once.
MODEL = "bench-model"
QUESTION = "What is 2 + 3? Answer with a number."
BODY = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 32}
# The same request in each protocol ingest serves. /v1/messages and /v1/responses are
# translated to the chat call the stub answers, so their rows price the translation.
PROTOCOLS = {
    "chat": ("/chat/completions", BODY),
    "messages": ("/messages", {"model": MODEL, "max_tokens": 32, "messages": BODY["messages"]}),
    "responses": ("/responses", {"model": MODEL, "max_output_tokens": 32, "input": QUESTION}),
}


def wrk(url: str, connections: int, seconds: float, stream: bool, scratch: Path, auth: str = "",
        pace_ms: int = 0, request: dict[str, Any] = BODY, script: Path | None = None) -> dict[str, float]:  # fmt: skip
    """wrk's throughput, latency and errors for `request` at `url`, or for what a ready `script` sends."""
    if script is None:
        body = json.dumps(request | {"stream": stream})
        script = scratch / f"wrk-{stream}-{pace_ms}-{len(body)}.lua"
        script.write_text(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            + (f'wrk.headers["Authorization"] = "Bearer {auth}"\n' if auth else "")
            + f"wrk.body = [[{body}]]\n"
            + (_paced_lua(pace_ms) if pace_ms else "")
        )
    out = subprocess.run(
        ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "30s",
         "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    errors += sum(int(n) for n in re.findall(r"timeout (\d+)", out))
    return {"rps": float(_found(r"Requests/sec:\s+([\d.]+)", out)[0]),
            "p50_ms": _ms(_found(r"50%\s+([\d.]+\w+)", out)[0]),
            "p99_ms": _ms(_found(r"99%\s+([\d.]+\w+)", out)[0]), "errors": errors}  # fmt: skip


def _found(pattern: str, text: str) -> tuple[str, ...]:
    """The groups of the pattern's first match in wrk's report, which always prints these lines."""
    match = re.search(pattern, text)
    assert match is not None, f"no {pattern!r} in wrk's output:\n{text}"
    return match.groups()


def _paced_lua(pace_ms: int) -> str:
    """Each connection waits a random pause, `pace_ms` on average, between requests, as
    independent agents do. A fixed pause would march every connection in step behind
    one group commit: all answered together, all back together a pause later, each
    then queued behind the whole wave."""
    return (
        "local threads = 0\n"
        'function setup(thread) threads = threads + 1; thread:set("id", threads) end\n'
        "function init(args) math.randomseed(id) end\n"
        f"function delay() return math.random({pace_ms // 2}, {pace_ms * 3 // 2}) end\n"
    )


def _ms(value: str) -> float:
    number, unit = _found(r"^([\d.]+)(\w+)", value)
    return float(number) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]
