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
import tempfile
from pathlib import Path

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


def transformer_file(n_nodes: int, folder: str | Path | None = None) -> Path:
    """`transformer_like(n_nodes)` saved once in ``folder`` (default: the temp folder's
    onnxviz_bench) and reused by every benchmark that opens it from disk."""
    where = Path(folder) if folder is not None else Path(tempfile.gettempdir()) / "onnxviz_bench"
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"transformer_{n_nodes}.onnx"
    if not path.exists():
        onnx.save(transformer_like(n_nodes), str(path))
    return path


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


# -- a Llama-2-shaped decoder as torch exports it (issue 19: "Canvas at LLM scale") ----------
LLAMA_HIDDEN, LLAMA_FFN, LLAMA_HEADS, LLAMA_VOCAB = 4096, 11008, 32, 32000


class _LlamaBuilder(_Builder):
    """Constants as Constant nodes next to their use and shapes computed from Shape, as
    torch.onnx.export writes them (that is where most of an exported Llama's 8k nodes
    come from); weights with Llama-2-7B's dimensions, as references into one sparse
    external data file (real sizes, no disk blocks)."""

    def __init__(self, data_name: str) -> None:
        super().__init__()
        self.data_name = data_name
        self.offset = 0
        self.cache_inputs: list[str] = []
        self.cache_outputs: list[str] = []

    def weight(self, name: str, dims: list[int]) -> str:
        t = TensorProto(name=name, data_type=TensorProto.FLOAT16, dims=dims)
        t.data_location = TensorProto.EXTERNAL
        n = int(np.prod(dims)) * 2
        for k, v in (
            ("location", self.data_name),
            ("offset", str(self.offset)),
            ("length", str(n)),
        ):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.offset += (n + 4095) // 4096 * 4096
        self.inits.append(t)
        return name

    def const(self, scope: str, value: np.ndarray) -> str:
        (out,) = self.node("Constant", [], scope, value=numpy_helper.from_array(value))
        return out

    def rms_norm(self, x: str, scope: str) -> str:
        (x,) = self.node("Cast", [x], scope, to=TensorProto.FLOAT)  # fp16 models norm in fp32
        (sq,) = self.node("Pow", [x, self.const(scope, np.array(2.0, np.float32))], scope)
        axes = self.const(scope, np.array([-1], np.int64))
        (var,) = self.node("ReduceMean", [sq, axes], scope, keepdims=1)
        (ve,) = self.node("Add", [var, self.const(scope, np.array(1e-5, np.float32))], scope)
        (sd,) = self.node("Sqrt", [ve], scope)
        (inv,) = self.node("Reciprocal", [sd], scope)
        (n,) = self.node("Mul", [x, inv], scope)
        (n16,) = self.node("Cast", [n], scope, to=TensorProto.FLOAT16)
        (o,) = self.node("Mul", [self.weight(f"{scope}.weight", [LLAMA_HIDDEN]), n16], scope)
        return o

    def dim(self, x: str, index: int, scope: str) -> str:
        (shape,) = self.node("Shape", [x], scope)
        (d,) = self.node("Gather", [shape, self.const(scope, np.array(index, np.int64))], scope)
        (u,) = self.node("Unsqueeze", [d, self.const(scope, np.array([0], np.int64))], scope)
        return u

    def reshape(self, x: str, like: str, tail: list[int], scope: str) -> str:
        dims = [self.dim(like, 0, scope), self.dim(like, 1, scope)]
        (target,) = self.node(
            "Concat", [*dims, self.const(scope, np.array(tail, np.int64))], scope, axis=0
        )
        (r,) = self.node("Reshape", [x, target], scope)
        return r

    def rotate(self, x: str, cos: str, sin: str, scope: str) -> str:
        # rotate_half: x[..., : x.shape[-1] // 2] and x[..., x.shape[-1] // 2 :]
        (shape,) = self.node("Shape", [x], scope)
        (last,) = self.node("Gather", [shape, self.const(scope, np.array(-1, np.int64))], scope)
        (half,) = self.node("Div", [last, self.const(scope, np.array(2, np.int64))], scope)
        (half,) = self.node("Unsqueeze", [half, self.const(scope, np.array([0], np.int64))], scope)

        def part(start: str, end: str) -> str:
            axes_steps = [self.const(scope, np.array([v], np.int64)) for v in (-1, 1)]
            (s,) = self.node("Slice", [x, start, end, *axes_steps], scope)
            return s

        zero = self.const(scope, np.array([0], np.int64))
        big = self.const(scope, np.array([2**62], np.int64))
        x1, x2 = part(zero, half), part(half, big)
        (neg,) = self.node("Neg", [x2], scope)
        (rot,) = self.node("Concat", [neg, x1], scope, axis=-1)
        (a,) = self.node("Mul", [x, cos], scope)
        (b,) = self.node("Mul", [rot, sin], scope)
        (o,) = self.node("Add", [a, b], scope)
        return o

    def attention(self, x: str, mask: str, scope: str) -> str:  # type: ignore[override]
        head = LLAMA_HIDDEN // LLAMA_HEADS
        heads = {}
        for p in ("q_proj", "k_proj", "v_proj"):
            w = self.weight(f"{scope}/{p}.weight", [LLAMA_HIDDEN, LLAMA_HIDDEN])
            (y,) = self.node("MatMul", [x, w], f"{scope}/{p}")
            r = self.reshape(y, x, [LLAMA_HEADS, head], f"{scope}/{p}")
            (heads[p],) = self.node("Transpose", [r], scope, perm=[0, 2, 1, 3])
        # the KV cache: this layer's past keys and values come in, the present go out
        layer = scope.split("/")[2].split(".")[1]
        for p, kind in (("k_proj", "key"), ("v_proj", "value")):
            past = f"past_key_values.{layer}.{kind}"
            self.cache_inputs.append(past)
            (heads[p],) = self.node("Concat", [past, heads[p]], scope, axis=-2)
            self.cache_outputs.append(heads[p])
        rotary = f"{scope}/rotary_emb"
        cos_sin = []
        kv_len = self.dim(heads["v_proj"], 2, rotary)
        for table in ("cos_cached", "sin_cached"):
            ins = [table, self.const(rotary, np.array([0], np.int64)), kv_len]
            ins.append(self.const(rotary, np.array([0], np.int64)))
            ins.append(self.const(rotary, np.array([1], np.int64)))
            (sl,) = self.node("Slice", ins, rotary)
            (c,) = self.node("Cast", [sl], rotary, to=TensorProto.FLOAT16)
            (g,) = self.node("Gather", [c, "position_ids"], rotary, axis=0)
            (u,) = self.node("Unsqueeze", [g, self.const(rotary, np.array([1], np.int64))], rotary)
            cos_sin.append(u)
        q = self.rotate(heads["q_proj"], *cos_sin, scope)
        k = self.rotate(heads["k_proj"], *cos_sin, scope)
        (kt,) = self.node("Transpose", [k], scope, perm=[0, 1, 3, 2])
        (qk,) = self.node("MatMul", [q, kt], scope)
        scale = self.const(scope, np.array(np.sqrt(head), np.float16))
        (sc,) = self.node("Div", [qk, scale], scope)
        # the causal mask cut to this step's query and key lengths
        ends = [self.dim(q, 2, scope), kv_len]
        (end,) = self.node("Concat", ends, scope, axis=0)
        zeros = self.const(scope, np.array([0, 0], np.int64))
        axes = self.const(scope, np.array([2, 3], np.int64))
        (cut,) = self.node("Slice", [mask, zeros, end, axes], scope)
        (ms,) = self.node("Add", [sc, cut], scope)
        (up,) = self.node("Cast", [ms], scope, to=TensorProto.FLOAT)
        (p,) = self.node("Softmax", [up], scope, axis=-1)
        (down,) = self.node("Cast", [p], scope, to=TensorProto.FLOAT16)
        (ctx,) = self.node("MatMul", [down, heads["v_proj"]], scope)
        (ct,) = self.node("Transpose", [ctx], scope, perm=[0, 2, 1, 3])
        r = self.reshape(ct, x, [LLAMA_HIDDEN], scope)
        w = self.weight(f"{scope}/o_proj.weight", [LLAMA_HIDDEN, LLAMA_HIDDEN])
        (o,) = self.node("MatMul", [r, w], f"{scope}/o_proj")
        return o

    def mlp(self, x: str, scope: str) -> str:  # type: ignore[override]
        gw = self.weight(f"{scope}/gate_proj.weight", [LLAMA_HIDDEN, LLAMA_FFN])
        (g,) = self.node("MatMul", [x, gw], f"{scope}/gate_proj")
        (sg,) = self.node("Sigmoid", [g], f"{scope}/act_fn")
        (silu,) = self.node("Mul", [g, sg], f"{scope}/act_fn")
        uw = self.weight(f"{scope}/up_proj.weight", [LLAMA_HIDDEN, LLAMA_FFN])
        (u,) = self.node("MatMul", [x, uw], f"{scope}/up_proj")
        (gu,) = self.node("Mul", [silu, u], scope)
        dw = self.weight(f"{scope}/down_proj.weight", [LLAMA_FFN, LLAMA_HIDDEN])
        (d,) = self.node("MatMul", [gu, dw], f"{scope}/down_proj")
        return d


def write_llama2_like(folder: str, layers: int = 32) -> str:
    """A Llama-2-7B-shaped decoder as torch exports it (embedding, 32 layers of RMSNorm,
    rotary attention with a causal mask and SwiGLU MLP, final norm, lm_head), written to
    ``folder/llama2_like.onnx`` with its 13 GB of fp16 weights in a sparse data file.
    About 8,000 nodes at 32 layers."""
    data_name = "llama2_like.onnx.data"
    b = _LlamaBuilder(data_name)
    emb = b.weight("model.embed_tokens.weight", [LLAMA_VOCAB, LLAMA_HIDDEN])
    (x,) = b.node("Gather", [emb, "input_ids"], "/model/embed_tokens", axis=0)
    for table in ("cos_cached", "sin_cached"):
        b.weight(table, [4096, LLAMA_HIDDEN // LLAMA_HEADS])
    # the causal mask [1, 1, seq, seq] from the input's length, as exports build it
    m = "/model"
    seq = b.dim("input_ids", 1, m)
    (sq,) = b.node("Concat", [seq, seq], m, axis=0)
    (filled,) = b.node(
        "ConstantOfShape",
        [sq],
        m,
        value=numpy_helper.from_array(np.array([-65504.0], np.float16)),
    )
    (tri,) = b.node("Trilu", [filled, b.const(m, np.array(1, np.int64))], m, upper=1)
    (mask,) = b.node("Unsqueeze", [tri, b.const(m, np.array([0, 1], np.int64))], m)
    for i in range(layers):
        scope = f"/model/layers.{i}"
        h = b.rms_norm(x, f"{scope}/input_layernorm")
        a = b.attention(h, mask, f"{scope}/self_attn")
        (r1,) = b.node("Add", [x, a], scope)
        h2 = b.rms_norm(r1, f"{scope}/post_attention_layernorm")
        mo = b.mlp(h2, f"{scope}/mlp")
        (x,) = b.node("Add", [r1, mo], scope)
    h = b.rms_norm(x, "/model/norm")
    (logits,) = b.node(
        "MatMul", [h, b.weight("lm_head.weight", [LLAMA_HIDDEN, LLAMA_VOCAB])], "/lm_head"
    )
    graph = helper.make_graph(
        b.nodes,
        "llama2_like",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]),
        ]
        + [
            helper.make_tensor_value_info(name, TensorProto.FLOAT16, ["batch", 32, "past", 128])
            for name in b.cache_inputs
        ],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT16, ["batch", "seq", LLAMA_VOCAB])]
        + [
            helper.make_tensor_value_info(name, TensorProto.FLOAT16, ["batch", 32, "total", 128])
            for name in b.cache_outputs
        ],
        b.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="onnxviz-bench"
    )
    model.ir_version = 8
    with open(os.path.join(folder, data_name), "wb") as fh:
        fh.truncate(b.offset)  # sparse: the size is real, the disk blocks are not
    path = os.path.join(folder, "llama2_like.onnx")
    onnx.save(model, path)
    return path
