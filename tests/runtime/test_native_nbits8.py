"""MatMulNBits at accuracy_level 4 (int8 activations, as onnxruntime computes it): the
compiled kernel (runtime/native/_nbits8.c) at every instruction-set level this machine
has, and every route of the op, against nbits_accuracy.emulate_level4 (float64).

The bound.  The int8 steps and each block's integer sums are exact in every route; what
rounds is float32: the step times the weight's scale, the blocks' (or, in the float
routes, the K terms') sum, the zero-point terms and the bias.  With T the sum of the
magnitudes of all terms, sum_b |sa_b sb_nb| (sum_k |qa_k| code_k + zp_nb |sum_k qa_k|),
every output must satisfy

    |y - emulated| <= (K + 2 kb + 16) * 2^-24 * (T + |bias_n|)

A code read wrong, a block's scale taken from its neighbour or an activation rounded to
the wrong step is far outside it (test_the_bound_catches_one_wrong_step)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxviz.runtime import native
from onnxviz.runtime.kernels import _weight_cache as wc
from onnxviz.runtime.kernels import contrib_quant
from onnxviz.runtime.kernels.contrib_quant import matmul_nbits, unpack_bits
from onnxviz.runtime.nbits_accuracy import emulate_level4
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree, stepped_values
from tests.runtime.native_modules import compiled
from tests.runtime.nbits_nodes import genai_export, nbits_nodes, nbits_relu_model

pytestmark = pytest.mark.numeric

U = 2.0**-24


@pytest.fixture
def nbits8() -> Any:
    module = compiled("nbits8", "MatMulNBits at level 4 rounds the rows in numpy")
    before = module.level()
    yield module
    module.set_level(before)


def _case(
    rng: np.random.Generator, M: int, K: int, N: int, block: int, with_zp: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    kb = (K + block - 1) // block
    b = rng.integers(0, 256, (N, kb, block // 2), dtype=np.uint8)
    scales = (rng.standard_normal((N, kb)) * 0.05).astype(np.float32)
    zp = rng.integers(0, 256, (N, (kb + 1) // 2), dtype=np.uint8) if with_zp else None
    a = (rng.standard_normal((M, K)) * rng.choice([1e-3, 1.0, 50.0])).astype(np.float32)
    return a, b, scales, zp


def _magnitudes(
    a: np.ndarray, b: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, block: int
) -> np.ndarray:
    """T of the module docstring, [M, N]."""
    M, K = a.shape
    N, kb = scales.shape
    pad = np.zeros((M, kb * block), np.float64)
    pad[:, :K] = a
    blocks = pad.reshape(M, kb, block)
    amax = np.abs(blocks).max(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        qa = np.rint(np.nan_to_num(blocks * np.where(amax > 0, 127 / amax, 0)[..., None]))
    codes = unpack_bits(b, 4, block).reshape(N, kb, block).astype(np.float64)
    z = np.full((N, kb), 8.0) if zp is None else unpack_bits(zp, 4, kb).astype(np.float64)
    dots = np.einsum("mkb,nkb->mnk", np.abs(qa), codes)
    sums = np.abs(qa.sum(-1))[:, None, :] * z[None]
    step = (amax / 127)[:, None, :] * np.abs(scales.astype(np.float64))[None]
    return np.asarray(((dots + sums) * step).sum(-1))


def _assert_within_bound(
    y: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    zp: np.ndarray | None,
    bias: np.ndarray | None,
    block: int,
    what: str = "",
) -> None:
    M, K = a.shape
    N, kb = scales.shape
    want = emulate_level4(
        a.astype(np.float64), b, scales, zp, bias, K=K, N=N, block_size=block
    ).astype(np.float64)
    mags = _magnitudes(a, b, scales, zp, block)
    if bias is not None:
        mags = mags + np.abs(bias.astype(np.float64))
    bound = (K + 2 * kb + 16) * U * mags
    err = np.abs(y.astype(np.float64) - want)
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {y.size} outside the bound; worst error/bound "
        f"{float(np.max(err / np.maximum(bound, 1e-300))):.3g}"
    )


def _run(
    module: Any,
    a: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    zp: np.ndarray | None,
    bias: np.ndarray | None,
    block: int,
) -> np.ndarray:
    M, K = a.shape
    N = scales.shape[0]
    out = np.full((M, N), np.nan, dtype=np.float32)
    module.matmul(
        a,
        b,
        scales,
        b"" if zp is None else zp,
        b"" if bias is None else bias,
        out,
        M,
        K,
        N,
        block,
        int(zp is not None),
        0 if zp is None else zp.shape[1],
        int(bias is not None),
    )
    return out


@pytest.mark.parametrize("level", native.levels())
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    M=st.integers(1, 9),
    K=st.integers(1, 400),
    N=st.integers(1, 11),
    block=st.sampled_from([16, 32, 64, 128, 256]),
    with_zp=st.booleans(),
    with_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_are_the_level4_product(
    nbits8: Any,
    level: int,
    M: int,
    K: int,
    N: int,
    block: int,
    with_zp: bool,
    with_bias: bool,
    seed: int,
) -> None:
    # every tile (4 columns by 2 rows, 4 by 1, 1 by 4, 1 by 1), every partial last chunk
    # (blocks of 16 and 32 leave 16, 32 or 48 elements), K short of its last block
    assert nbits8.set_level(level) == level
    rng = np.random.default_rng(seed)
    a, b, scales, zp = _case(rng, M, K, N, block, with_zp)
    bias = rng.standard_normal(N).astype(np.float32) if with_bias else None
    y = _run(nbits8, a, b, scales, zp, bias, block)
    _assert_within_bound(y, a, b, scales, zp, bias, block, f"level {level}")
    if level > 1:
        # level 3 takes each chunk's integer dot by vpdpbusd where level 1 takes it by
        # vpmaddubsw pairs: the same exact int32 lanes, then the same float steps, so
        # level 1's bits (level 2 runs level 1's code)
        nbits8.set_level(1)
        np.testing.assert_array_equal(y, _run(nbits8, a, b, scales, zp, bias, block))


@pytest.mark.parametrize("level", native.levels())
def test_a_decoder_sized_product(nbits8: Any, level: int) -> None:
    # A Llama MLP's K: many chunks in each accumulator, the zero points in vectors of 8
    nbits8.set_level(level)
    rng = np.random.default_rng(level)
    for block, with_zp in ((32, True), (32, False), (128, True), (16, True)):
        a, b, scales, zp = _case(rng, 3, 2816, 67, block, with_zp)
        y = _run(nbits8, a, b, scales, zp, None, block)
        _assert_within_bound(y, a, b, scales, zp, None, block, f"block {block}")


@pytest.mark.parametrize("level", native.levels())
def test_the_bound_catches_one_wrong_step(nbits8: Any, level: int) -> None:
    # The test can fail: held against a reference with one code moved by one, or one
    # activation a step away from its rounding, the kernel's product is outside the bound
    nbits8.set_level(level)
    rng = np.random.default_rng(7)
    K, N, block = 200, 6, 32
    a, b, scales, zp = _case(rng, 1, K, N, block, True)
    y = _run(nbits8, a, b, scales, zp, None, block)
    _assert_within_bound(y, a, b, scales, zp, None, block)
    wrong = b.copy()
    wrong[2, 1, 3] ^= 0x01
    with pytest.raises(AssertionError, match="outside the bound"):
        _assert_within_bound(y, a, wrong, scales, zp, None, block)
    k = int(np.argsort(np.abs(a[0]))[K // 2])  # not a block's maximum: its step stays
    nudged = a.copy()
    nudged[0, k] += np.float32(np.abs(a[0, (k // block) * block :][:block]).max() / 127)
    with pytest.raises(AssertionError, match="outside the bound"):
        _assert_within_bound(y, nudged, b, scales, zp, None, block)


def test_rounding_is_half_to_even_of_127_over_max(nbits8: Any) -> None:
    # A block whose values are k + 1/2 steps: each must round to the even neighbour, and
    # the step is max / 127 (the max itself is 127 steps).
    for level in native.levels():
        nbits8.set_level(level)
        N, block = 1, 32
        halves = np.arange(-62, 31, 3, dtype=np.float32) + np.float32(0.5)
        a = np.concatenate([[127.0], halves]).astype(np.float32)[None, :]
        b = np.zeros((N, 1, block // 2), np.uint8)
        b[0, 0, :] = 0x11  # every code 1: with zero point 0 each weight is its scale
        zp = np.zeros((N, 1), np.uint8)
        scales = np.ones((N, 1), np.float32)
        y = _run(nbits8, a, b, scales, zp, None, block)
        assert float(y[0, 0]) == float(127 + np.rint(halves).sum()), f"level {level}"
        assert float(np.rint(halves).sum()) != float(np.floor(halves + 0.5).sum())


def test_a_row_with_nan_or_inf_gives_nan_and_other_rows_stand(nbits8: Any) -> None:
    rng = np.random.default_rng(5)
    a, b, scales, zp = _case(rng, 4, 100, 5, 32, True)
    a[1, 7] = np.nan
    a[2, 99] = np.inf
    for level in native.levels():
        nbits8.set_level(level)
        y = _run(nbits8, a, b, scales, zp, None, 32)
        assert np.isnan(y[1:3]).all() and np.isfinite(y[[0, 3]]).all()
        _assert_within_bound(y[[0, 3]], a[[0, 3]], b, scales, zp, None, 32)
        want = emulate_level4(a, b, scales, zp, K=100, N=5, block_size=32)
        np.testing.assert_array_equal(np.isnan(want), np.isnan(y))


def test_a_block_of_zeros_contributes_nothing(nbits8: Any) -> None:
    rng = np.random.default_rng(6)
    a, b, scales, zp = _case(rng, 2, 96, 3, 32, True)
    a[:, 32:64] = 0  # max 0: no step, no division
    for level in native.levels():
        nbits8.set_level(level)
        y = _run(nbits8, a, b, scales, zp, None, 32)
        assert np.isfinite(y).all()
        _assert_within_bound(y, a, b, scales, zp, None, 32)


def test_wrong_sizes_raise_value_error(nbits8: Any) -> None:
    rng = np.random.default_rng(0)
    M, K, N, block = 2, 100, 3, 32
    a, b, scales, zp = _case(rng, M, K, N, block, True)
    assert zp is not None
    bias = np.zeros(N, np.float32)
    out = np.empty((M, N), np.float32)
    good = [a, b, scales, zp, bias, out, M, K, N, block, 1, zp.shape[1], 1]
    nbits8.matmul(*good)
    names = [
        "a",
        "b",
        "scales",
        "zp",
        "bias",
        "out",
        "M",
        "K",
        "N",
        "block",
        "has_zp",
        "zp_row",
        "has_bias",
    ]

    def call(**change: Any) -> None:
        args = list(good)
        for name, value in change.items():
            args[names.index(name)] = value
        with pytest.raises(ValueError):
            nbits8.matmul(*args)

    call(a=a[:, :-1].copy())
    call(b=b.reshape(-1)[:-1].copy())
    call(scales=scales.reshape(-1)[:-1].copy())
    call(zp=zp.reshape(-1)[:-1].copy())
    call(bias=bias[:-1].copy())
    call(out=np.empty((M, N - 1), np.float32))
    call(M=M + 1)
    call(K=K + 32)
    call(N=N + 1)
    call(M=-1)
    call(K=0)
    call(block=48)
    call(block=8)
    call(zp_row=0)
    call(zp_row=1 << 40)
    with pytest.raises(TypeError):  # out must be writable
        nbits8.matmul(*good[:5], out.tobytes(), *good[6:])


# ---- the op: which products quantize, and every route gives the same numbers ----------


def _frozen(x: np.ndarray) -> np.ndarray:
    """A read-only view over bytes, as a model's initializers are held (cached forms)."""
    return np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape)


@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize("rows", [1, 5, 16, 17, 40])
@pytest.mark.parametrize("bits", [4, 2, 8])
def test_every_route_of_the_op_is_the_level4_product(
    monkeypatch: Any, with_zp: bool, rows: int, bits: int
) -> None:
    """The int8 kernel (4-bit, any rows), the float kernel, the packed GEMM and BLAS on
    the int8 steps (other bits, or the compiled kernels off): each within the bound of
    the emulation."""
    rng = np.random.default_rng([rows, bits, int(with_zp)])
    K, N, block = 300, 520, 32  # 156K weights; the float kernel's threshold lowered
    kb = (K + block - 1) // block
    b = rng.integers(0, 256, (N, kb, block * bits // 8), dtype=np.uint8)
    scales = (rng.standard_normal((N, kb)) * 0.05).astype(np.float32)
    zp = rng.integers(0, 256, (N, (kb * bits + 7) // 8), dtype=np.uint8) if with_zp else None
    a = rng.standard_normal((rows, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    attrs = {"K": K, "N": N, "block_size": block, "bits": bits, "accuracy_level": 4}
    want = emulate_level4(a, b, scales, zp, bias, K=K, N=N, block_size=block, bits=bits)
    exact = matmul_nbits(a, b, scales, zp, None, bias, **{**attrs, "accuracy_level": 0})
    monkeypatch.setattr(contrib_quant, "NATIVE_MIN_WEIGHTS", 0)
    results = {}
    for kernels in ("on", "off"):
        if kernels == "off":
            monkeypatch.setattr(contrib_quant, "_NBITS8", None)
            monkeypatch.setattr(contrib_quant, "_NBITS", None)
        wc.clear()
        fb, fs = _frozen(b), _frozen(scales)
        fz = None if zp is None else _frozen(zp)
        for _ in range(2):  # the second call reads the cached forms
            results[kernels] = matmul_nbits(a, fb, fs, fz, None, bias, **attrs)
    wc.clear()
    scale = float(np.abs(want).max())
    gap = float(np.abs(exact - want).max())
    assert gap > 1e-4 * scale  # the quantization shows: the routes must follow it
    for kernels, y in results.items():
        if bits == 4:
            _assert_within_bound(y, a, b, scales, zp, bias, block, f"kernels {kernels}")
        else:  # the bound's magnitudes are written for 4-bit codes
            np.testing.assert_allclose(y, want, rtol=0, atol=(K + 64) * U * 8 * scale)


@pytest.mark.parametrize(
    ("level", "zp_kind", "g_idx", "int8"),
    [
        (4, "uint8", False, True),
        (4, "none", False, True),
        (4, "float", False, False),  # onnxruntime keeps float zero points in float
        (4, "uint8", True, False),  # and a g_idx
        (3, "uint8", False, False),
        (0, "none", False, False),
    ],
)
def test_which_products_round_the_activations(
    level: int, zp_kind: str, g_idx: bool, int8: bool
) -> None:
    rng = np.random.default_rng(3)
    K, N, block = 96, 7, 32
    kb = K // block
    b = rng.integers(0, 256, (N, kb, block // 2), dtype=np.uint8)
    scales = (rng.standard_normal((N, kb)) * 0.05).astype(np.float32)
    zp: np.ndarray | None = None
    if zp_kind == "uint8":
        zp = rng.integers(0, 256, (N, (kb + 1) // 2), dtype=np.uint8)
    elif zp_kind == "float":
        zp = rng.integers(0, 16, (N, kb)).astype(np.float32)
    g = (np.arange(K) // block).astype(np.int32) if g_idx else None
    a = rng.standard_normal((2, K)).astype(np.float32)
    attrs = {"K": K, "N": N, "block_size": block, "bits": 4}
    got = matmul_nbits(a, b, scales, zp, g, None, accuracy_level=level, **attrs)
    exact = matmul_nbits(a, b, scales, zp, g, None, accuracy_level=0, **attrs)
    if int8:
        want = emulate_level4(a, b, scales, zp, K=K, N=N, block_size=block)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))
        assert float(np.abs(got - exact).max()) > 1e-3 * float(np.abs(exact).max())
    else:
        np.testing.assert_array_equal(got, exact)


def _level4_model(
    K: int, N: int, block: int, rng: np.random.Generator
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    a, b, scales, zp = _case(rng, 1, K, N, block, True)
    bias = rng.standard_normal(N).astype(np.float32)
    model = nbits_relu_model(b, scales, zp, bias, K, N, block, level=4)  # type: ignore[arg-type]
    return model, {"b": b, "s": scales, "z": zp, "bias": bias}  # type: ignore[dict-item]


@pytest.mark.parametrize("rows", [1, 3, 16, 24, 70])
def test_a_session_unwatched_and_stepped_give_the_same_numbers(rows: int) -> None:
    """The prepared call (the int8 kernel with its buffers found once) and the stepped
    run's kernel call: the same product, to the bit."""
    rng = np.random.default_rng(rows)
    K, N, block = 160, 37, 32
    model, w = _level4_model(K, N, block, rng)
    a = rng.standard_normal((1, rows, K)).astype(np.float32)
    session = Session(model)
    run = session.run({"a": a})["r"]
    again = session.run({"a": a})["r"]
    stepped = stepped_values(model, {"a": a})
    np.testing.assert_array_equal(run, again)
    np.testing.assert_array_equal(run, stepped["r"])
    _assert_within_bound(stepped["y"][0], a[0], w["b"], w["s"], w["z"], w["bias"], block, "stepped")
    wc.clear()


def test_a_long_prompt_runs_the_int8_kernel_in_calls_of_rows(monkeypatch: Any, nbits8: Any) -> None:
    """A prompt of more rows than one call of the int8 kernel takes runs in calls of
    INT8_ROWS_PER_CALL rows (its scratch stays bounded), never the float routes (which
    would keep a float32 copy of the weight): every row's sums are the ones a call of that
    row alone gives, to the bit, and within the bound of the emulation."""
    nbits8.set_level(native.cpu_level())
    monkeypatch.setattr(contrib_quant, "INT8_ROWS_PER_CALL", 8)
    calls: list[int] = []
    real = nbits8.matmul

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(nbits8, name)

        def matmul(self, a: Any, *rest: Any) -> Any:
            calls.append(len(a))
            return real(a, *rest)

    monkeypatch.setattr(contrib_quant, "_NBITS8", Counting())  # whatever ONNXVIZ_NATIVE says
    monkeypatch.setattr(contrib_quant, "_kept_kn", lambda *args: pytest.fail("a float route"))
    rng = np.random.default_rng(21)
    K, N, block = 160, 37, 32
    _, b, scales, zp = _case(rng, 1, K, N, block, True)
    bias = rng.standard_normal(N).astype(np.float32)
    attrs = {"K": K, "N": N, "block_size": block, "bits": 4, "accuracy_level": 4}
    a = rng.standard_normal((3, 7, K)).astype(np.float32)  # 21 rows: calls of 8, 8 and 5
    a[1, 2] = 0.0  # a row of zeros (no int8 step) among them
    got = matmul_nbits(a, b, scales, zp, None, bias, **attrs)
    assert calls == [8, 8, 5] and got.shape == (3, 7, N)
    rows = a.reshape(-1, K)
    for r in range(len(rows)):
        alone = matmul_nbits(rows[r : r + 1], b, scales, zp, None, bias, **attrs)
        np.testing.assert_array_equal(got.reshape(-1, N)[r], alone[0])
    _assert_within_bound(got.reshape(-1, N), rows, b, scales, zp, bias, block)


@pytest.mark.parametrize("level", native.levels())
@pytest.mark.parametrize("block", [16, 32, 64, 128])
@pytest.mark.parametrize("with_zp", [False, True])
def test_a_rows_outputs_do_not_depend_on_how_many_rows_came_with_it(
    nbits8: Any, level: int, block: int, with_zp: bool
) -> None:
    """Up to four rows (a decode step) run one column at a time, more rows in tiles of
    four columns: a row's outputs are the same bits whichever tile made them, alone or
    among 2 to 9 rows, in the whole column tiles and the columns past them (N 37), and
    within the bound of the emulation."""
    nbits8.set_level(level)
    rng = np.random.default_rng(block + with_zp)
    K, N = 300, 37
    _, b, scales, zp = _case(rng, 1, K, N, block, with_zp)
    bias = rng.standard_normal(N).astype(np.float32)
    rows = rng.standard_normal((9, K)).astype(np.float32)
    alone = np.concatenate(
        [_run(nbits8, rows[r : r + 1], b, scales, zp, bias, block) for r in range(9)]
    )
    _assert_within_bound(alone, rows, b, scales, zp, bias, block, "alone")
    for m in range(2, 10):
        together = _run(nbits8, rows[:m], b, scales, zp, bias, block)
        np.testing.assert_array_equal(together, alone[:m], err_msg=f"{m} rows")


@pytest.mark.parametrize(
    "name", ["ort_genai_llama_int4", "ort_genai_phi3_int4_past", "ort_genai_qwen2_int4_past"]
)
def test_genai_exports_run_the_int8_kernel_within_the_bound(
    monkeypatch: Any, nbits8: Any, name: str
) -> None:
    """A committed onnxruntime-genai int4 export (accuracy_level 4): each MatMulNBits node,
    fed the inputs of a run with the compiled kernels off, is within the bound of the
    emulation with the int8 kernel; the run uses that kernel for every one; and our
    modes (unwatched, plain, stepped) agree on the whole model."""
    model, feeds = genai_export(name)
    monkeypatch.setattr(contrib_quant, "_NBITS8", None)
    monkeypatch.setattr(contrib_quant, "_NBITS", None)
    off = stepped_values(model, feeds)  # a run with the kernels off
    nbits8.set_level(native.cpu_level())
    calls = []

    class Counting:
        def matmul(self, *args: Any) -> None:
            calls.append(args[6])
            nbits8.matmul(*args)

    monkeypatch.setattr(contrib_quant, "_NBITS8", Counting())  # whatever ONNXVIZ_NATIVE says
    checked = 0
    for node, attrs, (a2, b, scales, zp, _g, bias) in nbits_nodes(model, off):
        assert attrs.get("accuracy_level") == 4 and attrs.get("bits", 4) == 4, node.name
        y = matmul_nbits(a2, b, scales, zp, None, bias, **attrs)
        kb = -(-attrs["K"] // attrs["block_size"])
        zp2 = None if zp is None else np.asarray(zp).reshape(attrs["N"], -1)
        _assert_within_bound(
            y,
            a2,
            np.asarray(b).reshape(attrs["N"], kb, -1),
            np.asarray(scales, np.float32).reshape(attrs["N"], kb),
            zp2,
            None if bias is None else np.asarray(bias, np.float32),
            attrs["block_size"],
            node.name,
        )
        checked += 1
    assert checked > 0 and len(calls) == checked
    assert_modes_agree(model, feeds)


def test_the_held_call_takes_the_common_call_and_hands_on_the_rest(
    monkeypatch: Any, nbits8: Any
) -> None:
    """The prepared call made in C (_nbits8's held, from the node loop): the kernel's own
    numbers on a float32 C-contiguous input of up to INT8_ROWS_PER_CALL rows with the node's
    constants; every other call goes to the Python call, which gives the kernel's."""
    from onnxviz.runtime.registry import RUNTIME

    nbits8.set_level(native.cpu_level())
    monkeypatch.setattr(contrib_quant, "_NBITS8", nbits8)  # whatever ONNXVIZ_NATIVE says

    rng = np.random.default_rng(12)
    K, N, block = 96, 20, 32
    _, b, scales, zp = _case(rng, 1, K, N, block, True)
    bias = rng.standard_normal(N).astype(np.float32)
    fb, fs, fz, fbias = (_frozen(x) for x in (b, scales, zp, bias))  # type: ignore[arg-type]
    attrs = {"K": K, "N": N, "block_size": block, "bits": 4, "accuracy_level": 4}
    held = contrib_quant._prepared_nbits(attrs, (RUNTIME, fb, fs, fz, None, fbias), 1)
    assert type(held).__name__ == "HeldInt8"
    a = rng.standard_normal((2, 3, K)).astype(np.float32)
    y = held(a, fb, fs, fz, None, fbias)
    assert y.shape == (2, 3, N) and y.dtype == np.float32
    np.testing.assert_array_equal(y, matmul_nbits(a, b, scales, zp, None, bias, **attrs))
    _assert_within_bound(y.reshape(6, N), a.reshape(6, K), b, scales, zp, bias, block)
    many = rng.standard_normal((contrib_quant.INT8_ROWS_PER_CALL + 1, K)).astype(np.float32)
    strided = np.asfortranarray(a[0])
    for other in (a.astype(np.float64), strided, many, a[0, 0]):
        got = held(other, fb, fs, fz, None, fbias)
        want = matmul_nbits(other, b, scales, zp, None, bias, **attrs)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    # another weight object (a feed over the initializer): the Python call, its numbers
    other_b = b.copy()
    np.testing.assert_array_equal(
        held(a, other_b, fs, fz, None, fbias),
        matmul_nbits(a, other_b, scales, zp, None, bias, **attrs),
    )
