"""A progress display on stderr: one line per step with the row count and elapsed time, readable in a
terminal and in a log file alike (no carriage-return redraws, no dependency)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total_rows: int, stream=None):
        self.total_rows = total_rows
        self.row_index = 0
        self.row_label = ""
        self._stream = stream if stream is not None else sys.stderr
        self._start = time.perf_counter()

    def start_row(self, label: str) -> None:
        self.row_index += 1
        self.row_label = label
        self.step("start")

    def step(self, what: str) -> None:
        elapsed = time.perf_counter() - self._start
        width = len(str(self.total_rows))
        print(f"[{self.row_index:>{width}}/{self.total_rows} {elapsed:7.1f}s] {self.row_label}: {what}",
              file=self._stream, flush=True)

    def message(self, text: str) -> None:
        print(text, file=self._stream, flush=True)


__all__ = ["Progress"]
