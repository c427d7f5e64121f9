"""Server-sent events as vLLM streams them: `data: ` lines, split across network reads anywhere."""

from __future__ import annotations


def split_sse_data(partial: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """The `data: ` payloads of the SSE lines that `partial + data` completes, and the
    unfinished line left over for the next read."""
    lines = (partial + data if partial else data).split(b"\n")
    rest = lines.pop()
    return [line[6:].strip() for line in lines if line.startswith(b"data: ")], rest
