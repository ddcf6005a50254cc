"""A dependency-free progress bar on stderr for the long stages of `eval`.

On a terminal the bar redraws in place; otherwise (CI logs, pipes) only the finished line is printed,
so logs stay readable.
"""

from __future__ import annotations

import sys
import threading
import time


class Progress:
    def __init__(self, label: str, total: int, enabled: bool = True, stream=None, width: int = 30):
        self.label, self.total, self.width = label, max(total, 1), width
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self.done = 0
        self.start = time.monotonic()
        self._last_draw = 0.0
        if self.live:
            self._draw()

    def _line(self) -> str:
        filled = int(self.width * self.done / self.total)
        bar = "#" * filled + "-" * (self.width - filled)
        return f"{self.label:<28} [{bar}] {self.done}/{self.total} {time.monotonic() - self.start:6.1f} s"

    def _draw(self) -> None:
        self.stream.write("\r" + self._line())
        self.stream.flush()

    def step(self, n: int = 1) -> None:
        self.done = min(self.done + n, self.total)
        now = time.monotonic()
        if self.live and (now - self._last_draw > 0.1 or self.done == self.total):
            self._last_draw = now
            self._draw()

    def close(self) -> None:
        if not self.enabled:
            return
        self.stream.write(("\r" if self.live else "") + self._line() + "\n")
        self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        elif self.live:
            self.stream.write("\n")


class Elapsed:
    """For a stage with no count to show (a compile): on a terminal, the seconds spent so far, redrawn
    by a background thread twice a second; elsewhere nothing (the caller reports the total)."""

    def __init__(self, label: str, enabled: bool = True, stream=None):
        self.label, self.stream = label, stream or sys.stderr
        self.live = enabled and self.stream.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(0.5):
            self.stream.write(f"\r{self.label:<28} {time.monotonic() - start:6.1f} s")
            self.stream.flush()

    def __enter__(self):
        if self.live:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.live:
            self._stop.set()
            self._thread.join()
            self.stream.write("\r" + " " * 40 + "\r")
            self.stream.flush()
