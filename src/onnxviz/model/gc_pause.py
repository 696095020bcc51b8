"""`collector_paused`: a block run without Python's cyclic garbage collector."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(stay_off: Callable[[], bool] | None = None) -> Iterator[None]:
    """Pause the cyclic garbage collector for the block, and turn it back on after only
    if it was on before (a caller inside another pause, or beside a thread's, never ends
    that one).  ``stay_off``, asked at the end when it was on: True leaves it off, for
    the caller to turn on later (`ui.turn_queue`: after a collection it queued)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled and (stay_off is None or not stay_off()):
            gc.enable()
