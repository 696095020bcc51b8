"""Synthetic models for benchmarks and large-model tests.

* `transformer_like(n_nodes)`: a torch-export-shaped encoder (scoped names such as
  ``/model/layers.3/self_attn/q_proj/MatMul``, Shape/Gather/Concat side branches that
  compute reshape targets, an attention mask feeding every layer), with tiny weights
  so that the node count, not the data, is what is measured.
* `write_big_external(folder, total_bytes)`: a model whose initializers live in one
  external data file of about ``total_bytes``, written in chunks (bounded memory).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 8
HEADS = 2
HEAD_DIM = HIDDEN // HEADS


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.rng = np.random.default_rng(0)

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def node(
        self, op: str, inputs: list[str], scope: str, n_out: int = 1, **attrs: object
    ) -> list[str]:
        name = f"{scope}/{op}_{len(self.nodes)}" if scope else f"/{op}_{len(self.nodes)}"
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs

    def linear(self, x: str, scope: str) -> str:
        w = self.init(
            f"{scope}.weight", self.rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32)
        )
        b = self.init(f"{scope}.bias", np.zeros(HIDDEN, np.float32))
        (y,) = self.node("MatMul", [x, w], scope)
        (z,) = self.node("Add", [y, b], scope)
        return z

    def layer_norm(self, x: str, scope: str) -> str:
        (mean,) = self.node("ReduceMean", [x, "axes_last"], scope, keepdims=1)
        (d,) = self.node("Sub", [x, mean], scope)
        (sq,) = self.node("Pow", [d, "two"], scope)
        (var,) = self.node("ReduceMean", [sq, "axes_last"], scope, keepdims=1)
        (ve,) = self.node("Add", [var, "eps"], scope)
        (sd,) = self.node("Sqrt", [ve], scope)
        (n,) = self.node("Div", [d, sd], scope)
        g = self.init(f"{scope}.weight", np.ones(HIDDEN, np.float32))
        b = self.init(f"{scope}.bias", np.zeros(HIDDEN, np.float32))
        (m,) = self.node("Mul", [n, g], scope)
        (o,) = self.node("Add", [m, b], scope)
        return o

    def split_heads(self, x: str, scope: str) -> str:
        # torch exports reshape targets computed at run time from Shape.
        (shape,) = self.node("Shape", [x], scope)
        (b,) = self.node("Gather", [shape, "idx0"], scope, axis=0)
        (s,) = self.node("Gather", [shape, "idx1"], scope, axis=0)
        (bu,) = self.node("Unsqueeze", [b, "axes0"], scope)
        (su,) = self.node("Unsqueeze", [s, "axes0"], scope)
        (target,) = self.node("Concat", [bu, su, "heads_dims"], scope, axis=0)
        (r,) = self.node("Reshape", [x, target], scope)
        (t,) = self.node("Transpose", [r], scope, perm=[0, 2, 1, 3])
        return t

    def attention(self, x: str, mask: str, scope: str) -> str:
        q = self.split_heads(self.linear(x, f"{scope}/q_proj"), f"{scope}/q_proj")
        k = self.split_heads(self.linear(x, f"{scope}/k_proj"), f"{scope}/k_proj")
        v = self.split_heads(self.linear(x, f"{scope}/v_proj"), f"{scope}/v_proj")
        (kt,) = self.node("Transpose", [k], scope, perm=[0, 1, 3, 2])
        (qk,) = self.node("MatMul", [q, kt], scope)
        (sc,) = self.node("Div", [qk, "scale"], scope)
        (ms,) = self.node("Add", [sc, mask], scope)
        (p,) = self.node("Softmax", [ms], scope, axis=-1)
        (ctx,) = self.node("MatMul", [p, v], scope)
        (ct,) = self.node("Transpose", [ctx], scope, perm=[0, 2, 1, 3])
        (shape,) = self.node("Shape", [x], scope)
        (r,) = self.node("Reshape", [ct, shape], scope)
        return self.linear(r, f"{scope}/o_proj")

    def mlp(self, x: str, scope: str) -> str:
        h = self.linear(x, f"{scope}/fc1")
        (d,) = self.node("Div", [h, "sqrt2"], scope)
        (e,) = self.node("Erf", [d], scope)
        (a,) = self.node("Add", [e, "one"], scope)
        (m,) = self.node("Mul", [h, a], scope)
        (g,) = self.node("Mul", [m, "half"], scope)
        return self.linear(g, f"{scope}/fc2")


def transformer_like(n_nodes: int = 100_000, *, name: str = "transformer_like") -> onnx.ModelProto:
    """A valid encoder-shaped model with about ``n_nodes`` nodes."""
    b = _Builder()
    consts = {
        "axes_last": np.array([-1], np.int64),
        "axes0": np.array([0], np.int64),
        "idx0": np.array(0, np.int64),
        "idx1": np.array(1, np.int64),
        "heads_dims": np.array([HEADS, HEAD_DIM], np.int64),
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-5, np.float32),
        "scale": np.array(np.sqrt(HEAD_DIM), np.float32),
        "sqrt2": np.array(np.sqrt(2.0), np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    for k, v in consts.items():
        b.init(k, v)
    # Attention mask [batch, seq] -> additive bias [batch, 1, 1, seq], used by every layer.
    (mu,) = b.node("Unsqueeze", ["attention_mask", "mask_axes"], "/model")
    b.init("mask_axes", np.array([1, 2], np.int64))
    (mf,) = b.node("Cast", [mu], "/model", to=TensorProto.FLOAT)
    (inv,) = b.node("Sub", ["one", mf], "/model")
    (mask,) = b.node("Mul", [inv, "neg_big"], "/model")
    b.init("neg_big", np.array(-1e4, np.float32))
    x = "hidden_states"
    i = 0
    per_layer = 0
    while i == 0 or len(b.nodes) + per_layer <= n_nodes:
        start = len(b.nodes)
        scope = f"/model/layers.{i}"
        h = b.layer_norm(x, f"{scope}/input_layernorm")
        a = b.attention(h, mask, f"{scope}/self_attn")
        (r1,) = b.node("Add", [x, a], scope)
        h2 = b.layer_norm(r1, f"{scope}/post_attention_layernorm")
        m = b.mlp(h2, f"{scope}/mlp")
        (x,) = b.node("Add", [r1, m], scope)
        per_layer = len(b.nodes) - start
        i += 1
    graph = helper.make_graph(
        b.nodes,
        name,
        [
            helper.make_tensor_value_info(
                "hidden_states", TensorProto.FLOAT, ["batch", "seq", HIDDEN]
            ),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "seq", HIDDEN])],
        b.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="onnxviz-bench"
    )
    model.ir_version = 8
    return model


def write_big_external(folder: str, total_bytes: int = 1 << 30, *, n_tensors: int = 64) -> str:
    """Write ``folder/big.onnx`` + ``folder/big.data`` (~total_bytes) without holding the
    data in memory; returns the model path."""
    os.makedirs(folder, exist_ok=True)
    per = max(1, total_bytes // n_tensors // 4)  # float32 elements per tensor
    rows = max(1, per // 1024)
    data_path = os.path.join(folder, "big.data")
    inits = []
    nodes = []
    offset = 0
    chunk = np.arange(1024 * rows, dtype=np.float32).tobytes()
    with open(data_path, "wb") as fh:
        for i in range(n_tensors):
            t = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[rows, 1024])
            t.data_location = TensorProto.EXTERNAL
            for k, v in (
                ("location", "big.data"),
                ("offset", str(offset)),
                ("length", str(len(chunk))),
            ):
                e = t.external_data.add()
                e.key, e.value = k, v
            fh.write(chunk)
            offset += len(chunk)
            inits.append(t)
            prev = "x" if i == 0 else f"y{i - 1}"
            nodes.append(helper.make_node("Add", [prev, f"w{i}"], [f"y{i}"], name=f"add_{i}"))
    graph = helper.make_graph(
        nodes,
        "big_external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 1024])],
        [helper.make_tensor_value_info(f"y{n_tensors - 1}", TensorProto.FLOAT, [rows, 1024])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(folder, "big.onnx")
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
    return path
