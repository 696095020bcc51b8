"""The held norm (native/_norm.c's `held`, made by kernels/row_norm.specialize): a norm
node's specialized call run in C from the node loop.

* For every norm op with constant rows (ONNX and com.microsoft LayerNormalization,
  SimplifiedLayerNormalization, SkipLayerNormalization with and without a bias,
  SkipSimplifiedLayerNormalization), every output count the op allows and 1-D to 3-D
  inputs: the same outputs, bit for bit, as the Python call it fronts (the kernel's own
  call), each a fresh array.
* Every call it does not take goes to that call with the same arguments: another gamma
  (a fed initializer), another dtype, a strided x, a skip of another shape (broadcast),
  another width, an empty x, keywords, too few inputs.
* A wrong construction is a ValueError.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

from onnxviz.runtime.kernels import contrib_ms, nn_norm, row_norm
from tests.runtime.native_modules import compiled

pytestmark = pytest.mark.numeric

COLS = 48


def _rows(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        name: rng.standard_normal(COLS).astype(np.float32) for name in ("gamma", "beta", "bias")
    }


# (maker, input builder, output counts): the specializers of each op.
def _cases(rng: np.random.Generator) -> list[tuple[str, Any, list[Any], list[int]]]:
    r = _rows(rng)
    g, b, bi = r["gamma"], r["beta"], r["bias"]
    return [
        ("LayerNormalization", nn_norm._prepared_layer_norm, [None, g, b], [1, 2, 3]),
        ("ms LayerNormalization", contrib_ms._prepared_layer_norm, [None, g, b], [1, 3]),
        ("SimplifiedLayerNormalization", contrib_ms._prepared_simplified, [None, g], [1, 2]),
        ("SkipLayerNormalization", contrib_ms._prepared_skip, [None, "skip", g, b, bi], [1, 4]),
        ("SkipLayerNormalization no bias", contrib_ms._prepared_skip, [None, "skip", g, b], [1, 4]),
        (
            "SkipSimplifiedLayerNormalization",
            contrib_ms._prepared_skip_simplified,
            [None, "skip", g],
            [1, 2, 4],
        ),
    ]


def _make(maker: Any, known: list[Any], n_out: int) -> Any:
    from onnxviz.runtime.registry import RUNTIME

    attrs = {"epsilon": 1e-5}
    consts = tuple(RUNTIME if k is None or isinstance(k, str) else k for k in known)
    return maker(attrs, consts, n_out)


def _inputs(known: list[Any], x: np.ndarray, skip: np.ndarray) -> list[Any]:
    return [x if k is None else skip if isinstance(k, str) else k for k in known]


def _same(got: Any, want: Any) -> None:
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is np.ndarray and g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_it_gives_the_calls_outputs_bit_for_bit(monkeypatch):
    # The compiled module whatever ONNXVIZ_NATIVE says (off: row_norm loaded none).
    monkeypatch.setattr(row_norm, "_NORM", compiled("norm", "the numpy norms run"))
    rng = np.random.default_rng(1)
    for name, maker, known, counts in _cases(rng):
        for n_out in counts:
            held = _make(maker, known, n_out)
            assert type(held).__name__ == "HeldNorm", name
            for shape in [(COLS,), (5, COLS), (2, 3, COLS)]:
                x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
                skip = rng.standard_normal(shape).astype(np.float32)
                ins = _inputs(known, x, skip)
                got, again = held(*ins), held(*ins)
                _same(got, held.fallback(*ins))
                first = got if isinstance(got, list) else [got]
                second = again if isinstance(again, list) else [again]
                assert all(not np.shares_memory(a, b) for a, b in zip(first, second))


def test_every_call_it_does_not_take_goes_to_its_call(monkeypatch):
    monkeypatch.setattr(row_norm, "_NORM", compiled("norm", "the numpy norms run"))
    rng = np.random.default_rng(2)
    _name, maker, known, _counts = _cases(rng)[5]  # SkipSimplifiedLayerNormalization
    seen: list[tuple[Any, ...]] = []
    held = _make(maker, known, 4)
    inner = held.fallback

    class Recorder:
        """Stands for the call: records, then runs it."""

        def __call__(self, *args: Any, **kw: Any) -> Any:
            seen.append(args)
            return inner(*args, **kw)

    fronted = row_norm._NORM.held(  # the same object, fronting the recorder
        COLS, float(np.float32(1e-5)), True, known[2], None, None, True, ((2, known[2]),),
        (0, 1, 2, 3), False, Recorder(), np.ndarray, np.empty, np.dtype(np.float32),
    )  # fmt: skip
    x = rng.standard_normal((3, COLS)).astype(np.float32)
    skip = rng.standard_normal((3, COLS)).astype(np.float32)
    wide = rng.standard_normal((3, 2 * COLS)).astype(np.float32)
    others: list[tuple[Any, ...]] = [
        (x, skip, known[2].copy()),  # another gamma (equal, not the same object)
        (x.astype(np.float64), skip.astype(np.float64), known[2]),
        (wide[:, ::2], skip, known[2]),  # strided
        (x, skip[:1], known[2]),  # a skip that broadcasts
        (x[:, :-1], skip[:, :-1], known[2]),  # another width
        (np.empty((0, COLS), np.float32), np.empty((0, COLS), np.float32), known[2]),
        (x, skip.astype(np.float64), known[2]),
        (x, skip),
    ]
    for args in others:
        try:
            want = inner(*args)
        except Exception as exc:  # the kernel's own error, raised by the call too
            with pytest.raises(type(exc)):
                fronted(*args)
        else:
            _same(fronted(*args), want)
        assert len(seen) == 1 and all(a is b for a, b in zip(seen.pop(), args))
    assert not seen
    _same(fronted(x, skip, known[2]), held(x, skip, known[2]))
    assert not seen  # taken
    ref = weakref.ref(fronted(x, skip, known[2])[0])
    gc.collect()
    assert ref() is None


def test_a_wrong_construction_is_a_value_error():
    mod = compiled("norm", "the numpy norms run")
    g = np.ones(COLS, np.float32)
    f32 = np.dtype(np.float32)
    good = [COLS, 1e-5, False, g, None, None, False, (), (0,), True, print, np.ndarray, np.empty]
    mod.held(*good, f32)  # (a sound one)
    for i, bad in [
        (0, 0),  # cols
        (8, (5,)),  # picks past the four outputs
        (8, (3,)),  # the total without a skip or bias
        (8, (0, 1)),  # two outputs for a single one
        (10, 3),  # fallback not callable
        (3, np.ones(COLS + 1, np.float32)),  # gamma of another width
        (7, ((-1, g),)),
    ]:
        args = list(good)
        args[i] = bad
        with pytest.raises(ValueError):
            mod.held(*args, f32)
