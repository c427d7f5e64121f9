"""A child process that goes when the process that started it goes, however that one ends (kill -9 included)."""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before it runs (a `preexec_fn`): SIGTERM it when its parent exits."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
