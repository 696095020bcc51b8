"""Models for the run-panel tests and screenshots, built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def transformer_block(
    d_model: int = 32, heads: int = 4, seq: int = 8, seed: int = 0
) -> onnx.ModelProto:
    """One pre-norm encoder block: LayerNorm, multi-head self-attention, residual,
    LayerNorm, GELU feed-forward, residual.  Input ``x`` [1, seq, d_model]."""
    rng = np.random.default_rng(seed)
    dh = d_model // heads
    inits = []

    def w(name: str, *shape: int, scale: float = 0.2) -> str:
        inits.append(
            numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
        )
        return name

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    n = helper.make_node
    nodes = [
        n(
            "LayerNormalization",
            ["x", w("ln1_g", d_model), w("ln1_b", d_model)],
            ["h1"],
            name="ln1",
            axis=-1,
        ),
        n("MatMul", ["h1", w("wq", d_model, d_model)], ["q"], name="q_proj"),
        n("MatMul", ["h1", w("wk", d_model, d_model)], ["k"], name="k_proj"),
        n("MatMul", ["h1", w("wv", d_model, d_model)], ["v"], name="v_proj"),
    ]
    split = const("heads_shape", np.array([1, seq, heads, dh], np.int64))
    for t in ("q", "k", "v"):
        nodes.append(n("Reshape", [t, split], [f"{t}_r"], name=f"{t}_split"))
        perm = [0, 2, 3, 1] if t == "k" else [0, 2, 1, 3]
        nodes.append(n("Transpose", [f"{t}_r"], [f"{t}_h"], name=f"{t}_heads", perm=perm))
    nodes += [
        n("MatMul", ["q_h", "k_h"], ["scores"], name="qk"),
        n(
            "Div",
            ["scores", const("sqrt_dh", np.array(np.sqrt(dh), np.float32))],
            ["scaled"],
            name="scale",
        ),
        n("Softmax", ["scaled"], ["attn"], name="softmax", axis=-1),
        n("MatMul", ["attn", "v_h"], ["ctx_h"], name="attn_v"),
        n("Transpose", ["ctx_h"], ["ctx_t"], name="merge_t", perm=[0, 2, 1, 3]),
        n(
            "Reshape",
            ["ctx_t", const("model_shape", np.array([1, seq, d_model], np.int64))],
            ["ctx"],
            name="merge",
        ),
        n("MatMul", ["ctx", w("wo", d_model, d_model)], ["attn_out"], name="o_proj"),
        n("Add", ["x", "attn_out"], ["res1"], name="residual1"),
        n(
            "LayerNormalization",
            ["res1", w("ln2_g", d_model), w("ln2_b", d_model)],
            ["h2"],
            name="ln2",
            axis=-1,
        ),
        n("MatMul", ["h2", w("w1", d_model, 4 * d_model)], ["ff1"], name="ff_up"),
        n("Add", ["ff1", w("b1", 4 * d_model)], ["ff1b"], name="ff_bias"),
        n(
            "Div",
            ["ff1b", const("sqrt2", np.array(np.sqrt(2), np.float32))],
            ["g_div"],
            name="gelu_div",
        ),
        n("Erf", ["g_div"], ["g_erf"], name="gelu_erf"),
        n("Add", ["g_erf", const("one", np.array(1, np.float32))], ["g_add"], name="gelu_add"),
        n("Mul", ["ff1b", "g_add"], ["g_mul"], name="gelu_mul"),
        n("Mul", ["g_mul", const("half", np.array(0.5, np.float32))], ["gelu"], name="gelu_half"),
        n("MatMul", ["gelu", w("w2", 4 * d_model, d_model)], ["ff2"], name="ff_down"),
        n("Add", ["res1", "ff2"], ["y"], name="residual2"),
    ]
    graph = helper.make_graph(
        nodes,
        "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d_model])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d_model])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def with_changed_initializer(model: onnx.ModelProto, name: str, delta: float) -> onnx.ModelProto:
    """A copy of ``model`` with ``delta`` added to element 0 of one initializer."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for init in copy.graph.initializer:
        if init.name == name:
            arr = numpy_helper.to_array(init).copy()
            arr.flat[0] += delta
            init.CopyFrom(numpy_helper.from_array(arr, name))
            return copy
    raise KeyError(name)
