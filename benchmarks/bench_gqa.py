"""One com.microsoft GroupQueryAttention node: our kernel's numpy path, its compiled
common case (native/_gqa.c) and onnxruntime's node, in the same run.

    python benchmarks/bench_gqa.py [--shapes tiny_prompt,...] [--repeat 300]

Shapes (packed QKV, rotary from constant cos/sin caches, causal, as onnxruntime-genai
exports a Llama): the committed tiny Llama (4 heads / 2 KV heads of 16, 4-token prompt,
and a decode step after it), the llama1k family model (16 / 4 heads of 64: 64-token
prompt, decode after 64), a 64-token prompt of 16 heads of 64 without grouping, and
past contrib_gqa._WORK_LIMIT (where the numpy path runs, so both columns are it) a long
decode (32 / 8 heads of 128 after 1024), a 512-token prompt of those heads and a chunk of
128 tokens after 256.  Microseconds per call, best of --repeat, one thread; ours is the
kernel function as the interpreter calls it.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnxviz.model.tensors import to_array
from onnxviz.runtime import native
from onnxviz.runtime.kernels import contrib_gqa
from onnxviz.runtime.registry import KernelContext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_norm import best_us  # the norm benchmark's best-of-n timing

# name: (batch, new tokens, past, heads, kv heads, head size)
SHAPES = {
    "tiny_prompt": (1, 4, 0, 4, 2, 16),
    "tiny_decode": (1, 1, 4, 4, 2, 16),
    "llama1k_prompt": (1, 64, 0, 16, 4, 64),
    "llama1k_decode": (1, 1, 64, 16, 4, 64),
    "mha_prompt": (1, 64, 0, 16, 16, 64),
    "long_decode": (1, 1, 1024, 32, 8, 128),
    "long_prompt": (1, 512, 0, 32, 8, 128),
    "chunk_prompt": (1, 128, 256, 16, 4, 64),
}


def _case(shape: tuple[int, ...]) -> tuple[list[np.ndarray | None], dict[str, Any]]:
    b, s, past, n, kv, h = shape
    rng = np.random.default_rng(0)
    positions = past + s + 16
    angles = np.arange(positions)[:, None] / 10000 ** (np.arange(h // 2) / (h // 2))
    # initializers as the interpreter holds them (read-only: the tables are made once)
    cos = to_array(numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"))
    sin = to_array(numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"))
    qkv = rng.standard_normal((b, s, (n + 2 * kv) * h)).astype(np.float32)
    past_k = rng.standard_normal((b, kv, past, h)).astype(np.float32)
    past_v = rng.standard_normal((b, kv, past, h)).astype(np.float32)
    inputs = [
        qkv, None, None, past_k, past_v,
        np.full(b, past + s - 1, np.int32), np.array(past + s, np.int32), cos, sin,
    ]  # fmt: skip
    return inputs, {"num_heads": n, "kv_num_heads": kv, "do_rotary": 1}


def _ours(inputs: list[np.ndarray | None], attrs: dict[str, Any]) -> Callable[[], Any]:
    ctx = KernelContext(n_outputs=3)
    return lambda: contrib_gqa.group_query_attention(ctx, *inputs, **attrs)


def _onnxruntime(inputs: list[np.ndarray | None], attrs: dict[str, Any]) -> Callable[[], Any]:
    import onnxruntime as ort

    names = ["query", "", "", "past_key", "past_value", "seqlens_k", "total_len", "cos", "sin"]
    node = helper.make_node(
        "GroupQueryAttention", names, ["out", "present_key", "present_value"],
        domain="com.microsoft", **attrs,
    )  # fmt: skip
    feeds = {name: x for name, x in zip(names, inputs) if name}
    graph_inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in feeds.items()
    ]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output]
    model = helper.make_model(
        helper.make_graph([node], "gqa", graph_inputs, outputs),
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
    )
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    compiled = contrib_gqa._COMPILED
    if compiled is None:
        raise SystemExit("the compiled kernel is off or not built (ONNXVIZ_NATIVE, setup.py)")
    level = native.level()
    print(f"level {native.LEVEL_NAMES[level] if level is not None else 'off'}; us per call")
    print(f"{'shape':<16} {'numpy':>9} {'compiled':>9} {'onnxruntime':>12} {'ratio':>7}")
    for name in args.shapes.split(","):
        inputs, attrs = _case(SHAPES[name])
        contrib_gqa._COMPILED = None
        numpy_us = best_us(_ours(inputs, attrs), args.repeat)
        contrib_gqa._COMPILED = compiled
        compiled_us = best_us(_ours(inputs, attrs), args.repeat)
        ort_us = best_us(_onnxruntime(inputs, attrs), args.repeat)
        print(
            f"{name:<16} {numpy_us:9.1f} {compiled_us:9.1f} {ort_us:12.1f} "
            f"{compiled_us / ort_us:6.2f}x"
        )


if __name__ == "__main__":
    main()
