"""The held convs: a fused conv chain's call run in C from the node loop
(native/_sgemm.c's `pointwise`, a 1x1 conv by the packed GEMM; native/_conv.c's `held`,
the direct and blocked convs), made by nn_conv_nhwc's runners (`held`) on a chain's first
channels-last call and tried first by the compiled loop (fusion.ConvChain.quick).

* The calls they take give the bits of the runner's own call (`run`, the same kernel and
  epilogue), with and without bias and residual, for each activation the kernels apply,
  on a channels-last image (and, for the 1x1 conv, one channels-first image), at every
  level; their outputs are new, 64-byte aligned and laid out channels-last.
* Every call they do not take goes to the fallback with the same arguments: other
  constants (by identity), another shape, dtype or layout (a residual not channels-last
  included), other argument counts, keywords, several OpenBLAS threads (the 1x1 conv),
  another level than the one they were made at.
* In a model: after the first run the chains' quick calls are these, the next runs give
  the first run's bits, and the stepped run agrees (differential.assert_modes_agree).
"""

from __future__ import annotations

import gc
import math
import sys
import weakref
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

from onnxviz.runtime import fusion, native
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.kernels import _weight_cache, nn_conv_nhwc, packed_gemm
from onnxviz.runtime.kernels.nn_conv import ACT_CLIP, ACT_HARDSWISH, ACT_RELU, ACT_SILU
from onnxviz.runtime.session import Session
from tests.runtime.native_modules import at_level, compiled

from .differential import assert_modes_agree, stepped_values

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
NAN = math.nan
ACTS = [
    None,
    (ACT_RELU, NAN, NAN),
    (ACT_CLIP, -0.25, 0.5),
    (ACT_CLIP, NAN, 0.5),
    (ACT_HARDSWISH, NAN, NAN),
    (ACT_SILU, NAN, NAN),
]


class _Fallback:
    """A fallback that records its calls and returns a marker."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any, **kw: Any) -> str:
        self.calls.append(args + tuple(kw.items()))
        return "fallback"


@pytest.fixture(autouse=True)
def _kernels_on() -> Iterator[None]:
    """These tests prove the compiled calls: the kernels on at this CPU's level (a test
    may set another), even in the run with ONNXVIZ_NATIVE=off."""
    with at_level("conv", native.cpu_level()):
        yield


def _channels_last(a: np.ndarray) -> np.ndarray:
    """``a`` (N, C, H, W) as the channels-last layout's view (fusion_layout.py)."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _runner(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, **attrs: Any) -> Any:
    """The channels-last runner of a conv by the constant (frozen, as a chain's folded
    weights are: only those are packed) ``w`` and ``b``."""
    for const in (w, b):
        if const is not None:
            const.flags.writeable = False
    runner = nn_conv_nhwc.prepare_channels_last(x, w, b, attrs)
    assert runner is not None
    return runner


def _held(
    runner: Any, x: np.ndarray, act: Any, residual: bool
) -> tuple[Any, tuple[Any, Any], _Fallback]:
    """The runner's held call for inputs (x, W, B[, residual]): W and B stand for the
    chain's constants (compared by identity)."""
    consts = (object(), object())
    fallback = _Fallback()
    nargs = 4 if residual else 3
    held = runner.held(x, act, nargs, 3 if residual else None, (1, 2), consts, fallback)
    return held, consts, fallback


def _check_layout(y: np.ndarray, shape: tuple[int, ...]) -> None:
    assert type(y) is np.ndarray and y.dtype == np.float32 and y.shape == shape
    assert y.transpose(0, 2, 3, 1).flags.c_contiguous  # channels-last
    assert y.ctypes.data % 64 == 0 and y.flags.writeable


@pytest.mark.parametrize("level", LEVELS)
def test_the_held_1x1_conv_gives_the_runners_bits(level):
    compiled("sgemm", "the OpenBLAS paths run")
    rng = np.random.default_rng(10 + level)
    with at_level("sgemm", level), threadpool_limits(1):
        native.load("sgemm").set_level(level)
        # (N, C, H, W, M): whole 12-row tiles and edges, K of one block, N of panels
        # and a half one, two images.
        for n, c, h, wd, m in [(1, 64, 8, 12, 96), (1, 24, 7, 5, 40), (2, 33, 6, 6, 17)]:
            for bias in (True, False):
                w = (rng.standard_normal((m, c, 1, 1)) * 0.2).astype(np.float32)
                b = rng.standard_normal(m).astype(np.float32) if bias else None
                x = _channels_last(rng.standard_normal((n, c, h, wd)).astype(np.float32))
                r = _channels_last(rng.standard_normal((n, m, h, wd)).astype(np.float32))
                runner = _runner(x, w, b)
                assert isinstance(runner, nn_conv_nhwc._Pointwise)
                for act in ACTS:
                    for residual in (None, r):
                        held, consts, fallback = _held(runner, x, act, residual is not None)
                        assert held is not None
                        args = (x, *consts) + (() if residual is None else (residual,))
                        got = held(*args)
                        want, done = runner.run(x, residual, act)
                        assert done == (act is not None)
                        _check_layout(got, (n, m, h, wd))
                        np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2))
                        if n == 1:  # one channels-first image: read transposed, same bits
                            planes = np.ascontiguousarray(x)
                            np.testing.assert_array_equal(
                                held(planes, *args[1:]), want.transpose(0, 3, 1, 2)
                            )
                        assert not fallback.calls


@pytest.mark.parametrize("level", LEVELS)
def test_the_held_direct_and_blocked_convs_give_the_runners_bits(level):
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(20 + level)
    with at_level("conv", level):
        native.load("conv").set_level(level)
        shapes = [
            # (N, C, H, W, M, kernel, strides, pads): 3x3 with padding, 3x3/2, 5x3
            (1, 16, 9, 11, 24, (3, 3), (1, 1), (1, 1, 1, 1)),
            (2, 8, 10, 10, 20, (3, 3), (2, 2), (1, 1, 0, 0)),
            (1, 12, 8, 8, 16, (5, 3), (1, 1), (0, 1, 0, 1)),
            # the blocked kernel at AVX-512 (128 x 128 channels, 10-pixel rows: 25
            # output tiles, fewer than the fused Winograd conv takes)
            (1, 128, 10, 10, 128, (3, 3), (1, 1), (1, 1, 1, 1)),
        ]
        blocked_seen = False
        for n, c, h, wd, m, kernel, strides, pads in shapes:
            w = (rng.standard_normal((m, c, *kernel)) * 0.1).astype(np.float32)
            b = rng.standard_normal(m).astype(np.float32)
            x = _channels_last(rng.standard_normal((n, c, h, wd)).astype(np.float32))
            runner = _runner(
                x, w, b, kernel_shape=list(kernel), strides=list(strides), pads=list(pads)
            )
            assert isinstance(runner, nn_conv_nhwc._Direct)
            blocked_seen = blocked_seen or runner.blocked is not None
            oshape = runner.out_shape
            r = _channels_last(rng.standard_normal(oshape).astype(np.float32))
            for act in ACTS:
                for residual in (None, r):
                    held, consts, fallback = _held(runner, x, act, residual is not None)
                    assert held is not None
                    args = (x, *consts) + (() if residual is None else (residual,))
                    got = held(*args)
                    want, done = runner.run(x, residual, act)
                    assert done == (act is not None)
                    _check_layout(got, oshape)
                    np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2))
                    assert not fallback.calls
        assert blocked_seen == (level >= native.AVX512 and nn_conv_nhwc.direct_lanes() == 16)
        # A stem reading the model's NCHW input (3 channels, 7x7/2; one and two images):
        # the direct kernel's channels-first read, as the runner's.
        for n in (1, 2):
            w = (rng.standard_normal((16, 3, 7, 7)) * 0.1).astype(np.float32)
            x = rng.standard_normal((n, 3, 21, 20)).astype(np.float32)
            runner = _runner(x, w, None, kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3])
            for act in (None, (ACT_RELU, NAN, NAN)):
                held, consts, fallback = _held(runner, x, act, False)
                got = held(x, *consts)
                want, _ = runner.run(x, None, act)
                _check_layout(got, runner.out_shape)
                np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2))
                # made for channels-first images: a channels-last one is the runner's
                _declined(held, fallback, (_channels_last(x), *consts))


@pytest.mark.parametrize("level", LEVELS)
def test_the_held_depthwise_conv_gives_the_runners_bits(level):
    compiled("depthwise", "the numpy convs run")
    rng = np.random.default_rng(30 + level)
    with at_level("depthwise", level):
        native.load("depthwise").set_level(level)
        # (N, C, H, W, kernel, strides, pads): 3x3 and 5x5, strided, channels in and past
        # the kernel's blocks
        for n, c, h, wd, kernel, strides, pads in [
            (1, 16, 9, 11, (3, 3), (1, 1), (1, 1, 1, 1)),
            (2, 40, 10, 10, (5, 5), (2, 2), (2, 2, 1, 1)),
            (1, 72, 7, 7, (3, 3), (2, 2), (1, 1, 1, 1)),
        ]:
            w = (rng.standard_normal((c, 1, *kernel)) * 0.3).astype(np.float32)
            b = rng.standard_normal(c).astype(np.float32)
            x = _channels_last(rng.standard_normal((n, c, h, wd)).astype(np.float32))
            runner = _runner(
                x, w, b, kernel_shape=list(kernel), strides=list(strides), pads=list(pads),
                group=c,
            )  # fmt: skip
            assert isinstance(runner, nn_conv_nhwc._Depthwise)
            runner.run(x, None, None)  # its first call makes the taps the kernel reads
            oshape = runner.out_shape
            r = _channels_last(rng.standard_normal(oshape).astype(np.float32))
            for act in ACTS:
                for residual in (None, r):
                    held, consts, fallback = _held(runner, x, act, residual is not None)
                    assert held is not None
                    args = (x, *consts) + (() if residual is None else (residual,))
                    got = held(*args)
                    want, done = runner.run(x, residual, act)
                    assert done == (act is not None)
                    _check_layout(got, oshape)
                    np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2))
                    assert not fallback.calls
            held, consts, fallback = _held(runner, x, None, True)
            _declined(held, fallback, (np.ascontiguousarray(x), *consts, r))
            _declined(held, fallback, (x, *consts, np.ascontiguousarray(r)))
            _declined(held, fallback, (x, object(), consts[1], r))


def test_a_patch_embedding_makes_no_held_call():
    """A ViT's patch conv (kernel = stride) copies its patches into the GEMM's rows first:
    the 1x1 conv's held call, which reads its image in place, is not made for it."""
    compiled("sgemm", "the OpenBLAS paths run")
    rng = np.random.default_rng(11)
    x = _channels_last(rng.standard_normal((1, 3, 128, 128)).astype(np.float32))
    w = (rng.standard_normal((64, 3, 16, 16)) * 0.1).astype(np.float32)
    with threadpool_limits(1):
        runner = _runner(x, w, None, kernel_shape=[16, 16], strides=[16, 16])
        assert isinstance(runner, nn_conv_nhwc._Patches)
        held, _consts, _fallback = _held(runner, x, None, False)
        assert held is None
        runner.run(x, None, None)  # its own call runs


def _declined(held: Any, fallback: _Fallback, args: tuple[Any, ...], **kw: Any) -> None:
    assert held(*args, **kw) == "fallback"
    got = fallback.calls.pop()
    assert all(a is b for a, b in zip(got, args)) and len(got) == len(args) + len(kw)


def test_every_call_the_held_1x1_conv_does_not_take_goes_to_the_fallback():
    compiled("sgemm", "the OpenBLAS paths run")
    rng = np.random.default_rng(3)
    n, c, h, wd, m = 2, 32, 6, 6, 48
    w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    x = _channels_last(rng.standard_normal((n, c, h, wd)).astype(np.float32))
    r = _channels_last(rng.standard_normal((n, m, h, wd)).astype(np.float32))
    with threadpool_limits(1):
        runner = _runner(x, w, None)
        held, (cw, cb), fallback = _held(runner, x, (ACT_RELU, NAN, NAN), True)
        assert held(x, cw, cb, r).shape == (n, m, h, wd)

        class Sub(np.ndarray):
            pass

        wide = _channels_last(rng.standard_normal((n, c, h, 2 * wd)).astype(np.float32))
        others: list[tuple[Any, ...]] = [
            (x, object(), cb, r),  # another constant
            (x, cw, cb),  # an argument short
            (x, cw, cb, r, None),
            (x.astype(np.float64), cw, cb, r),
            (np.ascontiguousarray(x), cw, cb, r),  # two channels-first images
            (x[:1], cw, cb, r),  # another shape
            (wide[..., ::2], cw, cb, r),  # strided
            (x.view(Sub), cw, cb, r),
            (x.tolist(), cw, cb, r),
            (x, cw, cb, np.ascontiguousarray(r)),  # a residual laid out channels-first
            (x, cw, cb, r[:, :-1]),
            (x, cw, cb, r.astype(np.float64)),
            (x, cw, cb, None),
        ]
        for args in others:
            _declined(held, fallback, args)
        _declined(held, fallback, (x, cw, cb), extra=r)
    # Several OpenBLAS threads: the routing's OpenBLAS product (packed_gemm.use_for).
    with threadpool_limits(2):
        _declined(held, fallback, (x, cw, cb, r))
    # A residual that is not in the node: any call of the held conv without one.  (Made
    # on one OpenBLAS thread: below AVX-512 this product is not small enough for the
    # kernel to take it on several.)
    with threadpool_limits(1):
        plain, (pw, pb), plain_fallback = _held(runner, x, None, False)
        assert plain(x, pw, pb).shape == (n, m, h, wd)
        _declined(plain, plain_fallback, (x, pw, pb, r))


def test_every_call_the_held_direct_conv_does_not_take_goes_to_the_fallback():
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(4)
    n, c, h, wd, m = 1, 8, 9, 9, 16
    w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    x = _channels_last(rng.standard_normal((n, c, h, wd)).astype(np.float32))
    r = _channels_last(rng.standard_normal((n, m, 7, 7)).astype(np.float32))
    runner = _runner(x, w, None, kernel_shape=[3, 3])
    held, (cw, cb), fallback = _held(runner, x, None, True)
    assert held(x, cw, cb, r).shape == (n, m, 7, 7)
    for args in [
        (np.ascontiguousarray(x), cw, cb, r),  # channels-first: the runner's row copies
        (x, cw, object(), r),
        (x, cw, cb, np.ascontiguousarray(r)),
        (x[:, :-1], cw, cb, r),
        (x, cw, cb),
    ]:
        _declined(held, fallback, args)
    lower = [lvl for lvl in LEVELS if lvl != native.cpu_level()]
    for level in lower:  # another level than the one it was made at
        with at_level("conv", level):
            native.load("conv").set_level(level)
            _declined(held, fallback, (x, cw, cb, r))
    native.load("conv").set_level(native.cpu_level())
    assert held(x, cw, cb, r).shape == (n, m, 7, 7)


def test_results_are_fresh_and_nothing_leaks():
    compiled("sgemm", "the OpenBLAS paths run")
    rng = np.random.default_rng(6)
    w = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    x = _channels_last(rng.standard_normal((1, 8, 5, 5)).astype(np.float32))
    r = _channels_last(rng.standard_normal((1, 16, 5, 5)).astype(np.float32))
    with threadpool_limits(1):
        held, (cw, cb), _ = _held(_runner(x, w, None), x, None, True)
        first, second = held(x, cw, cb, r), held(x, cw, cb, r)
        assert not np.shares_memory(first, second)
        ref = weakref.ref(first.base)
        del first
        gc.collect()
        assert ref() is None
        before = [sys.getrefcount(v) for v in (x, cw, cb, r)]
        for _ in range(100):
            held(x, cw, cb, r)
        assert [sys.getrefcount(v) for v in (x, cw, cb, r)] == before


def test_declined_calls_hold_nothing():
    """A declined call (a channels-first image or residual, which the checks read before
    declining) keeps no reference to its arguments."""
    compiled("sgemm", "the OpenBLAS paths run")
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(8)
    x = _channels_last(rng.standard_normal((1, 8, 6, 6)).astype(np.float32))
    planes, r = np.ascontiguousarray(x), np.ascontiguousarray(x)
    w1 = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
    w3 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    with threadpool_limits(1):
        pointwise, consts, fallback = _held(_runner(x, w1, None), x, None, True)
        runner3 = _runner(x, w3, None, kernel_shape=[3, 3])
        direct, consts3, fallback3 = _held(runner3, x, None, True)
        r3 = np.ascontiguousarray(np.zeros((1, 8, 4, 4), np.float32))
        before = [sys.getrefcount(v) for v in (x, planes, r, r3)]
        for _ in range(50):
            assert pointwise(x, *consts, r) == "fallback"  # a channels-first residual
            assert direct(planes, *consts3, r3) == "fallback"  # a channels-first image
        assert len(fallback.calls) == len(fallback3.calls) == 50
        fallback.calls.clear()  # (the test's fallbacks keep their arguments)
        fallback3.calls.clear()
        assert [sys.getrefcount(v) for v in (x, planes, r, r3)] == before


def test_the_held_1x1_conv_writes_over_a_residual_only_its_caller_holds():
    """Made with ``inplace`` (the compiled loop frees the residual's slot after the
    call), the sums go over a residual nothing else refers to, which is the result, with
    the bits of a fresh output; a residual someone else holds (another reference, another
    view of its buffer, a read-only one) is never written."""
    compiled("sgemm", "the OpenBLAS paths run")
    rng = np.random.default_rng(9)
    n, c, h, wd, m = 1, 64, 6, 8, 64
    w = (rng.standard_normal((m, c, 1, 1)) * 0.2).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    x = _channels_last(rng.standard_normal((n, c, h, wd)).astype(np.float32))
    value = _channels_last(rng.standard_normal((n, m, h, wd)).astype(np.float32))
    with threadpool_limits(1):
        runner = _runner(x, w, b)
        act = (ACT_RELU, NAN, NAN)
        fresh, consts, _ = _held(runner, x, act, True)
        inplace = runner.held(x, act, 4, 3, (1, 2), consts, _Fallback(), True)
        want = fresh(x, *consts, value)  # a fresh output
        assert not np.shares_memory(want, value)

        def residual() -> np.ndarray:
            return _channels_last(np.array(value.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2))

        # Held only by the call (a temporary, as a dying slot's value is): written over.
        got = inplace(x, *consts, residual())
        np.testing.assert_array_equal(got, want)
        # The residual as the loop holds it: one name (the slot) and the call's own.
        r = residual()
        got = inplace(x, *consts, r)
        assert got is r
        np.testing.assert_array_equal(got, want)
        # Anyone else holding it: a fresh output, the residual untouched.
        for make_shared in (
            lambda r: [r],  # another reference
            lambda r: r.base[:4],  # another view of its buffer
        ):
            r = residual()
            other = make_shared(r)
            got = inplace(x, *consts, r)
            assert got is not r and not np.shares_memory(got, r)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(r, value)
            del other
        r = residual()
        r.flags.writeable = False
        got = inplace(x, *consts, r)
        assert not np.shares_memory(got, r)
        np.testing.assert_array_equal(r, value)
        # K over one block (partial sums would be stored over the residual first; routed
        # to the kernel at the generic level too, where OpenBLAS takes so deep a product,
        # and below AVX-512 the direct kernel so deep a 1x1).
        big = 1100
        wk = (rng.standard_normal((m, big, 1, 1)) * 0.05).astype(np.float32)
        xk = _channels_last(rng.standard_normal((n, big, h, wd)).astype(np.float32))
        with (
            mock.patch.object(packed_gemm, "NARROW_BLAS_K", big + 1),
            mock.patch.object(nn_conv_nhwc, "deep_pointwise_runs_direct", lambda *a: False),
        ):
            runner_k = _runner(xk, wk, b)
            inplace_k = runner_k.held(xk, act, 4, 3, (1, 2), consts, _Fallback(), True)
            r = residual()
            got = inplace_k(xk, *consts, r)
        assert not np.shares_memory(got, r)
        np.testing.assert_array_equal(r, value)


def test_the_held_direct_conv_writes_over_a_residual_only_its_caller_holds():
    """The direct kernel made with ``inplace``: over a residual nothing else holds, the
    result with a fresh output's bits; a held residual never written; the blocked kernel
    (partial sums stored first) never in place.  The fused Winograd conv's held call
    (40 -> 48 channels at 13 x 12 px, where AVX2 and AVX-512 route it) likewise."""
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(13)
    cases = [((1, 16, 9, 9, 24), (3, 3), False), ((1, 40, 13, 12, 48), (3, 3), False)]
    if nn_conv_nhwc.direct_lanes() == 16:  # the blocked kernel's shapes, at AVX-512
        cases.append(((1, 128, 10, 10, 128), (3, 3), True))  # (not Winograd: 25 tiles)
    for (n, c, h, wd, m), kernel, blocked in cases:
        w = (rng.standard_normal((m, c, *kernel)) * 0.1).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        x = _channels_last(rng.standard_normal((n, c, h, wd)).astype(np.float32))
        runner = _runner(x, w, b, kernel_shape=list(kernel), pads=[1, 1, 1, 1])
        assert (runner.blocked is not None) == blocked
        winograd = c == 40 and nn_conv_nhwc.direct_lanes() in (8, 16)
        assert (runner.fused_winograd is not None) == winograd
        act = (ACT_RELU, NAN, NAN)
        fresh, consts, _ = _held(runner, x, act, True)
        inplace = runner.held(x, act, 4, 3, (1, 2), consts, _Fallback(), True)
        value = _channels_last(rng.standard_normal(runner.out_shape).astype(np.float32))
        want = fresh(x, *consts, value)

        def residual(value: np.ndarray = value) -> np.ndarray:
            return _channels_last(np.array(value.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2))

        r = residual()
        got = inplace(x, *consts, r)
        assert (got is r) == (not blocked)
        np.testing.assert_array_equal(got, want)
        r = residual()
        keep = [r]
        got = inplace(x, *consts, r)
        assert not np.shares_memory(got, r)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(r, value)
        del keep


def test_a_wrong_construction_is_a_value_error():
    sgemm = compiled("sgemm", "the OpenBLAS paths run")
    conv = compiled("conv", "the numpy convs run")
    w = np.ones((8, 8), np.float32)
    p_data = bytearray(8 * 32 * 4 + 64)
    common = [np.ndarray, np.empty, np.dtype(np.uint8), np.dtype(np.float32)]
    good = [
        *(p_data, 0, 8, 8, 32, None, (1, 4, 4), 0, NAN, NAN),
        *(3, -1, False, (1, 2), (w, w), 0, print),
    ]
    sgemm.pointwise(*good, *common)  # well formed
    for i, bad in [(2, 0), (4, 24), (1, 64), (7, 5), (11, 0), (11, 3), (13, (1, 5)), (14, (w,))]:
        args = list(good)
        args[i] = bad
        with pytest.raises((ValueError, TypeError)):
            sgemm.pointwise(*args, *common)
    with pytest.raises(ValueError):
        sgemm.pointwise(bytearray(16), *good[1:], *common)  # the packed weight too short
    geometry = [(1, 5, 5, 8), (8, 3, 3), (3, 3), (1, 1), (1, 1), (0, 0)]
    lanes = int(conv.lanes())
    wp = np.zeros((8 + lanes - 1) // lanes * 9 * 8 * lanes, np.float32)  # [blocks][3][3][8][lanes]
    conv_good = [wp, False, lanes, None]
    tail = [0, NAN, NAN, 3, -1, (1, 2), (w, w), print]
    conv.held(*conv_good, *geometry, *tail, *common)  # well formed
    for args in [
        [wp[:10], False, lanes, None, *geometry, *tail],  # weight too short
        [*conv_good[:2], 3, None, *geometry, *tail],  # another level's lanes
        [*conv_good, *geometry, 5, NAN, NAN, 3, -1, (1, 2), (w, w), print],  # activation
        [*conv_good, (1, 5, 5, 8), (8, 3, 3), (0, 3), *geometry[3:], *tail],  # sizes
        [*conv_good, *geometry, 0, NAN, NAN, 3, -1, (1, 7), (w, w), print],  # a place
    ]:
        with pytest.raises(ValueError):
            conv.held(*args, *common)
    depthwise = compiled("depthwise", "the numpy convs run")
    taps = np.zeros((3, 3, 8), np.float32)
    dw_geometry = [(1, 5, 5, 8), (3, 3), (3, 3), (1, 1), (1, 1), (0, 0)]
    depthwise.held(taps, None, *dw_geometry, *tail, *common)  # well formed
    for args in [
        [taps[:2], None, *dw_geometry, *tail],  # weight too short
        [taps, None, *dw_geometry, 5, NAN, NAN, 3, -1, (1, 2), (w, w), print],
        [taps, None, (1, 5, 5, 0), *dw_geometry[1:], *tail],
        [taps, None, *dw_geometry, 0, NAN, NAN, 3, 0, (1, 2), (w, w), print],  # residual 0
    ]:
        with pytest.raises(ValueError):
            depthwise.held(*args, *common)


def _init(name: str, a: np.ndarray) -> Any:
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def _bottleneck_model(rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """Two ResNet bottlenecks (1x1, 3x3, 1x1 with the block input added, Relus; the
    second one strided with a 1x1/2 projection), then a MobileNet inverted residual (1x1
    expansion, depthwise 3x3, 1x1 projection with the block input added), BatchNorm
    folded into the convs."""
    c, mid, out = 32, 16, 32
    nodes, inits = [], []

    def conv(x: str, y: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1) -> None:
        name = f"w_{y}"
        fan = cin // group * k * k
        inits.append(
            _init(name, rng.standard_normal((cout, cin // group, k, k)) * (0.5 / math.sqrt(fan)))
        )
        inits.append(_init(f"b_{y}", rng.standard_normal(cout) * 0.1))
        nodes.append(
            helper.make_node(
                "Conv",
                [x, name, f"b_{y}"],
                [y],
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[k // 2] * 4,
                group=group,
            )  # fmt: skip
        )
        scale, shift = rng.uniform(0.5, 1.5, cout), rng.standard_normal(cout) * 0.1
        mean, var = rng.standard_normal(cout) * 0.1, rng.uniform(0.5, 1.5, cout)
        for what, v in (("s", scale), ("h", shift), ("m", mean), ("v", var)):
            inits.append(_init(f"{what}_{y}", v))
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [y, f"s_{y}", f"h_{y}", f"m_{y}", f"v_{y}"],
                [y + "_bn"],
            )
        )

    x = "x"
    for block, stride in (("a", 1), ("b", 2)):
        conv(x, f"{block}1", c, mid, 1)
        nodes.append(helper.make_node("Relu", [f"{block}1_bn"], [f"{block}1r"]))
        conv(f"{block}1r", f"{block}2", mid, mid, 3, stride)
        nodes.append(helper.make_node("Relu", [f"{block}2_bn"], [f"{block}2r"]))
        conv(f"{block}2r", f"{block}3", mid, out, 1)
        short = x
        if stride > 1:
            conv(x, f"{block}p", c, out, 1, stride)
            short = f"{block}p_bn"
        nodes.append(helper.make_node("Add", [f"{block}3_bn", short], [f"{block}s"]))
        nodes.append(helper.make_node("Relu", [f"{block}s"], [f"{block}o"]))
        x = f"{block}o"
    conv(x, "c1", out, 2 * out, 1)
    nodes.append(helper.make_node("Relu", ["c1_bn"], ["c1r"]))
    conv("c1r", "c2", 2 * out, 2 * out, 3, 1, 2 * out)  # depthwise
    nodes.append(helper.make_node("Relu", ["c2_bn"], ["c2r"]))
    conv("c2r", "c3", 2 * out, out, 1)
    nodes.append(helper.make_node("Add", ["c3_bn", x], ["co"]))
    x = "co"
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "bottlenecks",
        [helper.make_tensor_value_info("x", f, [1, c, 20, 20])],
        [helper.make_tensor_value_info(x, f, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, c, 20, 20)).astype(np.float32)}


def test_a_model_runs_the_held_convs_after_its_first_run(monkeypatch):
    compiled("sgemm", "the OpenBLAS paths run")
    compiled("conv", "the numpy convs run")
    compiled("depthwise", "the numpy convs run")
    model, feeds = _bottleneck_model(np.random.default_rng(7))
    with threadpool_limits(1):
        stepped = stepped_values(model, feeds)["co"]
        for level in LEVELS:
            with at_level("sgemm", level), at_level("conv", level), at_level("depthwise", level):
                for name in ("sgemm", "conv", "depthwise"):
                    native.load(name).set_level(level)
                _weight_cache.clear()
                session = Session(model)
                first = session.run(feeds)["co"]
                chains = [
                    q.fused
                    for q in run_nodes(session.plan)
                    if q.kind == "fused" and isinstance(q.fused, fusion.ConvChain)
                ]
                kinds = {
                    type(ch.quick).__module__.rsplit(".", 1)[1] + "." + type(ch.quick).__name__
                    for ch in chains
                    if ch.quick is not None
                }
                # Every conv that emits channels-last is held: the 1x1s (the first one
                # reads the NCHW feed; the strided projection runs the direct kernel), the
                # 3x3s, the depthwise one; the last one hands the graph an NCHW output.
                # Each block's residual is read last by its chain: the held 1x1 conv may
                # take it in place (the feed's is still never written: its caller holds it).
                assert [ch.residual_dies for ch in chains if ch.residual is not None] == [True] * 3
                emits = [ch.layout is not None and ch.layout.emit for ch in chains]
                assert [ch.quick is not None for ch in chains] == emits, level
                assert sum(emits) == len(chains) - 1
                assert kinds == {"_sgemm.Pointwise", "_conv.Held", "_depthwise.Held"}, kinds
                calls: list[Any] = []
                for ch in chains:
                    if ch.quick is not None:
                        real = ch.quick

                        def counted(*ins: Any, real: Any = real, calls: Any = calls) -> Any:
                            calls.append(real)
                            return real(*ins)

                        monkeypatch.setattr(ch, "quick", counted)
                for _ in range(2):
                    np.testing.assert_array_equal(session.run(feeds)["co"], first)
                monkeypatch.undo()
                assert len(calls) == 2 * sum(ch.quick is not None for ch in chains)
                scale = float(np.abs(stepped).max()) + 1.0
                np.testing.assert_allclose(first, stepped, rtol=0, atol=2e-5 * scale)
    assert_modes_agree(model, feeds)
    _weight_cache.clear()


# ---- an NCHW chain's conv (fusion.ConvChain._hold_nchw) -----------------------------------


def _prepared_nchw(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, **attrs: Any) -> Any:
    """The NCHW conv's prepared direct call (nn_conv.prepared_nchw), which must take the
    kernel's own NCHW form here."""
    from onnxviz.runtime.kernels.nn_conv import prepared_nchw

    call = prepared_nchw(x, w, None, b, attrs)
    assert call is not None and not call.run.rows
    return call


# (N, C, H, W, M, kernel, stride, pads): a small image's 3x3 (a diffusion UNet's), a
# strided one, a 5x5 with partial channel vectors and two images
_NCHW_GEOMETRIES = [
    (1, 16, 12, 12, 24, 3, 1, 1),
    (1, 8, 11, 9, 16, 3, 2, 1),
    (2, 5, 7, 8, 9, 5, 1, 2),
]


@pytest.mark.parametrize("level", LEVELS)
def test_the_held_nchw_conv_gives_the_prepared_calls_bits(level):
    """The held form of an NCHW chain's conv (native/_conv.c's `held` with x_first and
    out_first) gives its prepared call's bits, with and without bias, residual and
    activation, into a new C-contiguous, 64-byte aligned NCHW output."""
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(40 + level)
    with at_level("conv", level):
        for n, c, h, wd, m, k, s, p in _NCHW_GEOMETRIES:
            x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
            w = (rng.standard_normal((m, c, k, k)) * 0.2).astype(np.float32)
            for bias in (True, False):
                b = rng.standard_normal(m).astype(np.float32) if bias else None
                call = _prepared_nchw(x, w, b, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
                oh, ow = call.run.out_shape[2:]
                r = rng.standard_normal((n, m, oh, ow)).astype(np.float32)
                for act in ACTS:
                    for residual in (None, r):
                        consts = (object(), object())
                        fallback = _Fallback()
                        nargs = 3 if residual is None else 4
                        held = call.held(
                            act, nargs, None if residual is None else 3, (1, 2), consts, fallback
                        )
                        args = (x, *consts) + (() if residual is None else (residual,))
                        got = held(*args)
                        want = call(x, residual, act)
                        assert type(got) is np.ndarray and got.shape == (n, m, oh, ow)
                        assert got.flags.c_contiguous and got.ctypes.data % 64 == 0
                        np.testing.assert_array_equal(got, want)
                        assert not fallback.calls
                        if residual is not None:  # never written over
                            assert not np.shares_memory(got, residual)
                # a time embedding: one value per item and channel, added after the kernel
                for e_shape in [(1, m, 1, 1), (m, 1, 1), (n, m, 1, 1), (n, 1, 1, 1), ()]:
                    e = rng.standard_normal(e_shape).astype(np.float32)
                    consts = (object(), object())
                    fallback = _Fallback()
                    held = call.held(None, 4, 3, (1, 2), consts, fallback, True)
                    got = held(x, *consts, e)
                    want = call(x, None)
                    np.add(want, e, out=want)  # the chain's broadcast add
                    assert got.flags.c_contiguous and got.ctypes.data % 64 == 0
                    np.testing.assert_array_equal(got, want)
                    assert not fallback.calls


def test_every_call_the_held_nchw_conv_does_not_take_goes_to_the_fallback():
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    w = rng.standard_normal((24, 16, 3, 3)).astype(np.float32)
    call = _prepared_nchw(x, w, None, kernel_shape=[3, 3], pads=[1] * 4)
    r = rng.standard_normal((1, 24, 12, 12)).astype(np.float32)
    consts = (object(), object())
    fallback = _Fallback()
    held = call.held(None, 4, 3, (1, 2), consts, fallback)
    np.testing.assert_array_equal(held(x, *consts, r), call(x, r))
    declined = [
        (_channels_last(x), *consts, r),  # channels-last image
        (x[:, :, :, :11], *consts, r[:, :, :, :11]),  # another shape (and a strided view)
        (x.astype(np.float64), *consts, r),
        (x, *consts, _channels_last(r)),  # a channels-last residual
        (x, *consts, r[:, :, ::-1]),  # a strided residual
        (x, *consts, r[:, :12]),  # a residual of another shape
        (x, object(), consts[1], r),  # another constant
        (x, *consts),  # another argument count
    ]
    for args in declined:
        _declined(held, fallback, args)
    spread = call.held(None, 4, 3, (1, 2), consts, fallback, True)
    e = rng.standard_normal((1, 24, 1, 1)).astype(np.float32)
    np.testing.assert_array_equal(spread(x, *consts, e), call(x, None) + e)
    for args in [
        (x, *consts, r),  # a residual of the output's shape
        (x, *consts, rng.standard_normal((1, 24, 2, 1)).astype(np.float32)),
        (x, *consts, rng.standard_normal((1, 23, 1, 1)).astype(np.float32)),
        (x, *consts, rng.standard_normal((2, 24, 1, 1)).astype(np.float32)),  # one image
        (x, *consts, rng.standard_normal((1, 1, 24, 1, 1)).astype(np.float32)),  # 5 axes
        (x, *consts, e.astype(np.float64)),
        (x, *consts, np.broadcast_to(e, (1, 24, 1, 1))[:, ::-1]),  # a strided view
    ]:
        _declined(spread, fallback, args)
    with pytest.raises(ValueError):  # an activation with a spread residual
        call.held((ACT_RELU, NAN, NAN), 4, 3, (1, 2), consts, fallback, True)
    for level in [lvl for lvl in LEVELS if lvl != native.cpu_level()]:
        with at_level("conv", level):  # another level than the one it was made at
            native.load("conv").set_level(level)
            _declined(held, fallback, (x, *consts, r))
    native.load("conv").set_level(native.cpu_level())
    np.testing.assert_array_equal(held(x, *consts, r), call(x, r))


def test_a_diffusion_like_chain_runs_its_nchw_convs_held(monkeypatch):
    """GroupNorm between the convs keeps them NCHW (a diffusion UNet's block, its time
    embedding added to the first conv's output, the block's input to the second's): from
    the second run the chains' quick calls are the held NCHW convs, the runs give the
    first run's bits and the stepped run's numbers."""
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(8)
    c, size = 32, 16
    nodes, inits = [], []
    for name in ("a", "b"):
        inits += [
            _init(f"w{name}", rng.standard_normal((c, c, 3, 3)) * 0.1),
            _init(f"b{name}", rng.standard_normal(c) * 0.1),
        ]
    inits += [
        numpy_helper.from_array(np.array([1, 8, -1], np.int64), "groups"),
        numpy_helper.from_array(np.array([1, c, size, size], np.int64), "back"),
        _init("gs", np.ones(8)),
        _init("gb", np.zeros(8)),
    ]
    nodes += [
        helper.make_node("Conv", ["x", "wa", "ba"], ["h0"], pads=[1] * 4),
        helper.make_node("Add", ["h0", "temb"], ["h"]),  # the time embedding
        helper.make_node("Reshape", ["h", "groups"], ["g"]),
        helper.make_node("InstanceNormalization", ["g", "gs", "gb"], ["gn"]),
        helper.make_node("Reshape", ["gn", "back"], ["n"]),
        helper.make_node("Sigmoid", ["n"], ["sg"]),
        helper.make_node("Mul", ["n", "sg"], ["silu"]),
        helper.make_node("Conv", ["silu", "wb", "bb"], ["y"], pads=[1] * 4),
        helper.make_node("Add", ["y", "x"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size]),
            helper.make_tensor_value_info("temb", TensorProto.FLOAT, [1, c, 1, 1]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {
        "x": rng.standard_normal((1, c, size, size)).astype(np.float32),
        "temb": rng.standard_normal((1, c, 1, 1)).astype(np.float32),
    }
    assert_modes_agree(model, feeds)
    session = Session(model)
    first = session.run(feeds)["out"]
    chains = [pn.fused for pn in run_nodes(session.plan) if isinstance(pn.fused, fusion.ConvChain)]
    assert len(chains) == 2 and all(chain.quick is not None for chain in chains)
    assert all(chain.residual is not None for chain in chains)
    for _ in range(2):
        np.testing.assert_array_equal(session.run(feeds)["out"], first)
    # another time embedding: the held call's result, the stepped run's bits
    feeds["temb"] = rng.standard_normal((1, c, 1, 1)).astype(np.float32)
    np.testing.assert_array_equal(session.run(feeds)["out"], stepped_values(model, feeds)["out"])


def _prepared_pointwise(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> Any:
    """An NCHW 1x1 conv's prepared call (nn_conv.prepared_pointwise) by the constant
    (frozen) ``w`` and ``b``."""
    from onnxviz.runtime.kernels.nn_conv import prepared_pointwise

    for const in (w, b):
        if const is not None:
            const.flags.writeable = False
    call = prepared_pointwise(x, w, b, {})
    assert call is not None
    return call


# (C, M, H, W): a diffusion UNet's attention projection at 8 x 8 and its skip convs at 8,
# 16 and 32 px, rows and pixels off the tiles' sizes
_PLANES_GEOMETRIES = [(64, 192, 8, 8), (32, 64, 16, 16), (128, 64, 8, 8), (96, 32, 32, 32),
                      (20, 9, 5, 7), (7, 13, 3, 11)]  # fmt: skip


@pytest.mark.parametrize("level", LEVELS)
def test_the_held_nchw_pointwise_conv_gives_the_prepared_calls_bits(level):
    """The held form of an NCHW chain's 1x1 conv (native/_sgemm.c's `pointwise_planes`)
    gives its prepared call's bits (gemm_left's, where the routing sends the product:
    AVX-512), with and without bias and residual, into a new C-contiguous, 64-byte
    aligned output that never shares the residual's memory; below AVX-512 (OpenBLAS runs
    the product) there is none."""
    compiled("sgemm", "the OpenBLAS paths run")
    rng = np.random.default_rng(60 + level)
    with at_level("sgemm", level), threadpool_limits(1):
        for c, m, h, wd in _PLANES_GEOMETRIES:
            x = rng.standard_normal((1, c, h, wd)).astype(np.float32)
            w = (rng.standard_normal((m, c, 1, 1)) * 0.2).astype(np.float32)
            for bias in (True, False):
                b = rng.standard_normal(m).astype(np.float32) if bias else None
                call = _prepared_pointwise(x, w, b)
                r = rng.standard_normal((1, m, h, wd)).astype(np.float32)
                for residual in (None, r):
                    consts = (object(), object())
                    fallback = _Fallback()
                    nargs = 3 if residual is None else 4
                    place = None if residual is None else 3
                    held = call.held(None, nargs, place, (1, 2), consts, fallback)
                    if level < native.AVX512:
                        assert held is None
                        continue
                    got = held(x, *consts, *(() if residual is None else (residual,)))
                    assert type(got) is np.ndarray and got.shape == (1, m, h, wd)
                    assert got.flags.c_contiguous and got.ctypes.data % 64 == 0
                    np.testing.assert_array_equal(got, call(x, residual))
                    assert not fallback.calls
                    if residual is not None:
                        assert not np.shares_memory(got, residual)


def test_every_call_the_held_nchw_pointwise_conv_does_not_take_goes_to_the_fallback():
    compiled("sgemm", "the OpenBLAS paths run")
    if native.cpu_level() < native.AVX512:
        pytest.skip("below AVX-512 the product stays with OpenBLAS: no held call")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 32, 8, 8)).astype(np.float32)
    w = rng.standard_normal((48, 32, 1, 1)).astype(np.float32)
    r = rng.standard_normal((1, 48, 8, 8)).astype(np.float32)
    with at_level("sgemm", native.cpu_level()), threadpool_limits(1):
        call = _prepared_pointwise(x, w, None)
        consts = (object(), object())
        fallback = _Fallback()
        held = call.held(None, 4, 3, (1, 2), consts, fallback)
        np.testing.assert_array_equal(held(x, *consts, r), call(x, r))
        declined = [
            (_channels_last(np.concatenate([x, x])), *consts, np.concatenate([r, r])),
            (np.concatenate([x, x]), *consts, np.concatenate([r, r])),  # two images
            (x[:, :, :, :7], *consts, r[:, :, :, :7]),  # another shape (a strided view)
            (x.astype(np.float64), *consts, r),
            (x, *consts, r.astype(np.float64)),
            (x, *consts, r[:, :, ::-1]),  # a strided residual
            (x, *consts, r[:, :24]),  # a residual of another shape
            (x, object(), consts[1], r),  # another constant
            (x, *consts),  # another argument count
        ]
        for args in declined:
            _declined(held, fallback, args)
        _declined(held, fallback, (x, *consts, r), key=1)  # a keyword
        with threadpool_limits(2):  # OpenBLAS on two threads: its product again
            _declined(held, fallback, (x, *consts, r))
        # not made: an activation, a spread residual, a product gemm_left does not run
        assert call.held((ACT_RELU, NAN, NAN), 4, 3, (1, 2), consts, fallback) is None
        assert call.held(None, 4, 3, (1, 2), consts, fallback, True) is None
        big = rng.standard_normal((1, 512, 32, 32)).astype(np.float32)
        wide = _prepared_pointwise(
            big, rng.standard_normal((512, 512, 1, 1)).astype(np.float32), None
        )
        assert wide.held(None, 3, None, (1, 2), consts, fallback) is None
    for level in [lvl for lvl in LEVELS if lvl < native.AVX512]:
        with at_level("sgemm", level):  # another tile height than the one it was made for
            native.load("sgemm").set_level(level)
            _declined(held, fallback, (x, *consts, r))
    native.load("sgemm").set_level(native.cpu_level())
    with threadpool_limits(1):
        np.testing.assert_array_equal(held(x, *consts, r), call(x, r))


def test_a_skip_conv_into_an_nchw_block_stays_nchw_and_both_run_held():
    """A residual block between GroupNorms (a diffusion UNet's, channels changing: a 1x1
    skip conv of the block's input added to the second 3x3 conv's output): the skip conv
    hands its output NCHW to the NCHW conv that adds it (channels-last, the 3x3 conv's
    held call declined it and numpy added it through a transposing read), and from the
    second run both convs run held, with the first run's bits and the stepped run's
    numbers."""
    compiled("conv", "the numpy convs run")
    rng = np.random.default_rng(12)
    c, m, size = 16, 32, 16
    inits = [
        _init("wa", rng.standard_normal((m, c, 3, 3)) * 0.1),
        _init("ba", rng.standard_normal(m) * 0.1),
        _init("wb", rng.standard_normal((m, m, 3, 3)) * 0.1),
        _init("bb", rng.standard_normal(m) * 0.1),
        _init("ws", rng.standard_normal((m, c, 1, 1)) * 0.2),
        _init("bs", rng.standard_normal(m) * 0.1),
        numpy_helper.from_array(np.array([1, 8, -1], np.int64), "groups"),
        numpy_helper.from_array(np.array([1, m, size, size], np.int64), "back"),
        _init("gs", np.ones(8)),
        _init("gb", np.zeros(8)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "wa", "ba"], ["h"], pads=[1] * 4),
        helper.make_node("Reshape", ["h", "groups"], ["g"]),
        helper.make_node("InstanceNormalization", ["g", "gs", "gb"], ["gn"]),
        helper.make_node("Reshape", ["gn", "back"], ["n"]),
        helper.make_node("Conv", ["n", "wb", "bb"], ["y"], pads=[1] * 4),
        helper.make_node("Conv", ["x", "ws", "bs"], ["skip"]),
        helper.make_node("Add", ["y", "skip"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, c, size, size)).astype(np.float32)}
    with threadpool_limits(1):
        assert_modes_agree(model, feeds)
        session = Session(model)
        first = session.run(feeds)["out"]
        chains = {
            pn.output_names[0]: pn.fused
            for pn in run_nodes(session.plan)
            if isinstance(pn.fused, fusion.ConvChain)
        }
        assert not chains["skip"].layout.emit
        assert chains["out"].residual is not None and chains["out"].quick is not None
        if native.cpu_level() >= native.AVX512:  # gemm_left runs the skip's product
            assert type(chains["skip"].quick).__name__ == "PointwisePlanes"
        for _ in range(2):
            np.testing.assert_array_equal(session.run(feeds)["out"], first)
