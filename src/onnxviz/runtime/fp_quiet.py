"""Floating-point warnings off around a run, cheaply.

A run's overflows to inf and 0/0 NaNs are results, not errors, so `Session` runs every
kernel under numpy's "ignore" error state.  ``np.errstate(all="ignore")`` builds a new
error-state object on every entry (1.2-1.6 us of a tiny model's 9 us run, against
onnxruntime's whole 5.5 us); `quiet` sets numpy's error-state context variable to one
built once per enclosing state (numpy keeps the state in a ContextVar since 2.0: the
same object np.errstate would build, only kept), and `reset` puts the caller's back.
Where numpy's internals are not those (another numpy), it uses np.errstate itself."""

from __future__ import annotations

from typing import Any

import numpy as np

try:  # numpy >= 2.0: the error state is this ContextVar of _make_extobj's objects
    from numpy._core._ufunc_config import (  # type: ignore[attr-defined]
        _extobj_contextvar,
        _make_extobj,
    )
except ImportError:  # pragma: no cover - (another numpy: np.errstate below)
    _extobj_contextvar = None
    _make_extobj = None

# (the enclosing state, the "ignore" state built from it): the caller's error callback
# and buffer size carry over, as np.errstate carries them.  One tuple, replaced whole:
# a thread never pairs one state with another's.
_KEPT: tuple[Any, Any] = (None, None)


def quiet() -> Any:
    """Turn floating-point warnings off; the token `reset` takes."""
    if _extobj_contextvar is None or _make_extobj is None:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state
    global _KEPT
    current = _extobj_contextvar.get()
    kept = _KEPT
    if kept[0] is not current:
        kept = _KEPT = (current, _make_extobj(all="ignore"))
    return _extobj_contextvar.set(kept[1])


def reset(token: Any) -> None:
    """The error state `quiet` replaced, back."""
    if isinstance(token, np.errstate):
        token.__exit__(None, None, None)
    else:
        assert _extobj_contextvar is not None
        _extobj_contextvar.reset(token)
