"""Freed memory kept in the process for the next run (glibc's malloc thresholds).

A run makes its intermediates with numpy, a fresh array per node output, and frees each
when its last reader is done.  glibc hands a freed block of at least its mmap threshold
back to the system (munmap) and trims the heap's free top past its trim threshold, so
the next run's arrays land on new pages: a fault and a page zeroed for each, counted as
system time.  glibc raises the mmap threshold by itself after a large free, but only to
the size freed, and the trim still gives the top away: a small UNet (1 x 3 x 128 x 128,
16-64 channels, arrays of 1-4 MB) took 992 faults and about 3 ms of system time in each
run of about 19 ms on a Zen 3 core, where onnxruntime reuses its arena.

`keep_freed_memory` sets both thresholds once per process, when the first Session is
made: blocks below `MMAP_BYTES` come from the heap, and up to `TRIM_BYTES` of free heap
top stay mapped (then none of that UNet's runs faults).  A block past `MMAP_BYTES` (a
large weight or activation) is still its own mapping, given back when freed, and
`malloc_trim` (ort_engine's after its chunks) still gives everything free back on
request.  Elsewhere than glibc (no mallopt) nothing changes.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# The thresholds: blocks below 32 MB (glibc's own ceiling for its dynamic threshold) from
# the heap; up to 128 MB of free heap top kept.
MMAP_BYTES = 32 << 20
TRIM_BYTES = 128 << 20

_lock = threading.Lock()
_done: bool | None = None  # None: not tried; then whether glibc took both thresholds


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (once per process); whether they are set."""
    global _done
    with _lock:
        if _done is None:
            _done = _set_thresholds()
        return _done


def _set_thresholds() -> bool:
    try:
        mallopt: Any = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # (the mmap threshold first: setting it also stops glibc's dynamic adjustment)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES)
    )
