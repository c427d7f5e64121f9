"""Stopping a process on SIGINT and SIGTERM through a `threading.Event`, safely."""

from __future__ import annotations

import os
import signal
import threading


def stop_on_signals(stop_requested: threading.Event) -> None:
    """SIGINT and SIGTERM set `stop_requested`, from a thread of its own; call from the main thread.

    A Python signal handler runs in the main thread between two of its bytecodes. A handler
    that set the event itself could find the event's lock held by the code it interrupted:
    a second signal arriving while a first handler was inside `set()` deadlocked there, and
    `parity up` never stopped. So the handlers do nothing in Python; the interpreter writes
    each signal's number to a pipe at C level (`set_wakeup_fd`), and a thread sets the event.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    stopping = {int(signal.SIGINT), int(signal.SIGTERM)}
    for sig in stopping:
        signal.signal(sig, lambda *_: None)

    def watch() -> None:
        while os.read(read_end, 1)[0] not in stopping:
            pass
        stop_requested.set()

    threading.Thread(target=watch, name="stop-signals", daemon=True).start()
