from hypothesis import given
from hypothesis import strategies as st

from parity.services.ingest.upstream.sse import split_sse_data

payloads = st.lists(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"").strip()),
    max_size=8,
)


@given(payloads, st.sampled_from([b"\n", b"\r\n"]), st.lists(st.integers(0, 400), max_size=10))
def test_events_come_out_whole_however_the_stream_is_cut(
    events: list[bytes], newline: bytes, cuts: list[int]
) -> None:
    stream = b"".join(
        b"data: " + e + newline + newline + b": keep-alive comment" + newline for e in events
    )
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    seen, partial = [], b""
    for start, end in zip(bounds, bounds[1:], strict=False):
        found, partial = split_sse_data(partial, stream[start:end])
        seen += found
    assert seen == events and partial == b""


def test_an_unfinished_line_waits_for_the_next_read() -> None:
    assert split_sse_data(b"", b'data: {"a": 1}\n\ndata: {"b"') == ([b'{"a": 1}'], b'data: {"b"')
    assert split_sse_data(b'data: {"b"', b": 2}\n\n") == ([b'{"b": 2}'], b"")
