"""Per-op speed: one-node models run by onnxviz and onnxruntime, same thread count.

Finds the kernels that are slow against onnxruntime at sizes real models use (ResNet,
BERT, UNet shapes).  Each case: one warm-up run each, then ``--repeat`` rounds timing
both back to back; prints the fastest time of each and the ratio (fastest runs are the
steadiest statistic on a busy machine), slowest ratio first.

    python benchmarks/bench_opset_speed.py [--threads 1] [--repeat 15] [--ops Conv,MatMul]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (label, op, input shapes (None: absent), constant inputs by position, attributes)
Case = tuple[str, str, list[Any], dict[int, np.ndarray], dict[str, Any]]


def _cases() -> list[Case]:
    r = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (r.standard_normal(shape) * 0.05).astype(np.float32)

    i64 = np.int64
    return [
        ("Conv 3x3 64@56", "Conv", [(1, 64, 56, 56)], {1: w(64, 64, 3, 3)}, {"pads": [1] * 4}),
        ("Conv 3x3 256@14", "Conv", [(1, 256, 14, 14)], {1: w(256, 256, 3, 3)}, {"pads": [1] * 4}),
        ("Conv 1x1 256->64@56", "Conv", [(1, 256, 56, 56)], {1: w(64, 256, 1, 1)}, {}),
        (
            "Conv 3x3 s2 128@56",
            "Conv",
            [(1, 128, 56, 56)],
            {1: w(128, 128, 3, 3)},
            {"pads": [1] * 4, "strides": [2, 2]},
        ),
        (
            "Conv 7x7 s2 3@224",
            "Conv",
            [(1, 3, 224, 224)],
            {1: w(64, 3, 7, 7)},
            {"pads": [3] * 4, "strides": [2, 2]},
        ),
        (
            "Conv depthwise 3x3 256@28",
            "Conv",
            [(1, 256, 28, 28)],
            {1: w(256, 1, 3, 3)},
            {"pads": [1] * 4, "group": 256},
        ),
        (
            "ConvTranspose 2x2 s2 64@32",
            "ConvTranspose",
            [(1, 64, 32, 32)],
            {1: w(64, 32, 2, 2)},
            {"strides": [2, 2]},
        ),
        ("MatMul 128x768x768", "MatMul", [(1, 128, 768)], {1: w(768, 768)}, {}),
        ("MatMul 128x768x3072", "MatMul", [(1, 128, 768)], {1: w(768, 3072)}, {}),
        ("MatMul attention", "MatMul", [(1, 12, 128, 64), (1, 12, 64, 128)], {}, {}),
        ("Gemm 1x2048x1000", "Gemm", [(1, 2048)], {1: w(1000, 2048)}, {"transB": 1}),
        ("Softmax 12x128x128", "Softmax", [(1, 12, 128, 128)], {}, {"axis": -1}),
        (
            "LayerNorm 128x768",
            "LayerNormalization",
            [(1, 128, 768)],
            {1: np.ones(768, np.float32), 2: np.zeros(768, np.float32)},
            {"axis": -1},
        ),
        (
            "BatchNorm 64@112",
            "BatchNormalization",
            [(1, 64, 112, 112)],
            {k: np.full(64, 0.5 + k / 10, np.float32) for k in range(1, 5)},
            {},
        ),
        ("Relu 64@112", "Relu", [(1, 64, 112, 112)], {}, {}),
        ("Add bias 128x3072", "Add", [(1, 128, 3072)], {1: w(3072)}, {}),
        ("Mul 128x3072", "Mul", [(1, 128, 3072), (1, 128, 3072)], {}, {}),
        ("Erf 128x3072", "Erf", [(1, 128, 3072)], {}, {}),
        ("Tanh 128x3072", "Tanh", [(1, 128, 3072)], {}, {}),
        ("Sigmoid 128x3072", "Sigmoid", [(1, 128, 3072)], {}, {}),
        (
            "MaxPool 3x3 s2 64@112",
            "MaxPool",
            [(1, 64, 112, 112)],
            {},
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4},
        ),
        (
            "AveragePool 3x3 256@28",
            "AveragePool",
            [(1, 256, 28, 28)],
            {},
            {"kernel_shape": [3, 3], "pads": [1] * 4},
        ),
        ("GlobalAveragePool 2048@7", "GlobalAveragePool", [(1, 2048, 7, 7)], {}, {}),
        ("ReduceMean 128x768", "ReduceMean", [(1, 128, 768)], {}, {"axes": [-1]}),
        ("Transpose 0213 128x12x64", "Transpose", [(1, 128, 12, 64)], {}, {"perm": [0, 2, 1, 3]}),
        ("Concat 2x 64@56", "Concat", [(1, 64, 56, 56), (1, 64, 56, 56)], {}, {"axis": 1}),
        ("Gather rows 30522x768", "Gather", [None], {0: w(30522, 768), 1: np.arange(128)}, {}),
        (
            "Slice half 128x3072",
            "Slice",
            [(1, 128, 3072)],
            {1: np.array([0], i64), 2: np.array([1536], i64), 3: np.array([2], i64)},
            {},
        ),
        (
            "Resize nearest x2 64@32",
            "Resize",
            [(1, 64, 32, 32), None],
            {2: np.array([1, 1, 2, 2], np.float32)},
            {"mode": "nearest"},
        ),
        ("Cast f32->f16 128x3072", "Cast", [(1, 128, 3072)], {}, {"to": TensorProto.FLOAT16}),
    ]


def _model(case: Case) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    _label, op, shapes, consts, attrs = case
    rng = np.random.default_rng(1)
    n_inputs = max([len(shapes)] + [k + 1 for k in consts])
    names: list[str] = []
    inputs = []
    inits = []
    feeds: dict[str, np.ndarray] = {}
    for k in range(n_inputs):
        if k in consts:
            name = f"c{k}"
            inits.append(numpy_helper.from_array(consts[k], name))
        elif k < len(shapes) and shapes[k] is not None:
            name = f"x{k}"
            feeds[name] = rng.standard_normal(shapes[k]).astype(np.float32)
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shapes[k]))
        else:
            name = ""
        names.append(name)
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        op,
        inputs,
        [helper.make_tensor_value_info("y", attrs.get("to", TensorProto.FLOAT), None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, feeds


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--ops", default="", help="only these op types (comma-separated)")
    args = p.parse_args()

    import onnxruntime as ort
    from threadpoolctl import threadpool_limits

    from onnxviz.runtime.session import Session

    wanted = set(args.ops.split(",")) if args.ops else None
    rows = []
    with threadpool_limits(limits=args.threads):
        for case in _cases():
            if wanted and case[1] not in wanted:
                continue
            model, feeds = _model(case)
            ours = Session(model)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = args.threads
            opts.log_severity_level = 3
            theirs = ort.InferenceSession(
                model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
            )
            a = ours.run(feeds)["y"]
            b = theirs.run(["y"], feeds)[0]
            t_ours, t_ort = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                ours.run(feeds)
                t1 = time.perf_counter()
                theirs.run(["y"], feeds)
                t_ort.append(time.perf_counter() - t1)
                t_ours.append(t1 - t0)
            err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            rows.append((case[0], min(t_ours), min(t_ort), err))
            sys.stdout.flush()
    print(f"threads {args.threads}, fastest of {args.repeat}")
    print(f"{'case':<28}{'onnxviz ms':>11}{'ort ms':>9}{'ratio':>8}  max abs diff")
    for label, t_o, t_r, err in sorted(rows, key=lambda r: -r[1] / r[2]):
        print(f"{label:<28}{t_o * 1e3:>11.3f}{t_r * 1e3:>9.3f}{t_o / t_r:>7.2f}x  {err:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
