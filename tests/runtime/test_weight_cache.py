"""Constant-weight forms made once (kernels/_weight_cache): keyed only on arrays that
cannot change, never stale, bounded in memory, and MatMulNBits gives the definition's
numbers through it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxviz.model.tensors import to_array
from onnxviz.runtime.kernels import _weight_cache as wc
from onnxviz.runtime.kernels import contrib_quant
from onnxviz.runtime.kernels.contrib_quant import matmul_nbits
from onnxviz.runtime.session import Session

pytestmark = pytest.mark.numeric

RNG = np.random.default_rng(21)


@pytest.fixture(autouse=True)
def _empty_cache():
    wc.clear()
    yield
    wc.clear()


def _frozen_copy(x: np.ndarray) -> np.ndarray:
    """``x`` as the interpreter holds an initializer: a read-only view over proto bytes."""
    return to_array(numpy_helper.from_array(x, "w"))


def test_only_arrays_that_cannot_change_are_frozen() -> None:
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    assert not wc.frozen(x)
    assert wc.frozen(_frozen_copy(x))
    view = x.view()
    view.flags.writeable = False  # read-only, but its base can still be written
    assert not wc.frozen(view)
    assert not wc.frozen(None)
    assert not wc.frozen([1, 2])


def _nbits_reference(q: np.ndarray, scales: np.ndarray, zp: np.ndarray, block: int) -> np.ndarray:
    """The dequantized weight by the definition, from unpacked 4-bit values (int64 math
    for the integer part)."""
    n, k = q.shape
    zpv = np.repeat(zp.astype(np.int64), block, axis=1)[:, :k]
    return (q.astype(np.int64) - zpv) * np.repeat(scales.astype(np.float64), block, axis=1)[:, :k]


def _pack4(values: np.ndarray) -> np.ndarray:
    """Pack 4-bit values along the last axis, low nibble first."""
    v = values.astype(np.uint8)
    if v.shape[-1] % 2:
        v = np.concatenate([v, np.zeros((*v.shape[:-1], 1), np.uint8)], axis=-1)
    return v[..., 0::2] | (v[..., 1::2] << 4)


def _nbits_case(k: int = 72, n: int = 24, block: int = 32):
    k_blocks = -(-k // block)
    q = RNG.integers(0, 16, (n, k_blocks * block))
    zp = RNG.integers(0, 16, (n, k_blocks))
    scales = RNG.uniform(0.01, 0.1, (n, k_blocks)).astype(np.float32)
    packed = _pack4(q).reshape(n, k_blocks, block // 2)
    zp_packed = _pack4(zp)
    w = _nbits_reference(q[:, :k], scales, zp, block)
    attrs = {"K": k, "N": n, "block_size": block, "bits": 4}
    return packed, scales.reshape(-1), zp_packed, w, attrs


def test_matmul_nbits_cached_weight_gives_the_definitions_numbers(monkeypatch) -> None:
    # The numpy path's float32 form (the compiled kernel keeps none: test_native_nbits).
    monkeypatch.setattr(contrib_quant, "_NBITS", None)
    packed, scales, zp, w, attrs = _nbits_case()
    a = RNG.standard_normal((3, attrs["K"])).astype(np.float32)
    fb, fs, fz = _frozen_copy(packed), _frozen_copy(scales), _frozen_copy(zp)
    plain = matmul_nbits(a, packed, scales, zp, **attrs)  # writeable: not stored
    assert wc.stored_bytes() == 0
    first = matmul_nbits(a, fb, fs, fz, **attrs)
    assert wc.stored_bytes() > 0
    second = matmul_nbits(a, fb, fs, fz, **attrs)
    expected = a.astype(np.float64) @ w.T
    for y in (plain, first, second):
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(plain, first)


def test_a_writeable_weight_changed_between_calls_is_seen() -> None:
    packed, scales, zp, _, attrs = _nbits_case()
    a = RNG.standard_normal((2, attrs["K"])).astype(np.float32)
    before = matmul_nbits(a, packed, scales, zp, **attrs)
    packed ^= np.uint8(0x11)  # every nibble moves by one
    after = matmul_nbits(a, packed, scales, zp, **attrs)
    fresh = matmul_nbits(a, packed.copy(), scales.copy(), zp.copy(), **attrs)
    assert not np.allclose(before, after)
    np.testing.assert_array_equal(after, fresh)


def test_same_arrays_other_attributes_are_other_entries() -> None:
    packed, scales, zp, w, attrs = _nbits_case(k=64, n=8, block=32)
    fb, fs, fz = _frozen_copy(packed), _frozen_copy(scales), _frozen_copy(zp)
    a = RNG.standard_normal((2, 64)).astype(np.float32)
    y64 = matmul_nbits(a, fb, fs, fz, **attrs)
    # K=60 reads the same blocks but drops the last 4 features of the weight.
    y60 = matmul_nbits(a[:, :60], fb, fs, fz, **{**attrs, "K": 60})
    np.testing.assert_allclose(y64, a.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        y60, a[:, :60].astype(np.float64) @ w[:, :60].T, rtol=1e-5, atol=1e-5
    )


def test_memory_is_bounded_and_a_full_cache_keeps_what_it_holds(monkeypatch) -> None:
    monkeypatch.setattr(wc, "CAP_BYTES", 4 * 1024)
    arrays = [_frozen_copy(np.full(100, i, np.float32)) for i in range(20)]
    for x in arrays:
        wc.derived("test", (x,), (), lambda x=x: x * 2)
        assert wc.stored_bytes() <= 4 * 1024
    # A decoder's steps ask for the same forms in the same order: the first ones stay
    # stored and hit on every later pass; those past the cap are rebuilt each time.
    for _ in range(2):
        calls: list[int] = []
        for i, x in enumerate(arrays):
            y = wc.derived("test", (x,), (), lambda i=i, x=x, calls=calls: calls.append(i) or x * 2)
            np.testing.assert_array_equal(y, np.full(100, 2 * i, np.float32))
        fitting = (4 * 1024) // 400
        assert calls == list(range(fitting, 20))
    big = _frozen_copy(np.zeros(2000, np.float32))  # more than a quarter of the cap
    wc.derived("test", (big,), (), lambda: big + 1)
    assert wc.stored_bytes() <= 4 * 1024
    # When a model goes, its forms go, and the room is there for the next one's.
    del arrays[:3]
    late = _frozen_copy(np.ones(100, np.float32))
    calls = []
    for _ in range(2):
        wc.derived("test", (late,), (), lambda: calls.append(1) or late * 2)
    assert calls == [1]


def test_thedefault_cap_is_a_quarter_of_the_machines_memory(monkeypatch) -> None:
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": (24 << 30) // 4096}
    monkeypatch.setattr(wc.os, "sysconf", lambda name: pages[name])
    assert wc.default_cap() == 6 << 30  # a 1B-parameter int4 decoder's forms fit
    pages["SC_PHYS_PAGES"] = (1 << 30) // 4096
    assert wc.default_cap() == 512 << 20  # the floor

    def no_sysconf(name: str) -> int:
        raise ValueError(name)

    monkeypatch.setattr(wc.os, "sysconf", no_sysconf)
    assert wc.default_cap() == 512 << 20


def test_session_runs_an_int4_decoder_layer_the_same_twice(monkeypatch) -> None:
    monkeypatch.setattr(contrib_quant, "_NBITS", None)  # the numpy path's float32 form
    packed, scales, zp, w, attrs = _nbits_case(k=64, n=48, block=32)
    node = helper.make_node(
        "MatMulNBits", ["a", "b", "s", "z"], ["y"], domain="com.microsoft", **attrs
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(packed, "b"),
            numpy_helper.from_array(scales, "s"),
            numpy_helper.from_array(zp, "z"),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
    )
    sess = Session(model)
    for rows in (1, 5):
        a = RNG.standard_normal((rows, 64)).astype(np.float32)
        for _ in range(2):
            (y,) = sess.run({"a": a}).values()
            np.testing.assert_allclose(y, a.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)
    assert wc.stored_bytes() >= 48 * 64 * 4


def test_an_entry_goes_away_with_its_source() -> None:
    import gc

    x = _frozen_copy(np.arange(1000, dtype=np.float32))
    calls = []
    wc.derived("test", (x,), (), lambda a=x: calls.append(1) or a * 2)
    wc.derived("test", (x,), (), lambda a=x: calls.append(1) or a * 2)
    assert calls == [1] and wc.stored_bytes() == 4000
    del x
    gc.collect()
    assert wc.stored_bytes() == 0
    # A new array that happens to get the dead one's id is never served the old form.
    y = _frozen_copy(np.ones(1000, dtype=np.float32))
    np.testing.assert_array_equal(wc.derived("test", (y,), (), lambda: y * 2), 2)


def test_kept_builds_only_what_it_keeps(monkeypatch) -> None:
    monkeypatch.setattr(wc, "CAP_BYTES", 4 * 1024)
    built: list[str] = []
    x = _frozen_copy(np.arange(100, dtype=np.float32))

    def make(tag: str) -> np.ndarray:
        built.append(tag)
        return x * 2

    # A caller's array (writeable) is never a key: nothing is built, the caller does without.
    assert wc.kept("t", (np.ones(3, np.float32),), (), 400, lambda: make("writeable")) is None
    # Too big for the cap (more than a quarter): nothing built.
    assert wc.kept("t", (x,), ("big",), 2000, lambda: make("big")) is None
    # Room: built once, then the stored form.
    first = wc.kept("t", (x,), (), 400, lambda: make("fits"))
    again = wc.kept("t", (x,), (), 400, lambda: make("again"))
    assert first is again and built == ["fits"]
    np.testing.assert_array_equal(first, x * 2)
    # Full: nothing built for the next form, the stored one stays.
    fillers = [_frozen_copy(np.full(100, i, np.float32)) for i in range(9)]
    for f in fillers:
        wc.derived("t", (f,), (), lambda f=f: f * 2)
    assert wc.kept("t", (x,), ("other",), 400, lambda: make("full")) is None
    assert wc.kept("t", (x,), (), 400, lambda: make("again")) is first
    assert built == ["fits"]


def test_a_new_view_of_a_constant_on_each_call_finds_the_stored_form() -> None:
    """A Reshape of an initializer that the plan cannot fold hands the kernel a new view
    object on every run: the form is keyed by the array viewed and the view's place in
    it, so it is built once, and a different view of the same array is a different
    form."""
    import gc

    root = _frozen_copy(RNG.standard_normal((6, 8)).astype(np.float32))
    built: list[tuple[int, ...]] = []

    def form(view: np.ndarray) -> np.ndarray:
        return wc.derived("t", (view,), (), lambda: built.append(view.shape) or view * 2)

    first = form(root.T)
    again = form(root.T)  # a new view object, the same place in the same array
    assert again is first and built == [(8, 6)]
    np.testing.assert_array_equal(first, root.T * 2)
    # Other views of that array: other offsets, shapes or strides are other forms.
    np.testing.assert_array_equal(form(root[1:].T), root[1:].T * 2)
    np.testing.assert_array_equal(form(root), root * 2)
    np.testing.assert_array_equal(form(root.reshape(8, 6)), root.reshape(8, 6) * 2)
    np.testing.assert_array_equal(form(root.T[::2]), root.T[::2] * 2)
    assert len(built) == 5
    # The entries live as long as the array viewed, not the short-lived view.
    held = wc.stored_bytes()
    assert held == sum(int(np.prod(s)) * 4 for s in built)
    gc.collect()
    assert wc.stored_bytes() == held
    del root, first, again
    gc.collect()
    assert wc.stored_bytes() == 0


def test_a_packed_weight_counts_against_the_cap() -> None:
    """The compiled kernels keep packed weights in bytearrays: they are memory too."""
    x = _frozen_copy(np.arange(16, dtype=np.float32))
    wc.derived("t", (x,), (), lambda: (bytearray(1000), 7))
    assert wc.stored_bytes() == 1000


def test_a_source_made_writeable_again_is_not_served_its_old_form() -> None:
    """An array that owns its memory may be made writeable again and changed: the form
    remembered for that very object (the fast path of a repeated call) is not served."""
    x = np.arange(100, dtype=np.float32)
    x.flags.writeable = False
    assert wc.frozen(x)
    first = wc.derived("t", (x,), (), lambda: x * 2)
    assert wc.derived("t", (x,), (), lambda: x * 3) is first  # stored, then remembered
    x.flags.writeable = True
    x[0] = 100.0
    again = wc.derived("t", (x,), (), lambda: x * 2)
    assert again[0] == 200.0


def test_initializers_from_typed_fields_are_frozen_so_their_forms_are_made_once(
    monkeypatch,
) -> None:
    """Scales and zero points usually come in the typed fields (float_data, int32_data),
    which decode to fresh arrays: the plan makes every initializer read-only, so a
    MatMulInteger whose zero points are stored so packs its int8 weight once, not on
    every call (a dynamic-quantized GPT-2 spent 3.6 ms a call repacking), with the
    same numbers run after run; a feed is never frozen by it."""
    from onnxviz.runtime import native
    from onnxviz.runtime.kernels import int8_products
    from tests.runtime.native_modules import at_level, compiled

    compiled("int8")
    level = native.cpu_level()
    if level is None or level < native.AVX2:
        pytest.skip("no int8 product below AVX2: the numpy product runs (no weight form)")
    b = RNG.integers(-127, 128, (64, 48)).astype(np.int8)
    zb = helper.make_tensor("zb", TensorProto.INT8, [], [3])  # int32_data, not raw
    za = helper.make_tensor("za", TensorProto.UINT8, [], [128])
    assert not zb.raw_data and not za.raw_data
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])],
        "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [5, 64])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(b, "b"), za, zb],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    a = RNG.integers(0, 256, (5, 64)).astype(np.uint8)
    packs: list[int] = []
    with at_level("int8", level):  # on even in the run with ONNXVIZ_NATIVE=off
        module = int8_products.module()
        assert module is not None
        real, real_columns = module.pack_weights, module.pack_columns

        class Counting:
            def __getattr__(self, name: str):
                return getattr(module, name)

            def pack_weights(self, *args):
                packs.append(1)
                return real(*args)

            def pack_columns(self, *args):  # (the row-major product's form of B)
                packs.append(1)
                return real_columns(*args)

        monkeypatch.setattr(int8_products, "module", lambda: Counting())
        session = Session(model)
        first = session.run({"a": a})["y"]
        for _ in range(3):
            np.testing.assert_array_equal(session.run({"a": a})["y"], first)
    assert len(packs) == 1
    want = (a.astype(np.int64) - 128) @ (b.astype(np.int64) - 3)
    np.testing.assert_array_equal(first, want)
    assert a.flags.writeable  # the feed is the caller's, untouched
