"""The compiled MatMulNBits kernel (runtime/native/_nbits.c) against the op's definition,
at every instruction-set level this machine has.

The bound.  The kernel's weights are the definition's float32 weights to the bit; only
the order of the float32 sums differs.  A K-term float32 sum (FMA: each product exact
before its addition is rounded) is within gamma_K = K*u/(1 - K*u), u = 2^-24, of the exact
sum, relative to the sum of the terms' magnitudes, whatever its order; adding the bias
rounds once more.  So every output element must satisfy

    |y - exact| <= (K + 2) * 2^-24 * (sum_k |a_k| |w_nk| + |bias_n|)

where exact is the float64 product of the definition's weights (its own error, K*2^-53,
is far below).  That holds for numpy's BLAS product too; a wrong code, zero point, scale or
element order is far outside it (test_the_bound_catches_one_wrong_weight)."""

from __future__ import annotations

import os
import shutil
import sysconfig
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

from onnxviz.runtime import native
from onnxviz.runtime.kernels import _weight_cache as wc
from onnxviz.runtime.kernels import contrib_quant
from onnxviz.runtime.kernels.contrib_quant import dequantize_nbits, matmul_nbits
from onnxviz.runtime.session import Session
from tests.runtime.differential import close, stepped_values
from tests.runtime.native_modules import compiled
from tests.runtime.nbits_nodes import genai_export, nbits_nodes, nbits_relu_model

pytestmark = pytest.mark.numeric

EXPORTERS = os.path.join(os.path.dirname(__file__), "..", "data", "exporters")
U = 2.0**-24


def _can_compile() -> bool:
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    return shutil.which("cc") is not None and os.path.exists(headers)


def test_the_kernel_is_built_where_a_compiler_is() -> None:
    if not _can_compile():
        pytest.skip("no C compiler or Python headers here: MatMulNBits runs its numpy path")
    assert native.built("nbits")


@pytest.fixture
def nbits() -> Iterator[Any]:
    """The module itself (whatever ONNXVIZ_NATIVE says: these tests prove the C code), its
    level put back afterwards."""
    if not native.built("nbits"):
        pytest.skip("_nbits was not built (no C compiler): the numpy path runs")
    import importlib

    module = importlib.import_module("onnxviz.runtime.native._nbits")
    before = module.level()
    gemm_rows = module.set_gemm_rows(5)  # the build's own threshold, put back afterwards
    module.set_gemm_rows(gemm_rows)
    yield module
    module.set_level(before)
    module.set_gemm_rows(gemm_rows)


def _case(
    rng: np.random.Generator, M: int, K: int, N: int, block: int, bits: int, zp_kind: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    kb = (K + block - 1) // block
    b = rng.integers(0, 256, (N, kb, block * bits // 8), dtype=np.uint8)
    scales = (rng.standard_normal((N, kb)) * 0.05).astype(np.float32)
    zp: np.ndarray | None = None
    if zp_kind == "uint8":
        zp = rng.integers(0, 256, (N, (kb * bits + 7) // 8), dtype=np.uint8)
    elif zp_kind == "float":  # the scales' type; not always whole codes
        zp = (rng.random((N, kb)) * (1 << bits)).astype(np.float32)
    a = rng.standard_normal((M, K)).astype(np.float32)
    return a, b, scales, zp


def _assert_within_bound(
    y: np.ndarray, a: np.ndarray, w: np.ndarray, bias: np.ndarray | None, what: str = ""
) -> None:
    """y [M, N] against the float64 product of a [M, K] and the definition's w [N, K]."""
    K = a.shape[-1]
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    exact = a64 @ w64.T
    mags = np.abs(a64) @ np.abs(w64).T
    if bias is not None:
        exact = exact + bias.astype(np.float64)
        mags = mags + np.abs(bias.astype(np.float64))
    bound = (K + 2) * U * mags
    err = np.abs(y.astype(np.float64) - exact)
    bad = ~(err <= bound)  # NaN is bad too
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
    K: int,
    N: int,
    block: int,
    bits: int,
) -> np.ndarray:
    out = np.full((a.shape[0], N), np.nan, dtype=np.float32)
    kind = 0 if zp is None else 1 if zp.dtype == np.uint8 else 2
    module.matmul(
        a,
        b,
        scales,
        b"" if zp is None else zp,
        b"" if bias is None else bias,
        out,
        a.shape[0],
        K,
        N,
        block,
        bits,
        kind,
        zp.shape[1] if kind == 1 else 0,  # type: ignore[union-attr]
        bias is not None,
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
    K=st.integers(1, 300),
    N=st.integers(1, 13),
    block=st.sampled_from([16, 32, 64, 128]),
    bits=st.sampled_from([2, 4, 8]),
    zp_kind=st.sampled_from(["none", "uint8", "float"]),
    with_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_are_the_definitions_product(
    nbits: Any,
    level: int,
    M: int,
    K: int,
    N: int,
    block: int,
    bits: int,
    zp_kind: str,
    with_bias: bool,
    seed: int,
) -> None:
    assert nbits.set_level(level) == level
    rng = np.random.default_rng(seed)
    a, b, scales, zp = _case(rng, M, K, N, block, bits, zp_kind)
    bias = rng.standard_normal(N).astype(np.float32) if with_bias else None
    w = dequantize_nbits(b, scales, zp, None, K, N, block, bits)
    y = _run(nbits, a, b, scales, zp, bias, K, N, block, bits)
    _assert_within_bound(y, a, w, bias, f"level {level}")


@pytest.mark.parametrize("level", native.levels())
@pytest.mark.parametrize(("bits", "block"), [(4, 32), (4, 16), (2, 64), (8, 16), (4, 128)])
@pytest.mark.parametrize("gemm_rows", [1, 1000])
def test_every_tile_shape_at_every_level(
    nbits: Any, level: int, bits: int, block: int, gemm_rows: int
) -> None:
    # Each level tiles rows of W by 4, 2, 1 and rows of A by 4, 3, 2, 1: every M and N
    # remainder, with a partial last block (K not a multiple of the block); AVX-512 from
    # gemm_rows rows of A on through 4 dequantized rows of W (here: always, or never).
    nbits.set_level(level)
    nbits.set_gemm_rows(gemm_rows)
    rng = np.random.default_rng([level, bits, block])
    K = 3 * block + 5
    for M in range(1, 10):
        for N in range(1, 10):
            a, b, scales, zp = _case(rng, M, K, N, block, bits, "uint8")
            w = dequantize_nbits(b, scales, zp, None, K, N, block, bits)
            y = _run(nbits, a, b, scales, zp, None, K, N, block, bits)
            _assert_within_bound(y, a, w, None, f"level {level} M={M} N={N}")


@pytest.mark.parametrize("level", native.levels())
@pytest.mark.parametrize(
    ("M", "K", "block", "zp_kind"),
    [
        (3, 2816, 32, "none"),
        (7, 2816, 32, "none"),
        (6, 4100, 2048, "uint8"),
        (1, 4100, 2048, "float"),
    ],
)
def test_a_decoder_sized_product(
    nbits: Any, level: int, M: int, K: int, block: int, zp_kind: str
) -> None:
    # Long rows (many blocks in each accumulator, several passes of the buffered rows):
    # K of a 1B Llama's MLP; blocks longer than a pass.
    nbits.set_level(level)
    rng = np.random.default_rng([level, M, K])
    N = 67
    a, b, scales, zp = _case(rng, M, K, N, block, 4, zp_kind)
    w = dequantize_nbits(b, scales, zp, None, K, N, block, 4)
    _assert_within_bound(_run(nbits, a, b, scales, zp, None, K, N, block, 4), a, w, None)


@pytest.mark.parametrize("level", native.levels())
def test_the_bound_catches_one_wrong_weight(nbits: Any, level: int) -> None:
    # The test can fail: the kernel's product, held against a definition with a single
    # code moved by one, is outside the bound (so a kernel reading one code wrong would be).
    nbits.set_level(level)
    rng = np.random.default_rng(7)
    K, N, block = 200, 6, 32
    a, b, scales, zp = _case(rng, 1, K, N, block, 4, "uint8")
    y = _run(nbits, a, b, scales, zp, None, K, N, block, 4)
    w = dequantize_nbits(b, scales, zp, None, K, N, block, 4)
    _assert_within_bound(y, a, w, None)
    k = int(np.argmax(np.abs(a[0])))
    wrong = b.copy()
    byte = wrong[2, k // block, (k % block) // 2]
    shift = 4 * (k % 2)
    code = (int(byte) >> shift) & 15
    wrong[2, k // block, (k % block) // 2] = (int(byte) & ~(15 << shift)) | (
        ((code + 1) % 16) << shift
    )
    w_wrong = dequantize_nbits(wrong, scales, zp, None, K, N, block, 4)
    with pytest.raises(AssertionError, match="outside the bound"):
        _assert_within_bound(y, a, w_wrong, None)


def test_non_finite_values_flow_as_in_the_definition(nbits: Any) -> None:
    for level in native.levels():
        nbits.set_level(level)
        rng = np.random.default_rng(level)
        K, N, block = 70, 5, 32
        a, b, scales, _ = _case(rng, 2, K, N, block, 4, "none")
        a[0, 3] = np.nan
        scales[1, 2] = np.inf  # block 2 is the partial last one
        b[1, 2, :] = 0x99  # its codes are all 9: weights +inf
        a[1, 64:] = np.abs(a[1, 64:])  # so row 1's sum is +inf, not inf - inf
        y = _run(nbits, a, b, scales, None, None, K, N, block, 4)
        with np.errstate(invalid="ignore"):  # inf * 0 is the NaN the definition makes too
            w = dequantize_nbits(b, scales, None, None, K, N, block, 4)
            want = (a.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32)
        assert np.isnan(want).any() and np.isinf(want).any()  # both kinds are in play
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want), err_msg=f"level {level}")
        np.testing.assert_array_equal(np.isinf(y), np.isinf(want), err_msg=f"level {level}")


def test_wrong_sizes_raise_value_error(nbits: Any) -> None:
    rng = np.random.default_rng(0)
    M, K, N, block, bits = 2, 100, 3, 32, 4
    a, b, scales, zp = _case(rng, M, K, N, block, bits, "uint8")
    bias = np.zeros(N, np.float32)
    out = np.empty((M, N), np.float32)
    good = [a, b, scales, zp, bias, out, M, K, N, block, bits, 1, zp.shape[1], 1]  # type: ignore[union-attr]
    nbits.matmul(*good)

    def call(**change: Any) -> None:
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
            "bits",
            "kind",
            "zp_row",
            "has_bias",
        ]
        args = list(good)
        for name, value in change.items():
            args[names.index(name)] = value
        with pytest.raises(ValueError):
            nbits.matmul(*args)

    call(a=a[:, :-1].copy())
    call(b=b.reshape(-1)[:-1].copy())
    call(scales=scales.reshape(-1)[:-1].copy())
    call(zp=zp.reshape(-1)[:-1].copy())  # type: ignore[union-attr]
    call(bias=bias[:-1].copy())
    call(out=np.empty((M, N - 1), np.float32))
    call(M=M + 1)
    call(K=K + 32)
    call(N=N + 1)
    call(M=-1)
    call(K=0)
    call(block=48)
    call(block=8)
    call(bits=3)
    call(kind=3)
    call(zp_row=0)
    call(kind=2)  # float zero points: 4 bytes per block, not these
    call(zp_row=1 << 40)
    with pytest.raises(TypeError):  # out must be writable
        nbits.matmul(*good[:5], out.tobytes(), *good[6:])


def _frozen(x: np.ndarray) -> np.ndarray:
    """A read-only view over bytes, as a model's initializers are held (cached forms)."""
    return np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape)


class _Counting:
    """The module, counting its calls (so a test knows the kernel ran)."""

    def __init__(self, module: Any) -> None:
        self.module, self.calls = module, 0

    def level(self) -> int:
        return int(self.module.level())

    def matmul(self, *args: Any) -> None:
        self.calls += 1
        self.module.matmul(*args)


@pytest.mark.parametrize("scale_type", [np.float32, np.float16])
@pytest.mark.parametrize("zp_kind", ["none", "uint8", "float"])
@pytest.mark.parametrize("g_kind", ["none", "default", "act_order"])
def test_the_op_runs_the_kernel_for_a_few_rows(
    monkeypatch, nbits: Any, scale_type: Any, zp_kind: str, g_kind: str
) -> None:
    nbits.set_level(native.cpu_level())
    counting = _Counting(nbits)
    monkeypatch.setattr(contrib_quant, "_NBITS", counting)
    monkeypatch.setattr(contrib_quant, "NATIVE_MIN_WEIGHTS", 0)  # the wiring, not the tuning
    rng = np.random.default_rng([len(zp_kind), len(g_kind)])
    K, N, block, bits = 100, 9, 32, 4
    _, b, scales, zp = _case(rng, 1, K, N, block, bits, zp_kind)
    scales = scales.astype(scale_type)
    if zp is not None and zp.dtype != np.uint8:
        zp = zp.astype(scale_type)
    g = None
    if g_kind == "default":
        g = (np.arange(K) // block).astype(np.int32)
    elif g_kind == "act_order":
        g = rng.permutation(np.arange(K) // block).astype(np.int32)
    w = dequantize_nbits(b, scales, zp, g, K, N, block, bits)
    bias = rng.standard_normal(N).astype(np.float32)
    wc.clear()
    attrs = {"K": K, "N": N, "block_size": block, "bits": bits}
    most = contrib_quant.native_max_rows(counting, K, N, block, bits)  # 0 at plain C
    for rows in sorted({1, 3, max(most, 1), most + 1}):
        a = rng.standard_normal((1, rows, K)).astype(np.float32)
        before = counting.calls
        fb, fs = _frozen(b), _frozen(scales)
        fz = None if zp is None else _frozen(zp)
        fg = None if g is None else _frozen(g)
        for _ in range(2):  # the second call reads the stored small form
            y = matmul_nbits(a, fb, fs, fz, fg, bias, **attrs)
            assert y.shape == (1, rows, N) and y.dtype == np.float32
            _assert_within_bound(y[0], a[0], w, bias, f"rows {rows}")
        native_ran = counting.calls > before
        assert native_ran == (rows <= most and g_kind != "act_order")
    wc.clear()


def test_decode_keeps_no_dequantized_weight(monkeypatch, nbits: Any) -> None:
    # The point of the kernel: a few-row call stores at most the small form (float32
    # scales of float16 ones), never the [K, N] float32 weight.
    nbits.set_level(native.cpu_level())
    monkeypatch.setattr(contrib_quant, "_NBITS", nbits)
    monkeypatch.setattr(contrib_quant, "NATIVE_MIN_WEIGHTS", 0)  # the wiring, not the tuning
    rng = np.random.default_rng(1)
    K, N, block = 256, 64, 32
    _, b, scales, zp = _case(rng, 1, K, N, block, 4, "uint8")
    wc.clear()
    a = rng.standard_normal((1, K)).astype(np.float32)
    attrs = {"K": K, "N": N, "block_size": block, "bits": 4}
    fb, fs, fz = _frozen(b), _frozen(scales), _frozen(zp)  # type: ignore[arg-type]
    fs16 = _frozen(scales.astype(np.float16))  # entries live as long as their sources
    y = matmul_nbits(a, fb, fs, fz, **attrs)
    w = dequantize_nbits(b, scales, zp, None, K, N, block, 4)
    _assert_within_bound(y, a, w, None)
    if contrib_quant.native_max_rows(nbits, K, N, block, 4) == 0:
        # A CPU without AVX2: the plain C level is slower than BLAS, the op keeps its
        # numpy path and the float32 weight.
        assert wc.stored_bytes() == K * N * 4
    else:
        assert wc.stored_bytes() == 0
        matmul_nbits(a, fb, fs16, fz, **attrs)
        assert wc.stored_bytes() == scales.size * 4
    wc.clear()


def _nbits_model(
    K: int, N: int, block: int, rng: np.random.Generator
) -> tuple[onnx.ModelProto, np.ndarray]:
    _, b, scales, zp = _case(rng, 1, K, N, block, 4, "uint8")
    bias = rng.standard_normal(N).astype(np.float32)
    model = nbits_relu_model(b, scales, zp, bias, K, N, block)  # type: ignore[arg-type]
    w = dequantize_nbits(b, scales, zp, None, K, N, block, 4)
    return model, w


def test_a_session_runs_the_kernel_stepped_and_unwatched(monkeypatch, nbits: Any) -> None:
    nbits.set_level(native.cpu_level())
    counting = _Counting(nbits)
    monkeypatch.setattr(contrib_quant, "_NBITS", counting)
    monkeypatch.setattr(contrib_quant, "NATIVE_MIN_WEIGHTS", 0)  # the wiring, not the tuning
    rng = np.random.default_rng(3)
    K, N, block = 160, 37, 32
    model, w = _nbits_model(K, N, block, rng)
    bias = numpy_helper.to_array(model.graph.initializer[3])
    a = rng.standard_normal((1, 2, K)).astype(np.float32)
    run = Session(model).run({"a": a})["r"]
    stepped = stepped_values(model, {"a": a})
    assert counting.calls == (2 if contrib_quant.native_max_rows(counting, K, N, block, 4) else 0)
    for y in (stepped["y"],):
        _assert_within_bound(y[0], a[0], w, bias, "stepped")
    a64 = a[0].astype(np.float64)
    exact = np.maximum(a64 @ w.T.astype(np.float64) + bias, 0)
    bound = (K + 2) * U * (np.abs(a64) @ np.abs(w.T.astype(np.float64)) + np.abs(bias))
    assert np.all(np.abs(run[0] - exact) <= bound)
    wc.clear()


@pytest.mark.parametrize(
    "name", ["ort_genai_llama_int4", "ort_genai_phi3_int4_past", "ort_genai_qwen2_int4_past"]
)
def test_genai_exports_with_and_without_the_kernel(monkeypatch, nbits: Any, name: str) -> None:
    """A committed onnxruntime-genai int4 export: every MatMulNBits node, fed the inputs of
    a run without the kernel, is within the bound of its definition with the kernel; and
    the whole run with the kernel equals the run without it (the differential harness'
    float32 tolerance, relative to each output's scale).  At accuracy_level 0: the builder
    writes 4, where the int8 kernel runs instead (test_native_nbits8)."""
    model, feeds = genai_export(name, level=0)
    monkeypatch.setattr(contrib_quant, "_NBITS", None)
    off = stepped_values(model, feeds)  # a run without the kernel
    nbits.set_level(native.cpu_level())
    counting = _Counting(nbits)
    monkeypatch.setattr(contrib_quant, "_NBITS", counting)
    monkeypatch.setattr(contrib_quant, "NATIVE_MIN_WEIGHTS", 0)  # the wiring, not the tuning
    checked, eligible = 0, False
    for node, attrs, (a2, b, scales, zp, g, bias) in nbits_nodes(model, off):
        bits = attrs.get("bits", 4)
        # the kernel at the CPU's level, whether or not the op would pick it there
        form = contrib_quant.native_form(
            b, scales, zp, g, attrs["K"], attrs["N"], attrs["block_size"], bits
        )
        assert form is not None, node.name
        y = contrib_quant.native_product(
            counting,
            a2,
            b,
            scales,
            zp,
            form,
            bias,
            attrs["K"],
            attrs["N"],
            attrs["block_size"],
            bits,
        )
        w = dequantize_nbits(b, scales, zp, g, attrs["K"], attrs["N"], attrs["block_size"], bits)
        _assert_within_bound(y, a2, w, bias, node.name)
        checked += 1
        most = contrib_quant.native_max_rows(
            counting, attrs["K"], attrs["N"], attrs["block_size"], bits
        )
        eligible = eligible or a2.shape[0] <= most
    assert checked > 0 and counting.calls == checked
    on = Session(model).run(feeds)
    assert (counting.calls > checked) == eligible  # the whole run used the kernel
    for out in model.graph.output:
        close(on[out.name], off[out.name], f"{name}: output {out.name!r}")
    wc.clear()


class _AtLevel:
    def __init__(self, level: int) -> None:
        self._level = level

    def level(self) -> int:
        return self._level


@pytest.mark.parametrize(
    ("level", "K", "block", "bits", "want_level"),
    [
        (native.AVX512_VNNI, 2048, 32, 4, native.AVX512),  # VNNI runs the AVX-512 code
        (native.AVX512, 2048, 16, 4, native.AVX2),  # 8-byte blocks: AVX2's chunk
        (native.AVX512, 2048, 16, 2, native.GENERIC),  # 4-byte blocks: plain C
        (native.AVX512, 2048, 16, 8, native.AVX512),
        (native.AVX2, 2048, 64, 2, native.AVX2),
        (native.AVX2, 100, 128, 4, native.GENERIC),  # no whole block
        (native.GENERIC, 2048, 32, 4, native.GENERIC),
    ],
)
def test_the_row_limit_follows_the_level_a_layout_runs_at(
    level: int, K: int, block: int, bits: int, want_level: int
) -> None:
    # As _nbits.c's call_level lowers the level: the op never sends rows to a level where
    # the kernel is slower than BLAS (the plain C level: none).
    got = contrib_quant.native_max_rows(_AtLevel(level), K, 1 << 20, block, bits)
    assert got == contrib_quant.MAX_ROWS_AT_LEVEL[want_level]
    assert contrib_quant.MAX_ROWS_AT_LEVEL[native.GENERIC] == 0


def test_small_weights_stay_on_the_numpy_path() -> None:
    level = _AtLevel(native.AVX512)
    small = contrib_quant.NATIVE_MIN_WEIGHTS // 128 - 1
    assert contrib_quant.native_max_rows(level, 128, small, 32, 4) == 0
    assert (
        contrib_quant.native_max_rows(level, 128, small + 1, 32, 4)
        == (contrib_quant.MAX_ROWS_AT_LEVEL[native.AVX512])
    )


@pytest.mark.parametrize("packed", ["on", "off"])
def test_a_prompt_multiplies_a_kept_packed_weight(monkeypatch, packed: str) -> None:
    """More rows than the nbits kernel takes (a prompt): with one BLAS thread the
    dequantized weight is kept in the packed GEMM's form instead of as [K, N] (never
    both) and multiplied there, bias in the epilogue; the definition's numbers either
    way, the weight dequantized once."""
    from threadpoolctl import threadpool_limits

    from onnxviz.runtime.kernels import packed_gemm

    monkeypatch.setattr(packed_gemm, "ROUTED", packed == "on")
    mod = packed_gemm.module()
    if packed == "on" and native._LEVEL is not None:  # kernels on: the GEMM must be built
        compiled("sgemm")
    rng = np.random.default_rng(5)
    K, N, block, rows = 256, 100, 32, 40
    _, b, scales, zp = _case(rng, 1, K, N, block, 4, "uint8")
    bias = rng.standard_normal(N).astype(np.float32)
    w = dequantize_nbits(b, scales, zp, None, K, N, block, 4)
    fb, fs, fz = _frozen(b), _frozen(scales), _frozen(zp)  # type: ignore[arg-type]
    made: list[int] = []
    dequantize = contrib_quant.dequantize_nbits

    def counting(*args: Any, **kw: Any) -> np.ndarray:
        made.append(1)
        return dequantize(*args, **kw)

    monkeypatch.setattr(contrib_quant, "dequantize_nbits", counting)
    wc.clear()
    attrs = {"K": K, "N": N, "block_size": block, "bits": 4}
    with threadpool_limits(1):
        for _ in range(3):
            a = rng.standard_normal((2, rows // 2, K)).astype(np.float32)
            y = matmul_nbits(a, fb, fs, fz, None, bias, **attrs)
            assert y.shape == (2, rows // 2, N)
            _assert_within_bound(y.reshape(rows, N), a.reshape(rows, K), w, bias, packed)
    assert made == [1]
    if mod is not None:
        nr = int(mod.panel_width())
        assert wc.stored_bytes() == K * -(-N // nr) * nr * 4 + 64  # the packed form only
    else:
        assert wc.stored_bytes() == K * N * 4  # the [K, N] weight only
    wc.clear()
