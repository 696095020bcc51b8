"""Compiled kernels: optional C extension modules, each a fast path with a numpy twin.

numpy cannot give some kernels their speed: a depthwise stencil, a GEMV that reads int4
weights as they are stored, an int8 dot product.  Those are small C modules here, built
by setup.py when the machine has a C compiler (``optional=True``: without one the install
still succeeds and every op runs on its numpy path).  Each module:

* takes contiguous buffers through the buffer protocol (no numpy headers at build time)
  and releases the GIL while it computes, so a run never stalls the window;
* checks every size it is given against its buffers before it reads one byte (a wrong
  call raises ValueError, never reads out of bounds: our own C code must not crash the
  app either);
* has one code path per instruction-set *level* and a ``set_level(n)`` that picks one;
  ``load`` sets it to the level below.

Which level runs, from the environment variable ``ONNXVIZ_NATIVE``:

* unset or ``auto``: the best level the CPU has (``_cpu.best_level``);
* ``off``: no compiled kernel at all (the numpy paths; the test command runs the numeric
  tests this way too, so those paths stay proven);
* ``generic`` or ``0``..``3``: at most that level (so a machine with AVX-512 also tests
  the AVX2 and plain-C paths that other CPUs run).

A kernel is proven against its numpy twin at every level the test machine has
(``levels()``), on random shapes (tests/runtime/test_native_*.py).
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType
from typing import Any

GENERIC, AVX2, AVX512, AVX512_VNNI = 0, 1, 2, 3
LEVEL_NAMES = {GENERIC: "generic", AVX2: "avx2", AVX512: "avx512", AVX512_VNNI: "avx512-vnni"}
_REQUEST_NAMES = {"generic": GENERIC, "avx2": AVX2, "avx512": AVX512, "avx512-vnni": AVX512_VNNI}


def cpu_level() -> int:
    """The best level this CPU and OS can run (GENERIC when _cpu was not built)."""
    try:
        from onnxviz.runtime.native import _cpu  # type: ignore[attr-defined]
    except ImportError:
        return GENERIC
    return int(_cpu.best_level())


def requested_level() -> int | None:
    """The level ONNXVIZ_NATIVE asks for: None for 'off', else a level (auto: the CPU's)."""
    raw = os.environ.get("ONNXVIZ_NATIVE", "auto").strip().lower()
    if raw == "off":
        return None
    if raw in ("", "auto"):
        return cpu_level()
    if raw in _REQUEST_NAMES:
        return min(_REQUEST_NAMES[raw], cpu_level())
    if raw.isdigit():
        return min(int(raw), cpu_level())
    raise ValueError(
        f"ONNXVIZ_NATIVE={raw!r}: expected off, auto, generic, avx2, avx512, avx512-vnni or 0-3"
    )


def level() -> int | None:
    """The level the kernels run at in this process (None: compiled kernels are off)."""
    return _LEVEL


def levels() -> list[int]:
    """Every level this machine can run, lowest first (what the tests prove)."""
    return list(range(cpu_level() + 1))


def load(name: str) -> ModuleType | None:
    """The compiled module ``_<name>`` set to this process's level, or None when it is
    off or was not built (the caller then runs its numpy path)."""
    if _LEVEL is None:
        return None
    module = _IMPORTED.get(name)
    if module is None:
        try:
            module = importlib.import_module(f"onnxviz.runtime.native._{name}")
        except ImportError:
            return None  # not kept: a module built later in this process still loads
        _IMPORTED[name] = module
    module.set_level(_LEVEL)
    return module


# Modules `load` imported, by name: import_module on every call (the kernels ask per
# node run) was ~2% of MobileNetV3-small's run time.
_IMPORTED: dict[str, ModuleType] = {}


def held_arrays() -> tuple[Any, Any, Any, Any]:
    """What a held conv, pool or concat makes its channels-last outputs with (levels.h's
    onnxviz_new_channels_last), in the order their makers take them: numpy.ndarray,
    numpy.empty, and the uint8 and float32 dtypes."""
    import numpy as np  # (this package's loader needs no numpy)

    return np.ndarray, np.empty, np.dtype(np.uint8), np.dtype(np.float32)


def built(name: str) -> bool:
    """Whether ``_<name>`` was compiled into this installation (whatever ONNXVIZ_NATIVE)."""
    try:
        importlib.import_module(f"onnxviz.runtime.native._{name}")
    except ImportError:
        return False
    return True


def _initial_level() -> int | None:
    try:
        return requested_level()
    except ValueError as e:  # a typo in the environment must not stop the app
        warnings.warn(f"{e}; running the kernels at the CPU's level", stacklevel=2)
        return cpu_level()


_LEVEL = _initial_level()
