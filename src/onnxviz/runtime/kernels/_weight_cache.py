"""Derived forms of constant weights (dequantized, transposed, repacked), made once.

A kernel whose work on every call starts by rewriting a weight it was handed (MatMulNBits
dequantizing its int4 blocks, an RNN transposing its recurrent matrix) asks `derived`
for that form instead.  The answer is keyed on the identities of the source arrays, so
the second call with the same initializer objects gets the stored result.

Identity is only a safe key for arrays that cannot change between calls, so a source is
used as a key only when it is *frozen*: read-only, and every array it views is read-only
too, down to an immutable buffer (``bytes``, a read-only memoryview) or an array that
owns its memory.  Initializers decoded from raw data (model.tensors.to_array) are such
views over the proto's bytes; intermediate values and caller feeds are normally
writeable, and for them the form is simply rebuilt on each call, as before.  A view is
keyed by the array it views and its place in it, so a new view of the same constant made
on each run finds the stored form (`_anchor`).  Entries
hold their sources by weak reference: a hit needs the very same live arrays (an id reused
by a later array never matches a dead reference), and an entry goes away with its
sources, so a closed model's forms do not outlive it.

Memory is bounded by `CAP_BYTES`, a quarter of the machine's memory (at least 512 MB): a
float32 form of int4 weights is 8 times their size, so a 1B-parameter int4 decoder needs
about 4 GB of forms.  A form bigger than a quarter of the cap is never stored.  When a
new form does not fit, it is not stored (it is rebuilt on each call) and the stored ones
stay: a decoder step asks for every weight once, in the same order each step, so evicting
the least recently used entry to make room would evict the very form asked for next, and
no call would ever hit; keeping what is stored, the part of the model that fits hits on
every step.  Entries go when their sources die (a closed model) or on `clear`.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np


def default_cap() -> int:
    """A quarter of the machine's physical memory, and at least 512 MB."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): the floor
        physical = 0
    return max(512 << 20, physical // 4)


CAP_BYTES = default_cap()

# Re-entrant: a weak reference's callback (which drops an entry) may run inside a locked
# region when the garbage collector happens to run there.
_lock = threading.RLock()
_Key = tuple[Hashable, ...]
_entries: dict[_Key, tuple[tuple[Any, ...], Any, int]] = {}
_total = 0


def frozen(x: Any) -> bool:
    """True when ``x`` is an ndarray whose contents cannot change (see the module doc)."""
    if type(x) is not np.ndarray or x.flags.writeable:
        return False
    base = x.base
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    if base is None or isinstance(base, bytes):
        return True
    try:
        return memoryview(base).readonly
    except TypeError:
        return False


def _size(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, tuple):
        return sum(_size(v) for v in value)
    if isinstance(value, (bytes, bytearray)):  # the compiled kernels' packed weights
        return len(value)
    return 0


_MISS = object()


def _anchor(src: np.ndarray) -> tuple[np.ndarray, tuple[Hashable, ...]]:
    """The array whose identity keys the frozen ``src``, and where ``src`` lies in it: a
    view is keyed by the outermost array it views (plus its offset, shape, strides and
    dtype), so that a fresh view of a constant on every run (a Reshape of an initializer
    to a shape computed from the input, which the plan cannot fold) finds the form
    stored by the first run, where its own identity would miss every time and the form
    (a packed GEMM weight, a dequantized int4 matrix) would be rebuilt on every call.
    (A repeated call with the same view object finds its form in `_seen` first.)"""
    root = src.base
    if not isinstance(root, np.ndarray):
        return src, ()
    while isinstance(root.base, np.ndarray):
        root = root.base
    offset = src.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return root, (offset, src.shape, src.strides, src.dtype.str)


# Forms found for the very source objects of an earlier call, by (kind, the objects' ids,
# params), with weak references to those objects: a kernel gets the same initializer
# views on every call, and the full lookup (frozen's walk down the views, the anchors)
# cost 6 us of a 13 us MatMulNBits call on a small weight.  An entry goes when one of its
# sources dies (the stored form's sources live while their views do).
_seen: dict[_Key, tuple[tuple[Any, ...], Any]] = {}


def _seen_key(
    kind: str, sources: Sequence[np.ndarray | None], params: tuple[Hashable, ...]
) -> _Key:
    return (kind, *[None if src is None else id(src) for src in sources], *params)


def _seen_hit(key: _Key, sources: Sequence[np.ndarray | None]) -> Any:
    """The form remembered under ``key`` for these very objects, or _MISS.  A source
    still read-only is still frozen: a view of read-only memory can never be made
    writeable again."""
    hit = _seen.get(key)
    if hit is None:
        return _MISS
    for ref, src in zip(hit[0], sources):
        if src is None:
            if ref is not None:
                return _MISS
        elif ref is None or ref() is not src or src.flags.writeable:
            return _MISS
    return hit[1]


def _remember(key: _Key, sources: Sequence[np.ndarray | None], value: Any) -> None:
    def forget(_ref: object, lock: threading.RLock = _lock) -> None:
        with lock:  # (as in _dropper: the globals may be gone at interpreter exit)
            if _seen is not None:
                _seen.pop(key, None)

    refs = tuple(None if src is None else weakref.ref(src, forget) for src in sources)
    with _lock:
        _seen[key] = (refs, value)


def _lookup(
    kind: str, sources: Sequence[np.ndarray | None], params: tuple[Hashable, ...]
) -> tuple[_Key, Any, list[np.ndarray | None]] | None:
    """(key, the stored form or _MISS, the arrays the key names), or None when the form
    cannot be keyed (a source that may change, or no source at all)."""
    # Plain loops, not generators: a hit is on every call of a decoder's small kernels,
    # where this lookup's own cost was as much as the product it serves.
    ids: list[Hashable] = []
    anchors: list[np.ndarray | None] = []
    for src in sources:
        if src is None:
            ids.append(None)
            anchors.append(None)
        elif frozen(src):
            anchor, where = _anchor(src)
            ids.append((id(anchor), *where) if where else id(anchor))
            anchors.append(anchor)
        else:
            return None
    if len(ids) == ids.count(None):
        return None
    key = (kind, *ids, *params)
    with _lock:
        hit = _entries.get(key)
        if hit is not None:
            for ref, held in zip(hit[0], anchors):
                if (ref() if ref is not None else None) is not held:
                    break
            else:
                return key, hit[1], anchors
    return key, _MISS, anchors


def _store(key: _Key, anchors: Sequence[np.ndarray | None], value: Any) -> None:
    global _total
    size = _size(value)
    if size > CAP_BYTES // 4:
        return
    for array in value if isinstance(value, tuple) else (value,):
        if isinstance(array, np.ndarray):
            array.flags.writeable = False  # shared by every later call
    with _lock:
        old = _entries.pop(key, None)
        if old is not None:
            _total -= old[2]
        if _total + size > CAP_BYTES:
            return  # full: the stored forms stay (see the module doc)
        on_death = _dropper(key)
        refs = tuple(None if a is None else weakref.ref(a, on_death) for a in anchors)
        _entries[key] = (refs, value, size)
        _total += size


def derived(
    kind: str,
    sources: Sequence[np.ndarray | None],
    params: tuple[Hashable, ...],
    build: Callable[[], Any],
) -> Any:
    """``build()``, stored under (``kind``, the identities of ``sources``, ``params``)
    when every non-None source is frozen, else rebuilt on each call.  ``params`` must
    name everything besides the sources that the form depends on (attributes, dtypes).
    The stored value is shared: callers must not write into it."""
    seen = _seen_key(kind, sources, params)
    value = _seen_hit(seen, sources)
    if value is not _MISS:
        return value
    found = _lookup(kind, sources, params)
    if found is None:
        return build()
    key, value, anchors = found
    if value is _MISS:
        value = build()
        _store(key, anchors, value)
    if key in _entries:
        _remember(seen, sources, value)
    return value


def kept(
    kind: str,
    sources: Sequence[np.ndarray | None],
    params: tuple[Hashable, ...],
    nbytes: int,
    build: Callable[[], Any],
) -> Any | None:
    """`derived` for a form of ``nbytes`` known beforehand, that its caller can do
    without: the stored form (built and stored first if there is room), or None, with
    nothing built, when it would not be kept (a source that may change, a form too big,
    a full cache)."""
    seen = _seen_key(kind, sources, params)
    value = _seen_hit(seen, sources)
    if value is not _MISS:
        return value
    found = _lookup(kind, sources, params)
    if found is None:
        return None
    key, value, anchors = found
    if value is not _MISS:
        _remember(seen, sources, value)
        return value
    with _lock:
        room = nbytes <= CAP_BYTES // 4 and _total + nbytes <= CAP_BYTES
    if not room:
        return None
    value = build()
    _store(key, anchors, value)
    if key in _entries:
        _remember(seen, sources, value)
    return value


def _dropper(key: _Key) -> Callable[[Any], None]:
    """The weak-reference callback that forgets ``key``'s entry when a source dies.  (A
    late callback of an older entry under a reused key only costs a rebuild.)"""

    def drop(_ref: Any, lock: threading.RLock = _lock) -> None:
        # The lock as it was made: at interpreter exit the module's globals may already
        # be None when the last arrays die and call this.
        global _total
        with lock:
            old = _entries.pop(key, None) if _entries is not None else None
            if old is not None:
                _total -= old[2]

    return drop


def clear() -> None:
    """Forget every stored form (tests; a host that wants the memory back)."""
    global _total
    with _lock:
        _entries.clear()
        _seen.clear()
        _total = 0


def stored_bytes() -> int:
    return _total
