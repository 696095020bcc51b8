"""Channels-last exits: a conv chain that runs channels-last (fusion_layout.ChannelsLast)
hands its last conv's result to an NCHW reader (a graph output, a Resize) as planes.

Two tables, one thread, median of alternating rounds:

* the copy alone: nn_conv_nhwc.planes_copy (channels-last -> NCHW planes) and nhwc
  (NCHW -> channels-last rows) against numpy's transposing copy of the same view, on
  the shapes of ResNet and FPN layers;
* small models whose chain ends in a wide 1x1 conv read as NCHW (3x3 conv + Relu, 3x3
  conv + Relu, then the 1x1), ours against onnxruntime.

    python benchmarks/bench_layout_exits.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from onnx import TensorProto, helper, numpy_helper

COPY_SHAPES = [(1, 256, 56, 56), (1, 128, 56, 56), (1, 512, 28, 28), (1, 128, 28, 28),
               (2, 64, 32, 32), (1, 1024, 14, 14)]  # fmt: skip
# (batch, channels in, pixels, channels out of the exit's 1x1)
CHAINS = [(1, 64, 56, 256), (1, 64, 28, 128), (2, 32, 32, 96), (1, 128, 14, 512)]


def _best_us(fn: Callable[[], Any], repeat: int = 50) -> float:
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e6


def copies() -> None:
    from onnxviz.runtime.kernels.nn_conv_nhwc import nhwc, planes_copy

    rng = np.random.default_rng(0)
    print(f"{'shape':22s} {'planes_copy':>12s} {'numpy':>9s} {'nhwc':>9s} {'numpy':>9s}  (us)")
    for shape in COPY_SHAPES:
        x = rng.standard_normal(shape).astype(np.float32)
        last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        ours_out = _best_us(partial(planes_copy, last))
        numpy_out = _best_us(partial(np.ascontiguousarray, last))
        ours_in = _best_us(partial(nhwc, x))
        numpy_in = _best_us(partial(np.ascontiguousarray, x.transpose(0, 2, 3, 1)))
        print(f"{str(shape):22s} {ours_out:12.1f} {numpy_out:9.1f} {ours_in:9.1f} {numpy_in:9.1f}")


def _chain_model(batch: int, c: int, px: int, m: int) -> tuple[Any, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    nodes, inits, prev = [], [], "x"
    for i, (cin, cout, k) in enumerate([(c, c, 3), (c, c, 3), (c, m, 1)]):
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}")]
        inits += [numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), f"b{i}")]
        nodes.append(
            helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[k // 2] * 4)
        )
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev = f"r{i}"
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "exit",
        [helper.make_tensor_value_info("x", f, [batch, c, px, px])],
        [helper.make_tensor_value_info(prev, f, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((batch, c, px, px)).astype(np.float32)}


def chains(rounds: int) -> None:
    import onnxruntime as ort
    from threadpoolctl import threadpool_limits

    from onnxviz.runtime.session import Session

    threadpool_limits(1)
    print(
        f"\n{'chain (batch, C, px, exit M)':30s} {'onnxviz':>9s} {'onnxruntime':>12s} {'ratio':>6s}"
    )
    for spec in CHAINS:
        model, feeds = _chain_model(*spec)
        ours = Session(model)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        theirs = ort.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
        got, want = ours.run(feeds)["r2"], theirs.run(None, feeds)[0]
        assert np.allclose(got, want, rtol=1e-4, atol=1e-4), "the outputs differ"
        a_t: list[float] = []
        b_t: list[float] = []
        for _ in range(rounds):
            a_t.append(_best_us(partial(ours.run, feeds), 10))
            b_t.append(_best_us(partial(theirs.run, None, feeds), 10))
        a, b = statistics.median(a_t), statistics.median(b_t)
        print(f"{str(spec):30s} {a:9.0f} {b:12.0f} {a / b:6.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--models-only", action="store_true", help="the second table only")
    args = p.parse_args()
    if not args.models_only:
        copies()
    chains(args.rounds)


if __name__ == "__main__":
    main()
