"""Progress for a person and for a log.

On a terminal (or in a notebook) progress is tqdm's bar, redrawn in place. Anywhere else,
a log file or a pipe, the bar's carriage returns would make one endless line, so progress
is written as whole lines instead: one each time the caller refreshes it (a training step),
or at most one every `every_s` seconds for a count that moves fast (rollouts).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from tqdm.auto import tqdm
from tqdm.notebook import tqdm_notebook


class ProgressLines:
    """tqdm's update/set_postfix/close, written as one line per refresh:

        training run-1: 3/30 steps, 00:42 elapsed, 14.00 s/step, reward=0.412, val_reward=0.300

    `update` writes a line itself only when `every_s` is given and that long has passed
    since the last one; `set_postfix(refresh=True)` always writes one; `close` writes the
    count it ends on when no line showed it yet."""

    def __init__(
        self, *, total: int | None, desc: str, unit: str, initial: int = 0, file: TextIO,
        every_s: float | None = None, clock: Any = time.monotonic,
    ) -> None:  # fmt: skip
        self.total, self.desc, self.unit, self.n, self.file = total, desc, unit, initial, file
        self.every_s, self._clock = every_s, clock
        self._start = self._last_line = clock()
        self._initial = initial
        self._postfix: dict[str, Any] = {}
        self._shown: tuple[int, tuple[tuple[str, Any], ...]] | None = None

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.every_s is not None and self._clock() - self._last_line >= self.every_s:
            self._write()

    def set_postfix(
        self, ordered_dict: Mapping[str, Any] | None = None, refresh: bool = True, **kwargs: Any
    ) -> None:
        self._postfix = {**(ordered_dict or {}), **kwargs}
        if refresh:
            self._write()

    def close(self) -> None:
        if self._shown != self._state():
            self._write()

    def line(self) -> str:
        """The line that describes the progress now."""
        elapsed = self._clock() - self._start
        count = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        parts = [f"{self.desc}: {count} {self.unit}s", f"{tqdm.format_interval(elapsed)} elapsed"]
        done = self.n - self._initial
        if done > 0:
            per = elapsed / done
            parts.append(
                f"{per:.2f} s/{self.unit}" if per >= 1 else f"{1 / per:.2f} {self.unit}s/s"
            )
        parts += [f"{key}={value}" for key, value in self._postfix.items()]
        return ", ".join(parts)

    def _state(self) -> tuple[int, tuple[tuple[str, Any], ...]]:
        return self.n, tuple(self._postfix.items())

    def _write(self) -> None:
        print(self.line(), file=self.file, flush=True)
        self._last_line = self._clock()
        self._shown = self._state()


Progress = tqdm | ProgressLines


def show_progress(
    *, total: int | None, desc: str, unit: str, initial: int = 0, enabled: bool = True,
    file: TextIO | None = None, every_s: float | None = None,
) -> Progress:  # fmt: skip
    """A progress bar on a terminal or in a notebook, else ProgressLines (see there for `every_s`).
    Disabled, it is a tqdm that shows nothing."""
    stream = file if file is not None else sys.stderr
    if not enabled or _redraws_in_place(stream):
        return tqdm(
            total=total, initial=initial, desc=desc, unit=unit, disable=not enabled, file=file
        )
    return ProgressLines(
        total=total, desc=desc, unit=unit, initial=initial, file=stream, every_s=every_s
    )


def _redraws_in_place(stream: TextIO) -> bool:
    if issubclass(tqdm, tqdm_notebook):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
