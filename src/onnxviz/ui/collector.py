"""When the cyclic garbage collector may stop the app for a full collection.

A full collection scans every tracked object while holding the GIL: with a 100k-node
model open that is 80-250 ms in which the UI thread cannot run.  Python starts one
whenever the objects that survived younger collections have grown by a quarter, which
is exactly what happens, again and again, while a big model is opened and settles (its
index, presenter, scene, canvas items, inferred types).  So:

* while a model is opened and settles, full collections are held (`hold_full`); the
  young generations are still collected as usual, cheaply.  A run and the take-over of
  its result hold them too: each holder names itself and lets go on its own
  (`settle(owner)`), so that the end of one never ends the other's hold;
* once it has settled (`settle`: nothing more runs in the background for it), the
  young generations are collected and everything alive is frozen, out of the
  collector's reach: the model's objects live as long as it is open, and later full
  collections only scan what was made after;
* a closed document is freed by reference counting (`Document.close` breaks its
  cycles), frozen or not.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

from onnxviz.ui.turn_queue import run_later

_NEVER = 1 << 30  # a full collection after this many young-generation ones: never
_held: tuple[int, int, int] | None = None  # the thresholds to go back to
_holders: set[str] = set()  # who holds them: "open", "run"


def hold_full(owner: str = "open") -> None:
    """No automatic full collection until every holder has settled; a holder holding
    again still holds once."""
    global _held
    _holders.add(owner)
    if _held is None:
        _held = gc.get_threshold()
        gc.set_threshold(_held[0], _held[1], _NEVER)


def holding(owner: str | None = None) -> bool:
    """Full collections are held (by ``owner``, when given)."""
    return _held is not None if owner is None else owner in _holders


def settle(owner: str | None = None) -> None:
    """``owner`` is done (None: every holder, as when a window closes).  When nobody
    holds any more: collect the young generations, freeze what is alive and let full
    collections run again (they will be short)."""
    global _held
    if owner is None:
        _holders.clear()
    else:
        _holders.discard(owner)
    if _held is None or _holders:
        return
    if gc.isenabled():
        gc.collect(1)
    gc.freeze()
    gc.set_threshold(*_held)
    _held = None


class HoldUntilQuiet(QObject):
    """Holds full collections under ``owner`` from each `start` until ``quiet()`` has
    said so at two looks in a row, every `POLL_MS`, or after ``limit`` seconds at the
    latest: the one watch of the open (everything it set going has settled) and of a
    big relayout (its layout and canvas fill are done)."""

    POLL_MS = 200

    def __init__(
        self,
        owner: str,
        quiet: Callable[[], bool],
        parent: QObject,
        limit: float | None = None,
    ) -> None:
        super().__init__(parent)
        self.owner = owner
        self._quiet = quiet
        self._limit = limit
        self._looks = 0
        self._deadline = 0.0
        self._timer = QTimer(self)
        self._timer.setInterval(self.POLL_MS)
        self._timer.timeout.connect(self._look)

    def start(self) -> None:
        hold_full(self.owner)
        self._looks = 0
        self._deadline = time.monotonic() + self._limit if self._limit is not None else 0.0
        self._timer.start()

    def _look(self) -> None:
        self._looks = self._looks + 1 if self._quiet() else 0
        late = self._limit is not None and time.monotonic() > self._deadline
        if self._looks >= 2 or late:
            self._timer.stop()
            # its young collection and freeze (10-25 ms with a big model) in a pass of
            # its own, after the slices queued before, not on top of them
            owner = self.owner
            run_later(lambda: settle(owner))
