"""The compiled direct conv (native/_conv.c) against the path nn_conv runs today, on the
plain (one group) conv shapes of the benchmark families, one thread, medians.

Per shape: ``current`` is nn_conv.conv_core with the weight wrapped as the fused runs
wrap it (whatever _conv_dispatch picks: the direct kernel where direct_nchw_pays or
direct_rows_pays says so) on an NCHW input, bias included; ``numpy`` the same with the
direct kernel off (ONNXVIZ_DIRECT_CONV=off: Winograd, shifted slices, im2col); ``nhwc`` is the direct kernel on a channels-last input
into a channels-last output (a conv inside a channels-last chain); ``nchw`` is the
direct kernel reading and writing NCHW itself (the input rows transposed into its
row buffer, the output written plane by plane): what the NCHW Conv path runs;
``rows`` the NCHW input copied into channels-last rows, the direct kernel rows to rows,
the result copied back into planes (nn_conv._native_direct_nchw with ``rows``);
``first-in`` the direct kernel reading NCHW and writing channels-last (a stem conv
entering a channels-last chain, MobileNetV3's); ``blocked`` the blocked direct kernel
(_conv.c conv_blocked) channels-last in and out (nan below AVX-512); ``winograd`` the
fused F(2x2, 3x3) Winograd conv (native/_winograd.c conv_nhwc) channels-last in and out,
what a chain runs where nn_winograd.fused_pays says so (nan for other kernels, strides
and levels); ``ort``
onnxruntime's Conv of the same NCHW input with the bias, one thread (when it is
installed).  Each is timed by its thread's CPU time (time.thread_time: another process
on the core does not count), the runs alternated over ``--rounds`` rounds, each round's
best of ``--repeat`` calls, the median of the rounds printed.

    python benchmarks/bench_direct_conv.py [--repeat 10] [--rounds 5] [--shapes all|stem|r50|diff|WORDS]
                                           [--neighbour KB] [--spells SECONDS]

``--shapes stem``: only the few-input-channel stems (C = 3; the planes path of _conv.c);
``--shapes r50``: only ResNet-50's 3x3 convs of 128 to 512 channels.  Any other value:
the shapes whose label contains one of its comma-separated words (``"diff 1x1,64 c"``).

``--neighbour KB``: while measuring, another process copies a buffer of KB kilobytes back
and forth on another CPU (a neighbour on a shared host, as on CI machines).  On a 2-vCPU
Zen 3 guest, neighbour on and off interleaved in blocks of 20 alternated runs (one-node
3x3 convs at 32 px through Session against onnxruntime) moved neither: 1.01-1.05x for
both.  A first, non-interleaved try had seemed to show ours slowed 35-50% and
onnxruntime's 13-20%: the host's own slow spells, which did inflate our conv more (in
one, 64 channels at 32 px went 963 -> 1690 us and onnxruntime's 886 -> 1173), not the
neighbour; compare the columns of one run, never two runs.

``--spells SECONDS``: instead of the table, per shape our channels-last conv (the
``nhwc`` column's call, a chain's), our NCHW one (the ``nchw`` column's) and
onnxruntime's, alternated call by call for SECONDS, the triples then split into thirds by
onnxruntime's time (the host's quiet, middle and slow spells), and the medians of ours /
onnxruntime printed per third.  Those slow spells (on a cloud vCPU, most likely the
core's other hardware thread running another guest) had slowed our conv more than
onnxruntime's: channels-last, 64 channels at 32 px on a Zen 3 vCPU, 0.94 of its time in
quiet spells, 1.11 in slow ones, because the tile's channel loop was bound by the front
end (_conv.c sums8); unrolled, 0.88 and 0.91.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from onnxviz.runtime.kernels import nn_winograd
from onnxviz.runtime.kernels.nn_conv import (
    ConvWeight,
    _native_direct_nchw,
    conv_core,
    conv_geometry,
    direct_lanes,
    native_blocked,
    native_direct,
    pack_blocked,
    pack_direct,
)

# (label, C, M, H=W, kernel, stride, pad)
SHAPES: list[tuple[str, int, int, int, int, int, int]] = [
    ("r18 stem 7x7/2", 3, 32, 224, 7, 2, 3),
    ("r18 3x3 56 c32", 32, 32, 56, 3, 1, 1),
    ("r18 3x3/2 56 c32-64", 32, 64, 56, 3, 2, 1),
    ("r18 3x3 28 c64", 64, 64, 28, 3, 1, 1),
    ("r18 3x3/2 28 c64-128", 64, 128, 28, 3, 2, 1),
    ("r18 3x3 14 c128", 128, 128, 14, 3, 1, 1),
    ("r18 3x3/2 14 c128-256", 128, 256, 14, 3, 2, 1),
    ("r18 3x3 7 c256", 256, 256, 7, 3, 1, 1),
    ("r18 1x1/2 56 c32-64", 32, 64, 56, 1, 2, 0),
    ("r18 1x1/2 28 c64-128", 64, 128, 28, 1, 2, 0),
    ("r18 1x1/2 14 c128-256", 128, 256, 14, 1, 2, 0),
    ("r50 stem 7x7/2 c64", 3, 64, 224, 7, 2, 3),
    ("r50 3x3 56 c64", 64, 64, 56, 3, 1, 1),
    ("r50 3x3/2 56 c128", 128, 128, 56, 3, 2, 1),
    ("r50 3x3 28 c128", 128, 128, 28, 3, 1, 1),
    ("r50 3x3/2 28 c256", 256, 256, 28, 3, 2, 1),
    ("r50 3x3 14 c256", 256, 256, 14, 3, 1, 1),
    ("r50 3x3/2 14 c512", 512, 512, 14, 3, 2, 1),
    ("r50 3x3 7 c512", 512, 512, 7, 3, 1, 1),
    ("r50 1x1/2 56 c256-512", 256, 512, 56, 1, 2, 0),
    ("unet 3x3 128 c3-16", 3, 16, 128, 3, 1, 1),
    ("unet 3x3 128 c16", 16, 16, 128, 3, 1, 1),
    ("unet 3x3 64 c16-32", 16, 32, 64, 3, 1, 1),
    ("unet 3x3 64 c32", 32, 32, 64, 3, 1, 1),
    ("unet 3x3 32 c64", 64, 64, 32, 3, 1, 1),
    ("unet 3x3 16 c128", 128, 128, 16, 3, 1, 1),
    ("unet 3x3 128 c32-16", 32, 16, 128, 3, 1, 1),
    ("mnv3 stem 3x3/2 c3-16", 3, 16, 224, 3, 2, 1),
    # a diffusion UNet's (GroupNorm between its convs: NCHW in and out, no chain)
    ("diff 3x3 32 c3-32", 3, 32, 32, 3, 1, 1),
    ("diff 3x3 32 c32", 32, 32, 32, 3, 1, 1),
    ("diff 3x3 32 c64", 64, 64, 32, 3, 1, 1),
    ("diff 3x3 32 c96-32", 96, 32, 32, 3, 1, 1),
    ("diff 3x3 32 c128-64", 128, 64, 32, 3, 1, 1),
    ("diff 3x3/2 32 c32", 32, 32, 32, 3, 2, 1),
    ("diff 3x3 16 c64", 64, 64, 16, 3, 1, 1),
    ("diff 3x3 16 c128-64", 128, 64, 16, 3, 1, 1),
    ("diff 3x3 64 c32", 32, 32, 64, 3, 1, 1),
    ("diff 3x3 64 c64", 64, 64, 64, 3, 1, 1),
    ("diff 3x3 64 c128", 128, 128, 64, 3, 1, 1),
    ("diff 3x3 64 c96-32", 96, 32, 64, 3, 1, 1),
    ("diff 3x3 32 c128", 128, 128, 32, 3, 1, 1),
    ("diff 3x3 32 c256", 256, 256, 32, 3, 1, 1),
    ("diff 3x3 8 c64", 64, 64, 8, 3, 1, 1),
    ("diff 3x3 8 c128", 128, 128, 8, 3, 1, 1),
    ("diff 3x3 16 c32", 32, 32, 16, 3, 1, 1),
    # NCHW images between 32 and 64 px of up to 8192 channel pairs: Winograd or direct
    ("grid 3x3 48 c64", 64, 64, 48, 3, 1, 1),
    ("grid 3x3 56 c64", 64, 64, 56, 3, 1, 1),
    ("grid 3x3 56 c96-32", 96, 32, 56, 3, 1, 1),
    ("grid 3x3 40 c128-64", 128, 64, 40, 3, 1, 1),
    ("grid 3x3 48 c128-64", 128, 64, 48, 3, 1, 1),
    ("grid 3x3 64 c128-64", 128, 64, 64, 3, 1, 1),
    ("grid 3x3 64 c64-128", 64, 128, 64, 3, 1, 1),
    # its 1x1s: the attention's projections and the skip convs of the up blocks
    ("diff 1x1 8 c64-192", 64, 192, 8, 1, 1, 0),
    ("diff 1x1 8 c64", 64, 64, 8, 1, 1, 0),
    ("diff 1x1 8 c128-64", 128, 64, 8, 1, 1, 0),
    ("diff 1x1 16 c128-64", 128, 64, 16, 1, 1, 0),
    ("diff 1x1 16 c32-64", 32, 64, 16, 1, 1, 0),
    ("diff 1x1 32 c128-64", 128, 64, 32, 1, 1, 0),
    ("diff 1x1 32 c64", 64, 64, 32, 1, 1, 0),
    ("diff 1x1 64 c96-32", 96, 32, 64, 1, 1, 0),
    ("diff 1x1 64 c64-128", 64, 128, 64, 1, 1, 0),
    ("diff 1x1 64 c256-128", 256, 128, 64, 1, 1, 0),
    ("diff 1x1 32 c96-32", 96, 32, 32, 1, 1, 0),
]
STEM = ("r18 stem 7x7/2", "r50 stem 7x7/2 c64", "unet 3x3 128 c3-16", "mnv3 stem 3x3/2 c3-16")
# ResNet-50's 3x3 convs of 128+ channels (the bottlenecks' middle convs).
R50 = (
    "r50 3x3/2 56 c128",
    "r50 3x3 28 c128",
    "r50 3x3/2 28 c256",
    "r50 3x3 14 c256",
    "r50 3x3/2 14 c512",
    "r50 3x3 7 c512",
)


def best_us(fn: Callable[[], object], repeat: int) -> float:
    """The fastest of ``repeat`` calls (after one warm-up), thread CPU time, us."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return min(times) * 1e6


def ort_conv(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, p: int
) -> Callable[[], object] | None:
    """onnxruntime's one-node Conv (one thread) of x by w plus b, or None without it."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[s, s], pads=[p] * 4)
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    return lambda: session.run(None, {"x": x})


def _operands(
    c: int, m: int, size: int, k: int, s: int, p: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    """One shape's image (1, C, size, size), weight, bias and conv_geometry, seeded."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((m, c, k, k)) / math.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    return x, w, b, conv_geometry(x, w, "NOTSET", None, None, [p] * 4, [s, s])


def measure(
    c: int, m: int, size: int, k: int, s: int, p: int, lanes: int, repeat: int, rounds: int
) -> list[float]:
    """us of (current, numpy, nhwc, nchw, rows, first-in, blocked, winograd, ort) for one
    shape (outputs checked to agree; blocked nan below AVX-512, winograd nan where the
    fused conv does not apply, ort nan without onnxruntime)."""
    x, w, b, (kernel, strides, dil, pads, out_shape) = _operands(c, m, size, k, s, p)
    packed = ConvWeight(w)
    wp = pack_direct(w, lanes)
    wb = pack_blocked(w)
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))

    def current() -> np.ndarray:
        return conv_core(x, w, 1, kernel, strides, dil, pads, out_shape, b, packed)

    def numpy_paths() -> np.ndarray:
        os.environ["ONNXVIZ_DIRECT_CONV"] = "off"
        try:
            return conv_core(x, w, 1, kernel, strides, dil, pads, out_shape, b, packed)
        finally:
            del os.environ["ONNXVIZ_DIRECT_CONV"]

    def nhwc() -> np.ndarray:
        out = np.empty((1, *out_shape, m), np.float32)
        native_direct(xl, wp, lanes, m, kernel, b, None, out, strides, dil, pads)
        return out

    def nchw() -> np.ndarray:
        out = np.empty((1, m, *out_shape), np.float32)
        native_direct(
            x, wp, lanes, m, kernel, b, None, out, strides, dil, pads, x_first=True, out_first=True
        )
        return out

    def rows() -> np.ndarray:
        got = _native_direct_nchw(
            x, w, b, None, packed, kernel, strides, dil, pads, out_shape, rows=True
        )
        assert got is not None
        return got[0]

    def first_in() -> np.ndarray:
        out = np.empty((1, *out_shape, m), np.float32)
        native_direct(x, wp, lanes, m, kernel, b, None, out, strides, dil, pads, x_first=True)
        return out

    def blocked() -> np.ndarray:
        out = np.empty((1, *out_shape, m), np.float32)
        native_blocked(xl, wb, m, kernel, b, None, out, strides, dil, pads)
        return out

    nr = nn_winograd.panel_width()
    fused = k == 3 and s == 1 and nr > 0
    u = nn_winograd.pack_nhwc(w, nr) if fused else None

    def winograd() -> np.ndarray:
        out = np.empty((1, *out_shape, m), np.float32)
        assert u is not None
        assert nn_winograd.conv_nhwc(xl, u, m, b, None, out, pads, (0, math.nan, math.nan))
        return out

    ref = current()
    assert np.allclose(ref, numpy_paths(), rtol=1e-3, atol=1e-3)
    assert np.allclose(ref, nchw(), rtol=1e-3, atol=1e-3)
    assert np.allclose(ref, rows(), rtol=1e-3, atol=1e-3)
    assert np.allclose(ref, nhwc().transpose(0, 3, 1, 2), rtol=1e-3, atol=1e-3)
    assert np.allclose(ref, first_in().transpose(0, 3, 1, 2), rtol=1e-3, atol=1e-3)
    assert np.allclose(ref, blocked().transpose(0, 3, 1, 2), rtol=1e-3, atol=1e-3)
    if fused:
        assert np.allclose(ref, winograd().transpose(0, 3, 1, 2), rtol=1e-3, atol=1e-3)
    runs: list[Callable[[], object] | None] = [current, numpy_paths, nhwc, nchw, rows, first_in]
    runs.append(blocked if lanes == 16 else None)
    runs.append(winograd if fused else None)
    runs.append(ort_conv(x, w, b, s, p))
    got: list[list[float]] = [[] for _ in runs]
    for _ in range(rounds):  # alternated: a slow spell of the machine hits all alike
        for i, f in enumerate(runs):
            got[i].append(math.nan if f is None else best_us(f, repeat))
    return [statistics.median(t) for t in got]


def spells(
    c: int, m: int, size: int, k: int, s: int, p: int, lanes: int, seconds: float
) -> list[tuple[float, float, float]] | None:
    """Per third of the host's spells (quiet, middle, slow: by onnxruntime's time), the
    median onnxruntime us and the medians of ours / onnxruntime for our channels-last
    call (a chain's) and our NCHW one, the three alternated call by call for
    ``seconds``; None without onnxruntime."""
    x, w, b, (kernel, strides, dil, pads, out_shape) = _operands(c, m, size, k, s, p)
    wp = pack_direct(w, lanes)
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    out = np.empty((1, m, *out_shape), np.float32)
    out_l = np.empty((1, *out_shape, m), np.float32)
    peer = ort_conv(x, w, b, s, p)
    if peer is None:
        return None

    def nhwc() -> None:
        native_direct(xl, wp, lanes, m, kernel, b, None, out_l, strides, dil, pads)

    def nchw() -> None:
        native_direct(
            x, wp, lanes, m, kernel, b, None, out, strides, dil, pads, x_first=True, out_first=True
        )

    runs = (nhwc, nchw, peer)
    for f in runs:
        f()
    rows: list[tuple[float, float, float]] = []  # (nhwc, nchw, onnxruntime) seconds
    end = time.monotonic() + seconds
    while time.monotonic() < end or len(rows) < 3:
        t = [0.0, 0.0, 0.0]
        for i, f in enumerate(runs):
            t0 = time.thread_time()
            f()
            t[i] = time.thread_time() - t0
        if min(t) > 0:
            rows.append((t[0], t[1], t[2]))
    rows.sort(key=lambda row: row[2])
    third = len(rows) // 3
    parts = [rows[:third], rows[third : len(rows) - third], rows[len(rows) - third :]]
    return [
        (
            statistics.median(r[2] for r in part) * 1e6,
            statistics.median(r[0] / r[2] for r in part),
            statistics.median(r[1] / r[2] for r in part),
        )
        for part in parts
    ]


def _neighbour(kilobytes: int, cpu: int) -> None:
    """Copy a buffer of ``kilobytes`` back and forth on ``cpu`` until killed."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {cpu})
    a = np.ones(kilobytes * 256, np.float32)
    b = np.empty_like(a)
    while True:
        np.copyto(b, a)
        np.copyto(a, b)


@contextlib.contextmanager
def neighbour(kilobytes: int) -> Iterator[None]:
    """A `_neighbour` process on another CPU than this one (pinned to the first) while
    the block runs; nothing for 0 KB or a one-CPU machine."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if kilobytes <= 0 or len(cpus) < 2:
        yield
        return
    os.sched_setaffinity(0, {cpus[0]})
    proc = multiprocessing.get_context("spawn").Process(
        target=_neighbour, args=(kilobytes, cpus[1]), daemon=True
    )
    proc.start()
    try:
        time.sleep(0.5)  # its buffers touched, its loop running
        yield
    finally:
        proc.kill()
        proc.join()
        os.sched_setaffinity(0, set(cpus))


def _selected(which: str) -> list[tuple[str, int, int, int, int, int, int]]:
    """The SHAPES that ``--shapes`` names."""
    if which == "stem":
        return [shape for shape in SHAPES if shape[0] in STEM]
    if which == "r50":
        return [shape for shape in SHAPES if shape[0] in R50]
    if which != "all":  # labels containing any of these comma-separated words ("diff")
        words = which.split(",")
        return [shape for shape in SHAPES if any(word in shape[0] for word in words)]
    return list(SHAPES)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", default="all")
    parser.add_argument("--neighbour", type=int, default=0, metavar="KB")
    parser.add_argument("--spells", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args()
    lanes = direct_lanes()
    if lanes is None:
        raise SystemExit("the compiled _conv is off or not built")
    if args.spells > 0:
        print(
            f"{'shape':26}  ours / onnxruntime, channels-last and NCHW (its us), in its"
            " quiet, middle and slow spells"
        )
        with threadpool_limits(1), neighbour(args.neighbour):
            for label, c, m, size, k, s, p in _selected(args.shapes):
                got = spells(c, m, size, k, s, p, lanes, args.spells)
                if got is None:
                    raise SystemExit("--spells needs onnxruntime")
                cells = "".join(f"  {r1:5.2f} {r2:5.2f} ({t:6.0f})" for t, r1, r2 in got)
                print(f"{label:26}{cells}", flush=True)
        return
    names = ("current", "numpy", "nhwc", "nchw", "rows", "first-in", "blocked", "winograd", "ort")
    print(f"{'shape':26}" + "".join(f" {n:>9}" for n in names) + f"  (us, lanes {lanes})")
    with threadpool_limits(1), neighbour(args.neighbour):
        for label, c, m, size, k, s, p in _selected(args.shapes):
            t = measure(c, m, size, k, s, p, lanes, args.repeat, args.rounds)
            out = size // s
            gflop = 2 * c * m * k * k * out * out / 1e3
            best = min(v for v in t[2:8] if not math.isnan(v))
            print(
                f"{label:26}" + "".join(f" {v:9.0f}" for v in t) + f"  {gflop / best:.0f} GFLOP/s",
                flush=True,
            )


if __name__ == "__main__":
    main()
