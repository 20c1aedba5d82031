"""A text progress bar on stderr for long evaluation commands (``eval run``, ``backeval``).

On a terminal it redraws one line (``\\r``) at most every `min_interval_s`; into a file or a pipe (CI logs) it
writes a plain line at each tenth of the way instead, so logs stay short and readable.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

_WIDTH = 30


class ProgressBar:
    def __init__(
        self,
        total: int,
        label: str,
        *,
        stream: TextIO | None = None,
        min_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(0, total)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self._clock = clock
        self._started = clock()
        self._last_draw = -float("inf")
        self._last_decile = -1
        self._min_interval_s = min_interval_s
        self.done = 0

    def render(self, extra: str = "") -> str:
        fraction = self.done / self.total if self.total else 1.0
        filled = int(fraction * _WIDTH)
        elapsed = self._clock() - self._started
        eta = ""
        if 0 < self.done < self.total:
            eta = f" eta {elapsed / self.done * (self.total - self.done):.0f}s"
        suffix = f" {extra}" if extra else ""
        return f"{self.label} [{'#' * filled}{'.' * (_WIDTH - filled)}] {self.done}/{self.total}{eta}{suffix}"

    def update(self, done: int, extra: str = "") -> None:
        self.done = min(done, self.total) if self.total else done
        now = self._clock()
        if self.interactive:
            if now - self._last_draw >= self._min_interval_s or self.done >= self.total:
                self.stream.write("\r" + self.render(extra))
                self.stream.flush()
                self._last_draw = now
            return
        decile = int(self.done * 10 / self.total) if self.total else 10
        if decile > self._last_decile:
            self._last_decile = decile
            self.stream.write(self.render(extra) + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.interactive:
            self.stream.write("\n")
            self.stream.flush()
