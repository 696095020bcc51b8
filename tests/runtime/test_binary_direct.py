"""The compiled arithmetic call's direct path for small arrays (native/_runloop.c's
``binary``, issue 21): numpy's numbers, bit for bit, written into the call's last result
only when nobody else can see that array.

The first call of a shape is numpy's and its result is kept; later calls write into the
kept array when its reference count says the call alone holds it.  A caller keeping a
result, a view of it, a buffer of it, or a read-only flag on it must make the call
allocate a new one; the numbers must be numpy's for every dtype, operator, NaN payload
and integer overflow.
"""

from __future__ import annotations

import gc
import pickle
import sys
import weakref
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from onnxviz.runtime import quiet_loop
from onnxviz.runtime.session import Session

from .differential import stepped_values

pytestmark = [
    pytest.mark.numeric,
    pytest.mark.skipif(quiet_loop.loop() is None, reason="the compiled loop is not built"),
]

DIRECT = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))
OPS = {0: np.add, 1: np.subtract, 2: np.multiply, 3: np.true_divide}
MAX = 4096  # _runloop.c's DIRECT_MAX


def _kernel(a: Any, b: Any) -> str:
    return "kernel"


def _call(op: int) -> Any:
    module = quiet_loop.loop()
    return module.binary(op, DIRECT if op != 3 else DIRECT[:2], _kernel)


def _expected(op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(OPS[op](a, b))


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, except a NaN's payload: where two NaNs meet, numpy's own loops give
    one operand's or the other's by the length and which one is broadcast."""
    assert type(got) is np.ndarray
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        got, want = np.where(nan, 0, got), np.where(nan, 0, want)
    assert got.tobytes() == want.tobytes()


def _special_values(rng: np.random.Generator, dt: np.dtype, shape: tuple[int, ...]) -> Any:
    if dt.kind == "i":
        info = np.iinfo(dt)
        pool = np.array([0, 1, -1, 2, 7, info.max, info.min, info.max - 1, info.min + 1], dt)
        picks = rng.integers(-(2**31), 2**31, size=shape).astype(dt)
        return np.where(rng.random(shape) < 0.5, rng.choice(pool, size=shape), picks)
    nan_payload = np.array([0x7FC00001], np.uint32).view(np.float32).astype(dt)
    pool = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 1e-40, 3e38], dt)
    pool = np.concatenate([pool, nan_payload])
    values = rng.standard_normal(shape).astype(dt)
    return np.where(rng.random(shape) < 0.4, rng.choice(pool, size=shape), values)


def _shapes(draw) -> tuple[tuple[int, ...], tuple[int, ...]]:
    base = tuple(draw(st.lists(st.integers(0, 7), max_size=4)))
    kind = draw(
        st.sampled_from(["same", "one_right", "one_left", "rows_right", "rows_left", "other"])
    )
    one = tuple(1 for _ in range(draw(st.integers(0, len(base)))))
    if kind == "same":
        return base, base
    if kind == "one_right":
        return base, one
    if kind == "one_left":
        return one, base
    if kind in ("rows_right", "rows_left"):  # trailing axes, maybe with leading 1s
        tail = base[draw(st.integers(0, len(base))) :]
        ones = draw(st.integers(0, len(base) - len(tail)))
        row = (1,) * ones + tail
        return (base, row) if kind == "rows_right" else (row, base)
    other = tuple(1 if draw(st.booleans()) else d for d in base)  # a middle 1: numpy's
    return base, other


def _direct(sa: tuple[int, ...], sb: tuple[int, ...]) -> bool:
    """Whether the compiled call computes a op b itself (_runloop.c's binary_direct)."""

    def trailing(small: tuple[int, ...], full: tuple[int, ...]) -> bool:
        k = 0
        while k < len(small) and small[k] == 1:
            k += 1
        tail = small[k:]
        return len(small) <= len(full) and (not tail or full[len(full) - len(tail) :] == tail)

    size_a, size_b = int(np.prod(sa)), int(np.prod(sb))
    fits = (
        sa == sb
        or (size_b == 1 and len(sb) <= len(sa))
        or (size_a == 1 and len(sa) <= len(sb))
        or (size_b > 0 and trailing(sb, sa))
        or (size_a > 0 and trailing(sa, sb))
    )
    return fits and int(np.prod(np.broadcast_shapes(sa, sb))) <= MAX


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_repeated_calls_give_numpys_bits(data) -> None:
    """Every call, the first (numpy's, kept) and the later ones (written into the kept
    result), equals numpy's operator bit for bit: signed zeros, infinities, subnormals,
    NaNs, integer wrapping."""
    op = data.draw(st.sampled_from(list(OPS)))
    dt = data.draw(st.sampled_from(DIRECT if op != 3 else DIRECT[:2]))
    sa, sb = _shapes(data.draw)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    call = _call(op)
    direct = _direct(sa, sb)
    last: Any = None
    for k in range(4):
        a = np.asarray(_special_values(rng, dt, sa))
        b = np.asarray(_special_values(rng, dt, sb))
        result = call(a, b)
        if k:  # written into the array the call kept from the call before, or a new one
            assert (result is last()) == direct
        _same_bits(result, _expected(op, a, b))
        last = weakref.ref(result)
        del result


def test_the_kept_result_is_reused_only_when_nobody_else_holds_it() -> None:
    """The direct path really runs (the same array comes back once the caller lets it
    go), and never while anything else refers to the array."""
    add = _call(0)
    a, b = np.float32([1.0, 2.0]), np.float32([10.0, 20.0])
    first = add(a, b)
    kept = add(a, b)  # `first` is still held: a new array
    assert kept is not first
    np.testing.assert_array_equal(first, [11.0, 22.0])
    del first
    gc.collect()
    again = add(a, a)  # `kept` is the call's last result and is still held
    assert again is not kept
    np.testing.assert_array_equal(kept, [11.0, 22.0])
    held_by_the_call = weakref.ref(again)
    del again
    assert held_by_the_call() is not None  # the call keeps its last result alive
    reused = add(b, b)
    assert reused is held_by_the_call()  # nobody else held it: written and returned
    np.testing.assert_array_equal(reused, [20.0, 40.0])


@pytest.mark.parametrize("holder", ["view", "reshape", "memoryview", "read_only", "list"])
def test_a_result_anything_refers_to_is_never_written(holder: str) -> None:
    mul = _call(2)
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    result = mul(a, a)
    want = result.copy()
    held: Any
    if holder == "view":
        held = result[1:]
    elif holder == "reshape":
        held = result.reshape(-1)
    elif holder == "memoryview":
        held = memoryview(result)
    elif holder == "read_only":
        result.flags.writeable = False
        held = None
    else:
        held = [result]
    del result
    for _ in range(3):
        other = mul(a, np.int64(3) * np.ones_like(a))
        np.testing.assert_array_equal(other, a * 3)
        del other
    if holder == "read_only":
        return  # (nothing holds it, and a read-only array is never written)
    seen = np.asarray(held[0] if holder == "list" else held)
    np.testing.assert_array_equal(seen, want[1:] if holder == "view" else want.reshape(seen.shape))


@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        (op, dtype)
        for op in OPS
        for dtype in (np.float32, np.float64, np.int32, np.int64)
        if op != 3 or np.dtype(dtype).kind == "f"  # (Div takes floats only)
    ],
)
def test_equal_dtype_objects_that_are_not_numpys_own_take_the_operator(op, dtype) -> None:
    """An unpickled array's dtype equals numpy's float32 without being it: against an
    operand of numpy's own, the call is still numpy's operator (not the kernel) and its
    direct path, with numpy's bits; a byte-swapped dtype, which only looks alike, goes
    to the kernel."""
    call = _call(op)
    copied = pickle.loads(pickle.dumps(np.arange(1, 7, dtype=dtype)))
    assert copied.dtype == np.dtype(dtype) and copied.dtype is not np.dtype(dtype)
    own = np.full(6, 3, dtype)
    results = []
    for a, b in ((copied, own), (own, copied), (copied, copied)):
        for _ in range(3):
            got = call(a, b)
            assert isinstance(got, np.ndarray), "went to the kernel"
            _same_bits(got, _expected(op, a, b))
            results.append(weakref.ref(got))
            del got
    assert any(r() is not None for r in results)
    reused = call(copied, own)  # (the kept result, nobody holding it: written again)
    assert reused is results[-1]()
    swapped = own.astype(np.dtype(dtype).newbyteorder())
    if swapped.dtype.itemsize > 1:
        assert call(copied, swapped) == "kernel"


def test_shapes_numpy_broadcasts_otherwise_and_big_arrays_stay_numpys() -> None:
    add = _call(0)
    row, col = np.ones((1, 3), np.float32), np.ones((2, 1), np.float32)
    for _ in range(3):
        _same_bits(add(row, col), row + col)
    big = np.ones(MAX + 1, np.float32)
    first = add(big, big)
    del first
    second = add(big, big)  # too big to keep: numpy's allocation every time
    _same_bits(second, big + big)
    one = np.ones((1, 1, 1), np.float64)  # one element with more dimensions than the other
    vec = np.arange(3, dtype=np.float64)
    for _ in range(3):
        _same_bits(add(vec, one), vec + one)
        _same_bits(add(one, vec), one + vec)


def test_zero_d_results_are_arrays_and_non_contiguous_operands_are_numpys() -> None:
    sub = _call(1)
    for k in range(3):
        got = sub(np.array(k, np.int32), np.array(5, np.int32))
        assert type(got) is np.ndarray and got.shape == () and got.dtype == np.int32
        assert int(got) == k - 5
        del got
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    strided = base[:, ::2]
    for _ in range(3):
        _same_bits(sub(strided, strided[::-1]), strided - strided[::-1])


def _wrong_probes() -> list[list[tuple[Any, ...]]]:
    """Probes that disagree with what the C side reads, one field each."""
    good = quiet_loop._probe(np.arange(6, dtype=np.float32).reshape(2, 3))
    array, address, shape, strides, base, dtype, flags = good
    return [
        [(array, address + 4, shape, strides, base, dtype, flags)],
        [(array, address, (3, 2), strides, base, dtype, flags)],
        [(array, address, shape, (4, 4), base, dtype, flags)],
        [(array, address, shape, strides, array, dtype, flags)],
        [(array, address, shape, strides, base, np.dtype(np.int32), flags)],
        [(array, address, shape, strides, base, dtype, flags ^ 0x0400)],
        [(np.float32(1.0), address, shape, strides, base, dtype, flags)],  # not an ndarray
    ]


@pytest.mark.parametrize("wrong", range(len(_wrong_probes())))
def test_a_bad_layout_probe_turns_the_direct_path_off(wrong: int) -> None:
    """native/array_fields.h: a numpy whose arrays do not read as the probe expects never
    has its fields read: the call keeps no result (its reference count shows the call's
    own reference) and is numpy's every time; a good probe turns it on again."""
    module = quiet_loop.loop()
    a = np.float32([1.0, 2.0])
    plain = np.add(a, a)
    named = sys.getrefcount(plain)  # a fresh array held by one name
    add = _call(0)
    kept = add(a, a)
    assert sys.getrefcount(kept) == named + 1  # and by the call
    try:
        assert module.arrays(_wrong_probes()[wrong], quiet_loop._DIRECT_DTYPES) is False
        add = _call(0)
        for _ in range(3):
            result = add(a, a)
            assert sys.getrefcount(result) == named  # the name's only
            _same_bits(result, a + a)
    finally:
        assert module.arrays(quiet_loop._probes(), quiet_loop._DIRECT_DTYPES) is True
    with pytest.raises(TypeError):
        module.arrays([], quiet_loop._DIRECT_DTYPES)


def _chain_model(n: int, elem: int) -> onnx.ModelProto:
    nodes, x, before = [], "x", "z"
    outputs = []
    for i in range(n):
        y = f"v{i}"
        nodes.append(helper.make_node("Add" if i % 3 else "Mul", [x, before], [y], name=f"n{i}"))
        x, before = y, x
        if i % 4 == 1:
            outputs.append(y)
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info(v, elem, [3]) for v in ("x", "z")],
        [helper.make_tensor_value_info(o, elem, [3]) for o in [*outputs, x]],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_a_sessions_outputs_survive_its_next_runs(dtype: Any) -> None:
    """A caller's outputs of one run are not the next run's buffers: every run of a
    chain of small nodes gives the stepped run's numbers, and earlier outputs keep theirs."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _chain_model(12, elem)
    session = Session(model)
    runs = []
    for k in range(4):
        feeds = {"x": np.array([1, -2, k], dtype), "z": np.array([3, k, 1], dtype)}
        with np.errstate(all="ignore"):
            got = session.run(feeds)
        runs.append((feeds, got, {n: v.copy() for n, v in got.items()}))
    for feeds, got, copies in runs:
        want = stepped_values(model, feeds)
        for name, value in got.items():
            np.testing.assert_array_equal(value, copies[name], err_msg=name)
            np.testing.assert_array_equal(value, want[name], err_msg=name)
