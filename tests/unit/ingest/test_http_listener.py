import asyncio
import errno
import socket
import threading
import time

import pytest
import uvloop

from parity.services.ingest import http_listener
from parity.services.ingest.http_listener import HttpListener

RUNNERS = {"asyncio": asyncio.run, "uvloop": uvloop.run}
BURST = 64


class _Counted(asyncio.Protocol):
    def __init__(self, turns: list[int], made: list[int], done: asyncio.Event) -> None:
        self.turns, self.made, self.done = turns, made, done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.append(self.turns[0])
        if len(self.made) == BURST:
            self.done.set()


async def _accept_burst_on_a_busy_loop() -> list[int]:
    """Loop turns at which each of a burst of connections was accepted, while every
    turn of the loop takes 5 ms, as under load."""
    turns, made, done = [0], list[int](), asyncio.Event()
    loop = asyncio.get_running_loop()

    def busy_turn() -> None:
        turns[0] += 1
        time.sleep(0.005)
        if not done.is_set():
            loop.call_soon(busy_turn)

    listener = HttpListener.bind("127.0.0.1", 0, 1024, lambda: _Counted(turns, made, done))
    clients: list[socket.socket] = []
    connecting = threading.Thread(
        target=lambda: clients.extend(
            socket.create_connection(("127.0.0.1", listener.port)) for _ in range(BURST)
        )
    )
    loop.call_soon(busy_turn)
    connecting.start()
    await asyncio.wait_for(done.wait(), 30)
    connecting.join()
    listener.close()
    await listener.wait_closed()
    for client in clients:
        client.close()
    return made


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_burst_of_connections_is_accepted_within_a_few_turns(runner: str) -> None:
    made = RUNNERS[runner](_accept_burst_on_a_busy_loop())
    assert len(made) == BURST
    # The connecting thread spreads the burst over a few turns. uvloop's own server
    # (libuv accepts one connection per turn) spreads it over about BURST turns.
    assert max(made) - min(made) < BURST // 4, made


async def _accept_after_running_out_of_descriptors() -> tuple[int, float]:
    accepted = asyncio.Event()
    listener = HttpListener.bind("127.0.0.1", 0, 16, lambda: _Signal(accepted))
    real_socket, port, failures = listener.sock, listener.port, [0]

    class _OutOfDescriptors:
        def fileno(self) -> int:
            return real_socket.fileno()

        def accept(self) -> tuple[socket.socket, object]:
            if not failures[0]:
                failures[0] += 1
                raise OSError(errno.EMFILE, "Too many open files")
            return real_socket.accept()

        def close(self) -> None:
            real_socket.close()

    listener.sock = _OutOfDescriptors()  # type: ignore[assignment]
    started = time.monotonic()
    client = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", port))
    await asyncio.wait_for(accepted.wait(), 10)
    waited = time.monotonic() - started
    client.close()
    listener.close()
    return failures[0], waited


class _Signal(asyncio.Protocol):
    def __init__(self, event: asyncio.Event) -> None:
        self.event = event

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.event.set()


@pytest.mark.parametrize("runner", RUNNERS)
def test_running_out_of_descriptors_pauses_accepting_then_resumes(runner: str, monkeypatch) -> None:
    monkeypatch.setattr(http_listener, "ACCEPT_RETRY_DELAY_S", 0.2)
    failures, waited = RUNNERS[runner](_accept_after_running_out_of_descriptors())
    assert failures == 1
    assert waited >= 0.2, "the listener waits before trying again rather than spinning"


def test_a_port_in_use_is_an_error_and_a_closed_listener_refuses() -> None:
    async def scenario() -> None:
        listener = HttpListener.bind("127.0.0.1", 0, 16, asyncio.Protocol)
        port = listener.port
        with pytest.raises(OSError, match="in use"):
            HttpListener.bind("127.0.0.1", port, 16, asyncio.Protocol)
        listener.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)

    uvloop.run(scenario())
