"""Math kernels one node at a time: onnxviz kernel vs onnxruntime single-node session.

Shapes are the ones ResNet-50 and BERT-base (sequence 128) feed these ops.  Prints the
median of ``--repeat`` calls for each, and ours / onnxruntime as a ratio (lower is better).

    python benchmarks/bench_math_kernels.py [--threads 1] [--repeat 20]
"""

from __future__ import annotations

import argparse
import os


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=20)
    return p.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from onnxviz.runtime.invoke import call_node, find_kernel  # noqa: E402

RNG = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES: list[tuple[str, list[np.ndarray], int, dict[str, Any], int]] = [
    # (op, inputs, opset, attributes, output element type)
    ("MatMul", [_r(1, 128, 768), _r(768, 3072)], 13, {}, TensorProto.FLOAT),
    ("MatMul", [_r(12, 128, 64), _r(12, 64, 128)], 13, {}, TensorProto.FLOAT),
    ("Gemm", [_r(1, 2048), _r(1000, 2048), _r(1000)], 13, {"transB": 1}, TensorProto.FLOAT),
    ("Add", [_r(1, 128, 3072), _r(3072)], 14, {}, TensorProto.FLOAT),
    ("Mul", [_r(1, 12, 128, 128), _r(1)], 14, {}, TensorProto.FLOAT),
    ("Relu", [_r(1, 256, 56, 56)], 14, {}, TensorProto.FLOAT),
    ("Softmax", [_r(1, 12, 128, 128)], 13, {}, TensorProto.FLOAT),
    ("Erf", [_r(1, 128, 3072)], 13, {}, TensorProto.FLOAT),
    ("Gelu", [_r(1, 128, 3072)], 20, {}, TensorProto.FLOAT),
    ("Sigmoid", [_r(1, 128, 3072)], 13, {}, TensorProto.FLOAT),
    ("Tanh", [_r(1, 128, 3072)], 13, {}, TensorProto.FLOAT),
    ("Sqrt", [np.abs(_r(1, 128, 768))], 13, {}, TensorProto.FLOAT),
    ("Pow", [_r(1, 128, 768), np.array(2.0, np.float32)], 15, {}, TensorProto.FLOAT),
    ("ReduceMean", [_r(1, 128, 768), np.array([-1], np.int64)], 18, {}, TensorProto.FLOAT),
    ("ReduceMean", [_r(1, 2048, 7, 7), np.array([2, 3], np.int64)], 18, {}, TensorProto.FLOAT),
    (
        "Where",
        [RNG.random((1, 12, 128, 128)) > 0.5, _r(1, 12, 128, 128), _r(1)],
        16,
        {},
        TensorProto.FLOAT,
    ),
    ("Cast", [_r(1, 128, 768)], 21, {"to": TensorProto.FLOAT16}, TensorProto.FLOAT16),
    ("CumSum", [_r(256, 1024), np.array(1, np.int64)], 14, {}, TensorProto.FLOAT),
]


def _median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _ort_session(
    op: str, inputs: list[np.ndarray], opset: int, attrs: dict[str, Any], out: int
) -> Any:
    import onnxruntime as ort

    names = [f"x{i}" for i in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)],
        "bench",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in zip(names, inputs)
        ],
        [helper.make_tensor_value_info("y", out, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ARGS.threads if ARGS else 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = dict(zip(names, inputs))
    return lambda: sess.run(None, feeds)


def _our_call(node: Any, inputs: list[np.ndarray], opset: int) -> Callable[[], Any]:
    spec = find_kernel(node, {"": opset})
    return lambda: call_node(node, inputs, {"": opset}, spec=spec)


def main() -> None:
    assert ARGS is not None
    print(f"threads={ARGS.threads} repeat={ARGS.repeat}")
    print(f"{'op':12s} {'input shapes':42s} {'ours ms':>9s} {'ort ms':>9s} {'ratio':>7s}")
    ratios = []
    for op, inputs, opset, attrs, out in CASES:
        names = [f"x{i}" for i in range(len(inputs))]
        node = helper.make_node(op, names, ["y"], **attrs)
        ours = _median_seconds(_our_call(node, inputs, opset), ARGS.repeat)
        theirs = _median_seconds(_ort_session(op, inputs, opset, attrs, out), ARGS.repeat)
        ratio = ours / theirs
        ratios.append(ratio)
        shapes = " ".join("x".join(map(str, v.shape)) or "()" for v in inputs)
        print(f"{op:12s} {shapes:42s} {ours * 1e3:9.3f} {theirs * 1e3:9.3f} {ratio:7.2f}")
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"geometric mean ratio ours/onnxruntime: {geo:.2f}")


if __name__ == "__main__":
    main()
