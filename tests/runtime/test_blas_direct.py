"""Direct BLAS products (kernels.blas) and the conv paths built on them."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from onnxviz.runtime.kernels import blas
from onnxviz.runtime.kernels.nn_conv import ConvWeight, conv

pytestmark = pytest.mark.numeric

RNG = np.random.default_rng(21)


def _rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def test_numpy_bundled_openblas_is_used_directly() -> None:
    config = str(np.show_config(mode="dicts")).lower()  # type: ignore[func-returns-value]
    if "openblas" not in config:
        pytest.skip("this numpy is not built on OpenBLAS; products go through numpy")
    assert blas.available()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_matches_numpy_for_plain_transposed_and_strided_operands(dtype: type) -> None:
    a, b = _rand(37, 21, dtype=dtype), _rand(21, 45, dtype=dtype)
    out = np.empty((37, 45), dtype=dtype)
    blas.gemm(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    # Transposed views (F-order) and a column block of a wider output.
    at, bt = np.asfortranarray(a), np.asfortranarray(b)
    wide = np.zeros((37, 60), dtype=dtype)
    blas.gemm(at, bt, wide[:, 10:55])
    np.testing.assert_allclose(wide[:, 10:55], a @ b, rtol=1e-5, atol=1e-5)
    assert not wide[:, :10].any() and not wide[:, 55:].any()
    # Row slices of a bigger matrix keep their leading dimension.
    big = _rand(50, 80, dtype=dtype)
    blas.gemm(big[3:40, 5:26], b, out)
    np.testing.assert_allclose(out, big[3:40, 5:26] @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(8, 5, 9), (200, 30, 200)],  # below and above blas.SMALL_OUTPUT: numpy, then direct
)
def test_gemm_accumulates_onto_the_output(m: int, k: int, n: int) -> None:
    assert (m * n < blas.SMALL_OUTPUT) == (m == 8)
    a, b = _rand(m, k), _rand(k, n)
    want = a.astype(np.float64) @ b.astype(np.float64) + 2.5
    out = np.full((m, n), 2.5, np.float32)
    blas.gemm(a, b, out, accumulate=True)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    # Transposed operands into a column block of a wider output, neighbours untouched.
    wide = np.full((m, n + 7), 2.5, np.float32)
    blas.gemm(np.asfortranarray(a), np.asfortranarray(b), wide[:, 3 : n + 3], accumulate=True)
    np.testing.assert_allclose(wide[:, 3 : n + 3], want, rtol=1e-5, atol=1e-4)
    assert (wide[:, :3] == 2.5).all() and (wide[:, n + 3 :] == 2.5).all()


def test_views_blas_cannot_read_fall_back_to_numpy() -> None:
    a = _rand(12, 20)[:, ::2]  # inner stride 2
    b = _rand(10, 7)[::-1]  # negative row stride
    out = np.ones((12, 7), np.float32)
    blas.gemm(a, b, out, accumulate=True)
    np.testing.assert_allclose(out, a @ b + 1, rtol=1e-5, atol=1e-5)
    mixed = np.empty((12, 7), np.float64)
    blas.gemm(a, b, mixed)  # dtypes differ: numpy casts
    np.testing.assert_allclose(mixed, a @ b, rtol=1e-5, atol=1e-5)


def test_gemm_rejects_shapes_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        blas.gemm(_rand(3, 4), _rand(5, 2), np.empty((3, 2), np.float32))


CONV_CASES = [
    ((1, 16, 34, 34), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 16, 48, 50), (8, 16, 3, 3), {"strides": [2, 2], "pads": [1] * 4}),
    ((2, 32, 20, 20), (16, 32, 1, 1), {}),
    ((1, 24, 9, 9), (16, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("shape_x, shape_w, attrs", CONV_CASES)
def test_wrapped_conv_weight_gives_the_plain_result(
    shape_x: tuple[int, ...], shape_w: tuple[int, ...], attrs: dict[str, list[int]]
) -> None:
    x, w, b = _rand(*shape_x), _rand(*shape_w), _rand(shape_w[0])
    plain = conv(x, w, b, **attrs)  # type: ignore[arg-type]
    packed = ConvWeight(w)
    for _ in range(2):  # the repacked forms are made on the first call, then reused
        np.testing.assert_allclose(
            conv(x, packed, b, **attrs),  # type: ignore[arg-type]
            plain,
            rtol=1e-5,
            atol=1e-4,
        )
    # Weight in float64 against float32 data: the wrapper's forms are not used.
    w64 = ConvWeight(w.astype(np.float64))
    np.testing.assert_allclose(
        conv(x, w64, b, **attrs),
        plain,
        rtol=1e-5,
        atol=1e-4,  # type: ignore[arg-type]
    )


def test_conv_without_direct_blas_gives_the_same_numbers() -> None:
    code = (
        "import numpy as np\n"
        "from onnxviz.runtime.kernels import blas\n"
        "from onnxviz.runtime.kernels.nn_conv import conv\n"
        "assert not blas.available()\n"
        "r = np.random.default_rng(3)\n"
        "x = r.standard_normal((1, 16, 34, 34)).astype(np.float32)\n"
        "w = r.standard_normal((24, 16, 3, 3)).astype(np.float32)\n"
        "b = r.standard_normal(24).astype(np.float32)\n"
        "np.save(__import__('sys').argv[1], conv(x, w, b, pads=[1, 1, 1, 1]))\n"
    )
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"onnxviz-conv-{os.getpid()}.npy")
    env = dict(os.environ, ONNXVIZ_DIRECT_BLAS="0")
    subprocess.run([sys.executable, "-c", code, out], check=True, env=env, timeout=120)
    try:
        fallback = np.load(out)
    finally:
        os.unlink(out)
    r = np.random.default_rng(3)
    x = r.standard_normal((1, 16, 34, 34)).astype(np.float32)
    w = r.standard_normal((24, 16, 3, 3)).astype(np.float32)
    b = r.standard_normal(24).astype(np.float32)
    np.testing.assert_allclose(fallback, conv(x, w, b, pads=[1, 1, 1, 1]), rtol=1e-5, atol=1e-4)


def test_raw_gemm_reads_and_writes_the_addressed_blocks() -> None:
    raw = blas.raw_gemm(np.dtype(np.float32))
    if raw is None:
        pytest.skip("no direct BLAS on this numpy build")
    a, b = _rand(6, 10), _rand(30, 12)
    out = np.zeros((8, 9), np.float32)
    item = 4

    def block_product(accumulate: bool) -> None:
        """out[1:7, 2:7] (+)= a[:, 2:10] @ b[3:11, 4:9], blocks of bigger buffers by address."""
        a_at = a.ctypes.data + 2 * item
        b_at = b.ctypes.data + (3 * 12 + 4) * item
        out_at = out.ctypes.data + (1 * 9 + 2) * item
        raw(6, 5, 8, a_at, 10, b_at, 12, out_at, 9, accumulate)

    block_product(False)
    want = np.zeros((8, 9), np.float32)
    want[1:7, 2:7] = a[:, 2:10] @ b[3:11, 4:9]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    block_product(True)
    np.testing.assert_allclose(out, 2 * want, rtol=1e-5, atol=1e-5)


def test_self_check_covers_the_calls_the_fast_paths_make() -> None:
    """The load-time check passes on the machine's own kernels (and, through CI, on the
    Haswell and Sandybridge kernel sets) and names the kernel set it checked."""
    status = blas.status()
    if not status["direct_blas"]:
        pytest.skip(f"no direct BLAS here: {status['reason']}")
    for dt in (np.dtype(np.float32), np.dtype(np.float64)):
        assert blas._self_check(blas._load()[dt], dt) is None
    assert status["core"]  # OpenBLAS says which kernels it picked


def test_a_library_that_gets_any_checked_call_wrong_is_not_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Accumulate (beta = 1) that overwrites, as a broken kernel would: the check sees it,
    every product goes through numpy, the reason is logged once and reported."""
    if not blas.status()["direct_blas"]:
        pytest.skip("no direct BLAS here")
    real_call = blas._call

    def overwriting(g, a, b, out, beta):  # beta ignored: C = A @ B even when asked +=
        return real_call(g, a, b, out, 0.0)

    monkeypatch.setattr(blas, "_call", overwriting)
    monkeypatch.setattr(blas, "_GEMM", None)
    monkeypatch.setattr(blas, "_RAW", {})
    monkeypatch.setattr(blas, "_STATUS", {})
    with caplog.at_level("WARNING", logger="onnxviz.runtime.kernels.blas"):
        assert not blas.available()
        assert blas.raw_gemm(np.dtype(np.float32)) is None
        status = blas.status()
    assert status["direct_blas"] is False
    assert "C += A @ B differs" in status["reason"]
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "direct BLAS calls are off" in caplog.records[0].message
    # The products still come out right, through numpy.
    a, b, c = _rand(5, 7), _rand(7, 3), _rand(5, 3)
    want = c + a @ b
    blas.gemm(a, b, c, accumulate=True)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_run_json_reports_the_blas_engine(tmp_path) -> None:
    import json

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(_rand(4, 3), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    env = {**os.environ, "ONNXVIZ_DIRECT_BLAS": "0"}
    cmd = [sys.executable, "-m", "onnxviz", "run", str(path), "--random-inputs", "--json"]
    off = json.loads(subprocess.run(cmd, env=env, capture_output=True, check=True).stdout)
    assert off["engine"]["direct_blas"] is False
    assert "ONNXVIZ_DIRECT_BLAS=0" in off["engine"]["blas_fallback_reason"]
    env.pop("ONNXVIZ_DIRECT_BLAS")
    on = json.loads(subprocess.run(cmd, env=env, capture_output=True, check=True).stdout)
    assert on["engine"]["name"] == "onnxviz"
    assert on["engine"]["direct_blas"] == blas.status()["direct_blas"]
    if on["engine"]["direct_blas"]:
        assert on["engine"]["blas_core"] and on["engine"]["blas_fallback_reason"] is None


def test_run_json_says_what_chose_the_blas_core(tmp_path) -> None:
    # OpenBLAS's own detection, or an OPENBLAS_CORETYPE in the environment (which an
    # environment can set for every process, hiding a faster kernel set).
    import json

    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    cmd = [sys.executable, "-m", "onnxviz", "run", str(path), "--random-inputs", "--json"]
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    own = json.loads(subprocess.run(cmd, env=env, capture_output=True, check=True).stdout)
    assert own["engine"]["blas_core_chosen_by"] == "OpenBLAS's CPU detection"
    env["OPENBLAS_CORETYPE"] = "Sandybridge"
    forced = json.loads(subprocess.run(cmd, env=env, capture_output=True, check=True).stdout)
    assert forced["engine"]["blas_core_chosen_by"] == "OPENBLAS_CORETYPE=Sandybridge"
    if forced["engine"]["direct_blas"] and platform.machine() in ("x86_64", "AMD64"):
        assert forced["engine"]["blas_core"] == "Sandybridge"


@pytest.mark.parametrize(("m", "k", "n"), [(1, 576, 1024), (144, 576, 1), (1, 7, 1)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_matrix_vector_shapes_give_the_float64_product(m, k, n, accumulate) -> None:
    # Single rows and columns go through numpy's gemv, not gemm: same numbers.
    a, b = _rand(m, k), _rand(k, n)
    start = _rand(m, n)
    out = start.copy()
    blas.gemm(a, b, out, accumulate=accumulate)
    want = a.astype(np.float64) @ b.astype(np.float64) + (start if accumulate else 0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
