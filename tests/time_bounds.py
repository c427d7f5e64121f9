"""A bound for a test whose claim is a time: a time measured in the same test, plus the one margin, set here.

Most tests claim no time: they wait on a signal (tests/waiting.eventually) and let pytest-timeout stop a hang.
A few claim one: a weight sync that gives up on a dead ingest once the drain timeout has passed, and not much
later. Such a test measures a time on this machine in the same run (the sync that succeeded just before), and
its bound is that time scaled by MARGIN, plus SLACK_S, plus whatever the product is meant to wait. A busy machine
(2 shared cores running vLLM beside the test) slows the measured run as well and so lengthens the bound. A wait
the product should not have made, a second drain timeout say, still overshoots it.

MARGIN covers the measured work costing more the second time (a busier minute, a colder cache): 3x. SLACK_S covers
what does not scale with it, a process waiting seconds for one of 2 shared cores, and the retries' own granularity
(a weight sync looks for a dead ingest every 0.5 s).
"""

from __future__ import annotations

import time

MARGIN = 3.0
SLACK_S = 5.0


def bound_s(measured_s: float, *, waits_s: float = 0.0) -> float:
    """How long work measured at `measured_s` may take, besides the `waits_s` it is meant to wait."""
    return waits_s + MARGIN * measured_s + SLACK_S


class Stopwatch:
    """`with Stopwatch() as watch:` ... `watch.seconds`: how long the block took, on the monotonic clock."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __enter__(self) -> Stopwatch:
        self._started = time.monotonic()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.monotonic() - self._started
