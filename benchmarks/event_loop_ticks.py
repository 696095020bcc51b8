"""A 5 ms timer on the UI thread, for the benchmarks that measure how long the event loop
stops (issue 18, item 19): the longest time between two ticks is the longest stop, the
most UI-thread CPU time between two is the UI thread's own part of it."""

from __future__ import annotations

import time


class Ticks:
    """(wall, thread CPU) at every tick from creation until `stop`."""

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.ticks: list[tuple[float, float]] = []
        self.timer = QTimer()
        self.timer.setInterval(5)
        self.timer.timeout.connect(
            lambda: self.ticks.append((time.perf_counter(), time.thread_time()))
        )
        self.timer.start()

    def stop(self) -> tuple[float, float]:
        """(longest stop, most UI-thread CPU in one turn), in seconds; NaN when the timer
        ticked less than twice."""
        self.timer.stop()
        pairs = list(zip(self.ticks, self.ticks[1:]))
        if not pairs:
            return float("nan"), float("nan")
        return max(b[0] - a[0] for a, b in pairs), max(b[1] - a[1] for a, b in pairs)
