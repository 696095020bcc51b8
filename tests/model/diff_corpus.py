"""Model pairs with planted differences, for the diff tests (model, runtime, CLI, UI)."""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits, opset: int = 17, name: str = "g") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def mlp(layers: int = 3, width: int = 8, seed: int = 0) -> onnx.ModelProto:
    """x -> [MatMul -> Add -> Relu] * layers -> Softmax -> y, every weight distinct."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev = "x"
    for i in range(layers):
        w, b = f"w{i}", f"b{i}"
        inits.append(
            numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) * 0.5, w)
        )
        inits.append(
            numpy_helper.from_array(rng.standard_normal(width).astype(np.float32) * 0.1, b)
        )
        nodes += [
            helper.make_node("MatMul", [prev, w], [f"mm{i}"], name=f"matmul{i}"),
            helper.make_node("Add", [f"mm{i}", b], [f"add{i}"], name=f"add{i}"),
            helper.make_node("Relu", [f"add{i}"], [f"relu{i}"], name=f"relu{i}"),
        ]
        prev = f"relu{i}"
    nodes.append(helper.make_node("Softmax", [prev], ["y"], name="softmax", axis=-1))
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])],
        inits,
    )


def rename_everything(model: onnx.ModelProto, seed: int = 1) -> onnx.ModelProto:
    """Every value and node renamed (main graph and nested bodies), nodes re-sorted
    (still topologically valid: reversed independent parts are not needed; we shuffle
    and then re-sort by a random topological order)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    rnd = random.Random(seed)
    names: dict[str, str] = {}

    def new(old: str) -> str:
        if not old:
            return old
        if old not in names:
            names[old] = f"v{rnd.randrange(10**9)}_{len(names)}"
        return names[old]

    def walk(g: onnx.GraphProto) -> None:
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            vi.name = new(vi.name)
        for t in g.initializer:
            t.name = new(t.name)
        for n in g.node:
            n.name = f"n{rnd.randrange(10**9)}"
            n.input[:] = [new(x) for x in n.input]
            n.output[:] = [new(x) for x in n.output]
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
        _shuffle_topologically(g, rnd)

    walk(m.graph)
    return m


def _shuffle_topologically(g: onnx.GraphProto, rnd: random.Random) -> None:
    nodes = list(g.node)
    made = {o: i for i, n in enumerate(nodes) for o in n.output}
    deps = [{made[x] for x in n.input if x in made} for n in nodes]
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(nodes):
        ready = [i for i in range(len(nodes)) if i not in done and deps[i] <= done]
        if not ready:  # a cycle (or a node reading its own output): keep file order
            ready = [min(i for i in range(len(nodes)) if i not in done)]
        pick = rnd.choice(ready)
        order.append(pick)
        done.add(pick)
    copies = [onnx.NodeProto() for _ in nodes]
    for c, i in zip(copies, order):
        c.CopyFrom(nodes[i])
    del g.node[:]
    g.node.extend(copies)


def node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def cnn(with_bn: bool, blocks: int = 2, seed: int = 0) -> onnx.ModelProto:
    """x -> [Conv (-> BatchNormalization) -> Relu] * blocks -> y."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev, c = "x", 3
    for i in range(blocks):
        w = rng.standard_normal((4, c, 3, 3)).astype(np.float32) * 0.3
        inits.append(numpy_helper.from_array(w, f"conv{i}.w"))
        conv_out = f"conv{i}" if with_bn else f"convbn{i}"
        nodes.append(
            helper.make_node(
                "Conv", [prev, f"conv{i}.w"], [conv_out], name=f"conv{i}", pads=[1, 1, 1, 1]
            )
        )
        if with_bn:
            for p, v in (
                ("scale", rng.uniform(0.5, 1.5, 4)),
                ("bias", rng.standard_normal(4) * 0.1),
                ("mean", rng.standard_normal(4) * 0.1),
                ("var", rng.uniform(0.5, 1.5, 4)),
            ):
                inits.append(numpy_helper.from_array(v.astype(np.float32), f"bn{i}.{p}"))
            nodes.append(
                helper.make_node(
                    "BatchNormalization",
                    [conv_out] + [f"bn{i}.{p}" for p in ("scale", "bias", "mean", "var")],
                    [f"convbn{i}"],
                    name=f"bn{i}",
                )
            )
        nodes.append(helper.make_node("Relu", [f"convbn{i}"], [f"relu{i}"], name=f"relu{i}"))
        prev, c = f"relu{i}", 4
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )


def fold_batchnorm(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each Conv -> BatchNormalization folded into one Conv with a bias
    (what onnxsim and optimizers do), the Convs renamed."""
    m = copy(model)
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    out_nodes, new_inits = [], []
    bn_of = {n.input[0]: n for n in g.node if n.op_type == "BatchNormalization"}
    for n in g.node:
        if n.op_type == "BatchNormalization":
            continue
        if n.op_type == "Conv" and n.output[0] in bn_of:
            bn = bn_of[n.output[0]]
            s, b, mean, var = (inits[x] for x in bn.input[1:])
            k = s / np.sqrt(var + 1e-5)
            w = inits[n.input[1]] * k[:, None, None, None]
            bias = b - mean * k
            wn, bname = f"fused_{n.name}.w", f"fused_{n.name}.b"
            new_inits += [
                numpy_helper.from_array(w.astype(np.float32), wn),
                numpy_helper.from_array(bias.astype(np.float32), bname),
            ]
            fused = helper.make_node(
                "Conv", [n.input[0], wn, bname], [bn.output[0]], name=f"fused_{n.name}"
            )
            fused.attribute.extend(n.attribute)
            out_nodes.append(fused)
        else:
            out_nodes.append(n)
    used = {x for n in out_nodes for x in n.input}
    kept = [t for t in g.initializer if t.name in used]
    del g.node[:]
    g.node.extend(out_nodes)
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    return m


def layernorm(decomposed: bool, width: int = 8) -> onnx.ModelProto:
    """x -> MatMul -> LayerNormalization (or its decomposition) -> Relu -> y."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), "w"),
        numpy_helper.from_array(np.ones(width, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(width, np.float32), "beta"),
    ]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj")]
    if decomposed:
        inits += [
            numpy_helper.from_array(np.array([-1], np.int64), "axes"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
        ]
        nodes += [
            helper.make_node("ReduceMean", ["h", "axes"], ["mu"], name="ln.mean"),
            helper.make_node("Sub", ["h", "mu"], ["d"], name="ln.sub"),
            helper.make_node("Pow", ["d", "two"], ["d2"], name="ln.pow"),
            helper.make_node("ReduceMean", ["d2", "axes"], ["var"], name="ln.var"),
            helper.make_node("Add", ["var", "eps"], ["ve"], name="ln.add_eps"),
            helper.make_node("Sqrt", ["ve"], ["sd"], name="ln.sqrt"),
            helper.make_node("Div", ["d", "sd"], ["nrm"], name="ln.div"),
            helper.make_node("Mul", ["nrm", "gamma"], ["sc"], name="ln.mul"),
            helper.make_node("Add", ["sc", "beta"], ["ln"], name="ln.add"),
        ]
    else:
        nodes.append(
            helper.make_node(
                "LayerNormalization",
                ["h", "gamma", "beta"],
                ["ln"],
                name="ln",
                axis=-1,
                epsilon=1e-5,
            )
        )
    nodes.append(helper.make_node("Relu", ["ln"], ["y"], name="relu"))
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])],
        inits,
        opset=18,
    )


def loop_model(alpha: float = 1.0) -> onnx.ModelProto:
    """y = x after 3 iterations of a Loop whose body does acc = acc * alpha + 1 (Mul, Add)
    and an If in the body choosing Relu or Neg."""
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["t"], ["r_then"], name="then_relu")],
        "then",
        [],
        [helper.make_tensor_value_info("r_then", TensorProto.FLOAT, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["t"], ["r_else"], name="else_neg")],
        "else",
        [],
        [helper.make_tensor_value_info("r_else", TensorProto.FLOAT, [2])],
    )
    body = helper.make_graph(
        [
            helper.make_node(
                "Constant",
                [],
                ["alpha"],
                name="alpha",
                value=numpy_helper.from_array(np.array(alpha, np.float32)),
            ),
            helper.make_node("Mul", ["acc", "alpha"], ["m"], name="mul"),
            helper.make_node(
                "Constant",
                [],
                ["one"],
                name="one",
                value=numpy_helper.from_array(np.array(1.0, np.float32)),
            ),
            helper.make_node("Add", ["m", "one"], ["t"], name="add"),
            helper.make_node(
                "If", ["cond"], ["acc_out"], name="choose", then_branch=then_g, else_branch=else_g
            ),
            helper.make_node("Identity", ["cond"], ["cond_out"], name="keep"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2]),
        ],
    )
    return _model(
        [helper.make_node("Loop", ["n", "c", "x"], ["y"], name="loop", body=body)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [
            numpy_helper.from_array(np.array(3, np.int64), "n"),
            numpy_helper.from_array(np.array(True), "c"),
        ],
    )


def quantize_qdq(
    model: onnx.ModelProto, x: np.ndarray, *, bad_value: str | None = None, bad_scale: float = 0.0
) -> onnx.ModelProto:
    """A QDQ version of an fp32 model (as quantization tools write it): every weight
    int8 with a DequantizeLinear, every activation that feeds a MatMul or Conv passed
    through QuantizeLinear -> DequantizeLinear with a scale calibrated on ``x``.
    ``bad_value``: an activation given a scale ``bad_scale`` times too small, so it
    saturates (the planted quantization fault the numeric diff must name)."""
    from onnx.reference import ReferenceEvaluator  # test-only: calibrates the scales

    m = copy(model)
    g = m.graph
    acts = [n.input[0] for n in g.node if n.op_type in ("MatMul", "Conv")]
    probe = copy(model)
    probe.graph.output.extend(
        onnx.ValueInfoProto(name=a) for a in acts if a not in {o.name for o in probe.graph.output}
    )
    ref = ReferenceEvaluator(probe)
    outs = dict(zip([o.name for o in probe.graph.output], ref.run(None, {g.input[0].name: x})))
    outs[g.input[0].name] = x
    inits = {t.name: t for t in g.initializer}
    new_nodes, new_inits = [], []
    weight_names = {n.input[1] for n in g.node if n.op_type in ("MatMul", "Conv")}
    for name in weight_names:
        w = numpy_helper.to_array(inits[name])
        scale = float(np.abs(w).max() / 127) or 1.0
        q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
        new_inits += [
            numpy_helper.from_array(q, name + "_q"),
            numpy_helper.from_array(np.array(scale, np.float32), name + "_scale"),
            numpy_helper.from_array(np.array(0, np.int8), name + "_zp"),
        ]
        new_nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [name + "_q", name + "_scale", name + "_zp"],
                [name + "_dq"],
                name=name + "_DequantizeLinear",
            )
        )
    renames: dict[tuple[str, int], str] = {}
    for a in acts:
        scale = float(np.abs(outs[a]).max() / 127) or 1.0
        if a == bad_value:
            scale *= bad_scale
        new_inits += [
            numpy_helper.from_array(np.array(scale, np.float32), a + "_scale"),
            numpy_helper.from_array(np.array(0, np.int8), a + "_zp"),
        ]
        new_nodes += [
            helper.make_node(
                "QuantizeLinear",
                [a, a + "_scale", a + "_zp"],
                [a + "_q"],
                name=a + "_QuantizeLinear",
            ),
            helper.make_node(
                "DequantizeLinear",
                [a + "_q", a + "_scale", a + "_zp"],
                [a + "_dqa"],
                name=a + "_DequantizeLinear",
            ),
        ]
    for n in g.node:
        if n.op_type in ("MatMul", "Conv"):
            n.input[0] = n.input[0] + "_dqa"
            n.input[1] = n.input[1] + "_dq"
    del renames
    kept = [t for t in g.initializer if t.name not in weight_names]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(new_nodes + nodes)
    _shuffle_topologically(g, random.Random(0))
    return m
