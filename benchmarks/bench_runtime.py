"""Interpreter speed: onnxviz Session vs onnx.reference vs onnxruntime, same thread count.

Models: ResNet-50 (the light model from the onnx wheel, weights made by ConstantOfShape)
and a BERT-base-sized encoder built here (12 layers, hidden 768, 12 heads, FFN 3072,
sequence 128, batch 1, random weights).  Prints the median of ``--repeat`` runs after a
warm-up run, and ratios against both peers.

    python benchmarks/bench_runtime.py [--threads 2] [--repeat 5] [--models resnet50,bert]
"""

from __future__ import annotations

import argparse
import os
import sys


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--reference-repeat", type=int, default=1, help="runs of onnx.reference")
    p.add_argument("--models", default="resnet50,bert")
    p.add_argument("--layers", type=int, default=12, help="BERT encoder layers")
    return p.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None:
    # Same thread count for everyone: BLAS (numpy) and onnxruntime.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def resnet50() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    from onnxviz.runtime.conformance import light_dir, light_inputs

    model = onnx.load(os.path.join(light_dir(), "light_resnet50.onnx"))
    return model, light_inputs(model)


def bert_encoder(
    layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    head_dim = hidden // heads
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def w(name: str, *shape: int, scale: float = 0.02) -> str:
        inits.append(
            numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
        )
        return name

    def c(name: str, value: Any, dtype: Any = np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    split_shape = c("split_shape", [1, seq, heads, head_dim], np.int64)
    merge_shape = c("merge_shape", [1, seq, hidden], np.int64)
    scale = c("scale", 1.0 / np.sqrt(head_dim))
    half = c("half", 0.5)
    one = c("one", 1.0)
    sqrt2 = c("sqrt2", np.sqrt(2.0))
    x = "x"
    for i in range(layers):
        p = f"l{i}"

        def proj(inp: str, name: str, n_in: int, n_out: int, p: str = p) -> str:
            mm = node("MatMul", [inp, w(f"{p}.{name}.w", n_in, n_out)], f"{p}.{name}.mm")
            return node("Add", [mm, w(f"{p}.{name}.b", n_out)], f"{p}.{name}")

        def heads_of(t: str, perm: list[int], p: str = p) -> str:
            r = node("Reshape", [t, split_shape], f"{t}.r")
            return node("Transpose", [r], f"{t}.t", perm=perm)

        q = heads_of(proj(x, "q", hidden, hidden), [0, 2, 1, 3])
        k = heads_of(proj(x, "k", hidden, hidden), [0, 2, 3, 1])
        v = heads_of(proj(x, "v", hidden, hidden), [0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"{p}.qk"), scale], f"{p}.scores")
        probs = node("Softmax", [scores], f"{p}.probs", axis=-1)
        ctx = node("MatMul", [probs, v], f"{p}.ctx")
        ctx = node("Transpose", [ctx], f"{p}.ctx.t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, merge_shape], f"{p}.ctx.r")
        attn = proj(ctx, "o", hidden, hidden)
        res1 = node("Add", [attn, x], f"{p}.res1")
        ln1 = node(
            "LayerNormalization",
            [res1, c(f"{p}.ln1.g", np.ones(hidden)), c(f"{p}.ln1.b", np.zeros(hidden))],
            f"{p}.ln1",
            axis=-1,
            epsilon=1e-12,
        )
        h = proj(ln1, "ff1", hidden, ffn)
        erf = node("Erf", [node("Div", [h, sqrt2], f"{p}.gelu.div")], f"{p}.gelu.erf")
        gelu = node(
            "Mul",
            [node("Mul", [h, half], f"{p}.gelu.half"), node("Add", [erf, one], f"{p}.gelu.add")],
            f"{p}.gelu",
        )
        h2 = proj(gelu, "ff2", ffn, hidden)
        res2 = node("Add", [h2, ln1], f"{p}.res2")
        x = node(
            "LayerNormalization",
            [res2, c(f"{p}.ln2.g", np.ones(hidden)), c(f"{p}.ln2.b", np.zeros(hidden))],
            f"{p}.ln2",
            axis=-1,
            epsilon=1e-12,
        )
    nodes.append(helper.make_node("Identity", [x], ["y"], name="y"))
    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal((1, seq, hidden)).astype(np.float32)}
    return model, feeds


def _median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    result = fn()  # warm-up (also first-run constant folding / plan compile)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def bench(
    name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray], args: argparse.Namespace
) -> None:
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    from onnxviz.runtime.session import Session

    out_name = model.graph.output[0].name
    sess = Session(model)
    ours_t, ours = _median_time(lambda: sess.run(feeds)[out_name], args.repeat)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    ort_sess = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    ort_t, theirs = _median_time(lambda: ort_sess.run([out_name], feeds)[0], args.repeat)

    ref = ReferenceEvaluator(model)
    t0 = time.perf_counter()
    ref_out = None
    ref_times = []
    for _ in range(max(1, args.reference_repeat)):
        t0 = time.perf_counter()
        ref_out = ref.run([out_name], feeds)[0]
        ref_times.append(time.perf_counter() - t0)
    ref_t = statistics.median(ref_times)

    err = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
    err_ref = float(np.max(np.abs(ours.astype(np.float64) - np.asarray(ref_out))))
    print(f"{name}: nodes {len(model.graph.node)}, threads {args.threads}")
    print(f"  onnxviz        {ours_t * 1000:9.1f} ms (median of {args.repeat})")
    print(
        f"  onnxruntime    {ort_t * 1000:9.1f} ms   onnxviz/onnxruntime   = {ours_t / ort_t:6.2f}x"
    )
    print(
        f"  onnx.reference {ref_t * 1000:9.1f} ms   onnxviz/onnx.reference = {ours_t / ref_t:6.2f}x"
        f" ({ref_t / ours_t:.1f}x faster)"
    )
    print(f"  max abs diff vs onnxruntime {err:.3g}, vs onnx.reference {err_ref:.3g}")
    sys.stdout.flush()


def main(args: argparse.Namespace) -> int:
    wanted = args.models.split(",")
    if "resnet50" in wanted:
        bench("ResNet-50 (light)", *resnet50(), args)
    if "bert" in wanted:
        bench(
            f"BERT-base encoder ({args.layers} layers, hidden 768, seq 128)",
            *bert_encoder(args.layers),
            args,
        )
    return 0


if __name__ == "__main__":
    assert ARGS is not None
    sys.exit(main(ARGS))
