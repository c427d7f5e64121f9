"""A burst of SIGTERMs stops a process that waits on its stop event, however they fall: a signal arriving
while the event's lock is held (by the code a handler interrupted, or by a first handler) deadlocked a
handler that set the event itself."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.conftest import REPO_ROOT

WAITER = """
import threading
from parity.services.runtime.stop_signals import stop_on_signals

stop = threading.Event()
stop_on_signals(stop)
print("ready", flush=True)
while not stop.wait(0.001):
    pass
for _ in range(100_000):  # the stop under way, taking the event's lock over and over as more signals arrive
    stop.set()
print("stopped", flush=True)
"""


def test_a_burst_of_stop_signals_stops_the_process() -> None:
    for _ in range(5):
        waiter = subprocess.Popen(
            [sys.executable, "-c", WAITER], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT
        )
        assert waiter.stdout is not None and waiter.stdout.readline() == "ready\n"
        try:
            for _ in range(100):
                waiter.send_signal(signal.SIGTERM)
            stdout, _ = waiter.communicate(timeout=30)
        finally:
            waiter.kill()
        assert (waiter.returncode, stdout) == (0, "stopped\n")
