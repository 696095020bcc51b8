"""One failing and one passing model per diagnostic code.

`CASES[code]` is a pair of zero-argument builders (bad, good): the bad model must make
`validate` report `code`, the good one must not.  Models are built with onnx.helper so
each reads as the situation the rule is about.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import AttributeProto, ModelProto, TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
Builder = Callable[[], ModelProto]


def vi(name: str, elem: int = F, shape: Sequence[int | str] | None = (2,)) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto] = (),
    outputs: Sequence[onnx.ValueInfoProto] = (),
    inits: Sequence[TensorProto] = (),
    *,
    opset: int = 17,
    ir: int = 10,
    opsets: Sequence[tuple[str, int]] = (),
    functions: Sequence[onnx.FunctionProto] = (),
    value_info: Sequence[onnx.ValueInfoProto] = (),
    name: str = "g",
    sparse: Sequence[onnx.SparseTensorProto] = (),
) -> ModelProto:
    g = helper.make_graph(
        list(nodes),
        name,
        list(inputs),
        list(outputs),
        list(inits),
        value_info=list(value_info),
        sparse_initializer=list(sparse),
    )
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in opsets]
    m = helper.make_model(g, opset_imports=imports, functions=list(functions))
    m.ir_version = ir
    return m


def relu(x: str = "x", y: str = "y", name: str = "") -> onnx.NodeProto:
    return helper.make_node("Relu", [x], [y], name=name)


def simple(**kw: object) -> ModelProto:
    """x -> Relu -> y, valid."""
    return model([relu()], [vi("x")], [vi("y")], **kw)  # type: ignore[arg-type]


def init(name: str, values: Sequence[float] = (1.0, 2.0), dtype: type = np.float32) -> TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


# -- G ---------------------------------------------------------------------------------------
def g001(bad: bool) -> ModelProto:
    second = "y" if bad else "z"
    return model([relu("x", "y"), relu("x", second)], [vi("x")], [vi("y")])


def g002(bad: bool) -> ModelProto:
    nodes = [relu("x", "t", "a"), relu("t", "y", "b")]
    return model(nodes[::-1] if bad else nodes, [vi("x")], [vi("y")])


def g003(bad: bool) -> ModelProto:
    if bad:
        nodes = [
            helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
            helper.make_node("Relu", ["a"], ["b"], name="n2"),
            relu("b", "y", "n3"),
        ]
    else:
        nodes = [
            helper.make_node("Add", ["x", "x"], ["a"], name="n1"),
            helper.make_node("Relu", ["a"], ["b"], name="n2"),
            relu("b", "y", "n3"),
        ]
    return model(nodes, [vi("x")], [vi("y")])


def g004(bad: bool) -> ModelProto:
    return model([relu("nope" if bad else "x", "y")], [vi("x")], [vi("y")])


def g005(bad: bool) -> ModelProto:
    return model([relu()], [vi("x")], [vi("y"), vi("missing")] if bad else [vi("y")])


def g006(bad: bool) -> ModelProto:
    if bad:
        node = helper.make_node("Add", ["x", ""], ["y"])
    else:
        node = helper.make_node("Clip", ["x", "", "m"], ["y"])
    return model([node], [vi("x"), vi("m", shape=())], [vi("y")])


def g007(bad: bool) -> ModelProto:
    m = simple()
    extra = m.graph.input.add()
    extra.CopyFrom(vi("" if bad else "unused"))
    return m


def g008(bad: bool) -> ModelProto:
    m = simple()
    if bad:
        m.graph.input[0].ClearField("type")
    return m


def g009(bad: bool) -> ModelProto:
    return model([relu()], [vi("x", shape=None if bad else ["N"])], [vi("y", shape=["N"])])


def g010(bad: bool) -> ModelProto:
    return model([relu()], [vi("x")], [vi("y")], name="" if bad else "g")


# -- N ---------------------------------------------------------------------------------------
def _if_model(branch_out: str, inner_name: str = "t") -> ModelProto:
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], [inner_name])], "then", [], [vi(inner_name, shape=None)]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["u"])], "else", [], [vi("u", shape=None)]
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")
    del branch_out
    return model([node], [vi("c", TensorProto.BOOL, ()), vi("x")], [vi("y")])


def n001(bad: bool) -> ModelProto:
    # The then-branch's node output reuses the outer input name 'x'... via 'c'.
    return _if_model("", inner_name="c" if bad else "t")


def _loop_model(body_init: str) -> ModelProto:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Add", ["v", "k"], ["v_out"]),
        ],
        "body",
        [vi("i", I64, ()), vi("cond", TensorProto.BOOL, ()), vi("v")],
        [vi("cond_out", TensorProto.BOOL, ()), vi("v_out")],
        [init(body_init)],
    )
    node = helper.make_node("Loop", ["n", "", "v0"], ["y"], body=body, name="loop")
    return model([node], [vi("n", I64, ()), vi("v0"), vi("k")], [vi("y")])


def n002(bad: bool) -> ModelProto:
    return _loop_model("v" if bad else "w")


def n003(bad: bool) -> ModelProto:
    return model([relu("x", "t", "n"), relu("t", "y", "n" if bad else "m")], [vi("x")], [vi("y")])


def n004(bad: bool) -> ModelProto:
    t = "/layer.0/Relu_output_0" if bad else "layer0_relu"
    return model([relu("x", t), relu(t, "y")], [vi("x")], [vi("y")])


def n005(bad: bool) -> ModelProto:
    return model(
        [relu()], [vi("x", shape=["batch size" if bad else "batch"])], [vi("y", shape=["batch"])]
    )


def n006(bad: bool) -> ModelProto:
    return model([relu()], [vi("x", shape=["*" if bad else "N"])], [vi("y", shape=["N"])])


def n007(bad: bool) -> ModelProto:
    inputs = [vi("x")] if bad else [vi("x"), vi("w")]
    node = helper.make_node("Add", ["x", "w"], ["y"])
    return model([node], inputs, [vi("y")], [init("w")], opset=8, ir=3)


def n008(bad: bool) -> ModelProto:
    # A node name that is not UTF-8 (protobuf hands it over as bytes).
    m = simple()
    m.graph.node[0].name = "NAMEXX"
    if bad:
        m = with_raw_string(m, b"NAMEXX", b"NA\xffXXX")
    return m


def with_raw_string(m: ModelProto, old: bytes, new: bytes) -> ModelProto:
    """``m`` with the string ``old`` replaced by the raw bytes ``new`` (same length), which
    protobuf cannot be told to write through its Python API when they are not UTF-8."""
    assert len(old) == len(new)
    data = m.SerializeToString().replace(old, new)
    out = ModelProto()
    out.ParseFromString(data)
    return out


# -- O ---------------------------------------------------------------------------------------
def o001(bad: bool) -> ModelProto:
    m = simple()
    if bad:
        m.ClearField("opset_import")
    return m


def o002(bad: bool) -> ModelProto:
    m = simple()
    m.graph.node[0].domain = "com.example" if bad else ""
    return m


def o003(bad: bool) -> ModelProto:
    m = simple()
    m.graph.node[0].op_type = "Relux" if bad else "Relu"
    return m


def o004(bad: bool) -> ModelProto:
    node = helper.make_node("Custom", ["x"], ["y"], domain="com.example") if bad else relu()
    return model([node], [vi("x")], [vi("y")], opsets=[("com.example", 1)])


def o005(bad: bool) -> ModelProto:
    node = helper.make_node(
        "Upsample" if bad else "Resize", ["x", "s"] if bad else ["x", "", "s"], ["y"]
    )
    return model(
        [node],
        [vi("x", shape=(1, 2)), vi("s", shape=(2,))],
        [vi("y", shape=(2, 4))],
        opset=10 if bad else 13,
    )


def o006(bad: bool) -> ModelProto:
    node = helper.make_node("Relu", ["x", "x"] if bad else ["x"], ["y"])
    return model([node], [vi("x")], [vi("y")])


def o007(bad: bool) -> ModelProto:
    node = helper.make_node("Relu", ["x"], ["y", "z"] if bad else ["y"])
    return model([node], [vi("x")], [vi("y")])


def o008(bad: bool) -> ModelProto:
    node = helper.make_node("Relu", ["x"], ["y"], **({"alpha": 0.5} if bad else {}))
    return model([node], [vi("x")], [vi("y")])


def o009(bad: bool) -> ModelProto:
    node = helper.make_node("Concat", ["x", "x"], ["y"], **({} if bad else {"axis": 0}))
    return model([node], [vi("x")], [vi("y", shape=(4,))])


def o010(bad: bool) -> ModelProto:
    node = helper.make_node("Concat", ["x", "x"], ["y"], axis=0.0 if bad else 0)
    return model([node], [vi("x")], [vi("y", shape=(4,))])


def o011(bad: bool) -> ModelProto:
    node = helper.make_node("Concat", ["x", "x"], ["y"], axis=0)
    if bad:
        node.attribute[0].floats.append(1.0)
    return model([node], [vi("x")], [vi("y", shape=(4,))])


def _fn_with_ref(ref: str, declared: Sequence[str] = ("a",)) -> onnx.FunctionProto:
    body = helper.make_node("Concat", ["p", "p"], ["q"])
    attr = AttributeProto(name="axis", type=AttributeProto.INT, ref_attr_name=ref)
    body.attribute.append(attr)
    return helper.make_function(
        "local", "Cat2", ["p"], ["q"], [body], [helper.make_opsetid("", 17)], list(declared)
    )


def o012(bad: bool) -> ModelProto:
    node = helper.make_node("Concat", ["x", "x"], ["y"])
    if bad:
        node.attribute.append(
            AttributeProto(name="axis", type=AttributeProto.INT, ref_attr_name="a")
        )
    else:
        node.attribute.append(helper.make_attribute("axis", 0))
    return model([node], [vi("x")], [vi("y", shape=(4,))])


def o013(bad: bool) -> ModelProto:
    fn = _fn_with_ref("b" if bad else "a")
    call = helper.make_node("Cat2", ["x"], ["y"], domain="local", a=0)
    return model([call], [vi("x")], [vi("y", shape=(4,))], opsets=[("local", 1)], functions=[fn])


def o014(bad: bool) -> ModelProto:
    node = helper.make_node("Concat", ["x", "x"], ["y"], axis=0)
    if bad:
        node.attribute.append(helper.make_attribute("axis", 0))
    return model([node], [vi("x")], [vi("y", shape=(4,))])


def o015(bad: bool) -> ModelProto:
    return simple(opset=999 if bad else 17)


def o016(bad: bool) -> ModelProto:
    node = helper.make_node("Concat", ["x", "x"], ["y"], axis=0)
    if bad:
        node.attribute[0].name = ""
    return model([node], [vi("x")], [vi("y", shape=(4,))])


def o017(bad: bool) -> ModelProto:
    # Two versions of one domain: which Relu is meant is undefined.
    return simple(opsets=[("", 16)] if bad else [("com.example", 1)])


def o020(bad: bool) -> ModelProto:
    # onnxruntime-genai's RMSNorm: an onnxruntime extension of the default domain.
    op = "SimplifiedLayerNormalization" if bad else "LayerNormalization"
    node = helper.make_node(op, ["x", "scale"], ["y"], axis=-1, epsilon=1e-5)
    return model([node], [vi("x")], [vi("y")], [init("scale")])


def o021(bad: bool) -> ModelProto:
    # An onnxruntime contrib operator, for the onnx target: runs in onnxruntime only.
    node = (
        helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")
        if bad
        else helper.make_node("Gelu", ["x"], ["y"])
    )
    return model([node], [vi("x")], [vi("y")], opset=20, opsets=[("com.microsoft", 1)])


def o022(bad: bool) -> ModelProto:
    # For the onnxruntime target (test_rules.ONNXRUNTIME_TARGET): a contrib op it lacks.
    node = helper.make_node(
        "FastGeluu" if bad else "FastGelu", ["x"], ["y"], domain="com.microsoft"
    )
    return model([node], [vi("x")], [vi("y")], opsets=[("com.microsoft", 1)])


def o019(bad: bool) -> ModelProto:
    # skl2onnx 1.20 writes ('', 17) twice: redundant, the same opset either way.
    return simple(opsets=[("", 17)] if bad else [("com.example", 1)])


def o018(bad: bool) -> ModelProto:
    fn = helper.make_function(
        "local",
        "F",
        ["a"],
        ["b"],
        [helper.make_node("Relu", ["a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    call = helper.make_node("F", ["x", "x"] if bad else ["x"], ["y"], domain="local")
    return model([call], [vi("x")], [vi("y")], opsets=[("local", 1)], functions=[fn])


# -- T ---------------------------------------------------------------------------------------
def t001(bad: bool) -> ModelProto:
    f8 = TensorProto.FLOAT8E4M3FN
    node = helper.make_node("Cast", ["x"], ["y"], to=f8)
    return model([node], [vi("x")], [vi("y", f8)], opset=19, ir=8 if bad else 9)


def t002(bad: bool) -> ModelProto:
    seq = helper.make_tensor_sequence_value_info("s", F, None)
    node = helper.make_node("SequenceLength", ["s"], ["y"])
    return model([node], [seq], [vi("y", I64, ())], opset=11, ir=5 if bad else 6)


def t003(bad: bool) -> ModelProto:
    m = simple()
    m.graph.value_info.append(vi("y", 0 if bad else F))
    return m


def t004(bad: bool) -> ModelProto:
    elem = I64 if bad else F
    node = helper.make_node("Sqrt", ["x"], ["y"])
    return model([node], [vi("x", elem)], [vi("y", elem)])


def t005(bad: bool) -> ModelProto:
    nodes = [relu("x", "t"), relu("t", "y")]
    return model(nodes, [vi("x")], [vi("y")], value_info=[vi("t", I64 if bad else F)])


def t009(bad: bool) -> ModelProto:
    # A value_info shape on an intermediate that inference contradicts (genai writes
    # int64[] for a constant inferred int64[1]): a warning, not an error.
    nodes = [relu("x", "t"), relu("t", "y")]
    return model(nodes, [vi("x")], [vi("y")], value_info=[vi("t", shape=(3,) if bad else (2,))])


def t006(bad: bool) -> ModelProto:
    nodes = [
        helper.make_node("Identity", ["a"], ["y1"]),
        helper.make_node("Identity", ["b"], ["y2"]),
    ]
    return model(
        nodes,
        [vi("a", shape=(3,)), vi("b", shape=(4 if bad else 3,))],
        [vi("y1", shape=["N"]), vi("y2", shape=["N"])],
    )


def t007(bad: bool) -> ModelProto:
    node = helper.make_node("Add", ["x", "w"], ["y"])
    return model([node], [vi("x"), vi("w", I64 if bad else F)], [vi("y")], [init("w")])


def t008(bad: bool) -> ModelProto:
    m = simple()
    v = m.graph.value_info.add()
    v.name = "y"
    if bad:
        v.type.SetInParent()
    else:
        v.type.CopyFrom(vi("y").type)
    return m


# -- F ---------------------------------------------------------------------------------------
def _fn(
    name: str = "F", domain: str = "local", opset: int = 17, op: str = "Relu", overload: str = ""
) -> onnx.FunctionProto:
    fn = helper.make_function(
        domain,
        name,
        ["a"],
        ["b"],
        [helper.make_node(op, ["a"], ["b"], domain=domain if op == name else "")],
        [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if op == name else []),
    )
    fn.overload = overload
    return fn


def _call(
    fns: Sequence[onnx.FunctionProto], ir: int = 10, name: str = "F", overload: str = ""
) -> ModelProto:
    call = helper.make_node(name, ["x"], ["y"], domain="local")
    call.overload = overload
    return model([call], [vi("x")], [vi("y")], opsets=[("local", 1)], functions=fns, ir=ir)


def f001(bad: bool) -> ModelProto:
    return _call([_fn(), _fn("F" if bad else "G")])


def f002(bad: bool) -> ModelProto:
    return _call([_fn(overload="o")], ir=9 if bad else 10, overload="o")


def f003(bad: bool) -> ModelProto:
    fn = _fn()
    fn.attribute_proto.append(helper.make_attribute("k", 1))
    return _call([fn], ir=8 if bad else 9)


def f004(bad: bool) -> ModelProto:
    fn = _fn()
    fn.value_info.append(vi("b"))
    return _call([fn], ir=9 if bad else 10)


def f005(bad: bool) -> ModelProto:
    fn = _fn()
    fn.metadata_props.append(onnx.StringStringEntryProto(key="k", value="v"))
    return _call([fn], ir=9 if bad else 10)


def f006(bad: bool) -> ModelProto:
    # Relu changed at opsets 13 and 14: version 12 and 17 mean different operators.
    return _call([_fn(opset=12 if bad else 17)])


def f007(bad: bool) -> ModelProto:
    return _call([_fn(op="F" if bad else "Relu")])


def f008(bad: bool) -> ModelProto:
    fn = _fn()
    fn.attribute.append("k")
    fn.attribute_proto.append(helper.make_attribute("k" if bad else "j", 1))
    return _call([fn])


def f009(bad: bool) -> ModelProto:
    return _call([_fn()], ir=7 if bad else 8)


# -- D ---------------------------------------------------------------------------------------
def _with_init(t: TensorProto, ir: int = 10) -> ModelProto:
    node = helper.make_node("Add", ["x", t.name], ["y"])
    return model([node], [vi("x")], [vi("y")], [t], ir=ir)


def _external(entries: dict[str, str], *, typed: bool = False) -> TensorProto:
    t = TensorProto(name="w", data_type=F, dims=[2], data_location=TensorProto.EXTERNAL)
    for k, v in entries.items():
        t.external_data.add(key=k, value=v)
    if typed:
        t.float_data.extend([1.0, 2.0])
    return t


def d201(bad: bool) -> ModelProto:
    t = TensorProto(name="w", data_type=F, dims=[3 if bad else 2])
    t.float_data.extend([1.0, 2.0])
    return _with_init(t)


def d202(bad: bool) -> ModelProto:
    t = init("w")
    if bad:
        t.float_data.extend([1.0, 2.0])
    return _with_init(t)


def d203(bad: bool) -> ModelProto:
    return _with_init(_external({"offset": "0"} if bad else {"location": "w.bin"}))


def d204(bad: bool) -> ModelProto:
    return _with_init(_external({"location": "w.bin", "offset": "-4" if bad else "4096"}))


def d205(bad: bool) -> ModelProto:
    return _with_init(_external({"location": "../w.bin" if bad else "data/w.bin"}))


def d206(bad: bool) -> ModelProto:
    return _with_init(_external({"location": "w.bin"}, typed=bad))


def d207(bad: bool) -> ModelProto:
    t = init("w")
    if bad:
        t.external_data.add(key="location", value="w.bin")
    return _with_init(t)


def _sparse(
    indices: Sequence[int], values_shape: Sequence[int] = (2,), dims: Sequence[int] = (4,)
) -> onnx.SparseTensorProto:
    values = numpy_helper.from_array(np.ones(values_shape, np.float32), "w")
    idx = numpy_helper.from_array(np.asarray(indices, np.int64), "")
    return helper.make_sparse_tensor(values, idx, list(dims))


def _sparse_model(s: onnx.SparseTensorProto) -> ModelProto:
    node = helper.make_node("Constant", [], ["y"], sparse_value=s)
    return model([node], [], [vi("y", shape=(4,))])


def d208(bad: bool) -> ModelProto:
    return _sparse_model(_sparse([1, 9] if bad else [1, 3]))


def d209(bad: bool) -> ModelProto:
    return _sparse_model(_sparse([1, 3], values_shape=(2, 1) if bad else (2,)))


def d210(bad: bool) -> ModelProto:
    t = init("w")
    if bad:
        t.data_type = 0
    return _with_init(t)


def d211(bad: bool) -> ModelProto:
    t = TensorProto(name="s", data_type=TensorProto.STRING, dims=[1])
    if bad:
        t.raw_data = b"abc"
    else:
        t.string_data.append(b"abc")
    node = helper.make_node("Identity", ["s"], ["y"])
    return model([node], [], [vi("y", TensorProto.STRING, (1,))], [t])


def d212(bad: bool) -> ModelProto:
    return _with_init(
        _external(
            {"location": "w.bin", "colour": "red"}
            if bad
            else {"location": "w.bin", "checksum": "ab"}
        )
    )


def d213(bad: bool) -> ModelProto:
    t = TensorProto(name="w", data_type=F, dims=[-2 if bad else 2])
    t.float_data.extend([1.0, 2.0])
    return _with_init(t)


# -- M ---------------------------------------------------------------------------------------
def m001(bad: bool) -> ModelProto:
    return simple(ir=onnx.IR_VERSION + 5 if bad else 10)


def m002(bad: bool) -> ModelProto:
    m = simple()
    helper.set_model_props(m, {"author": "a"})
    if bad:
        m.metadata_props.add(key="author", value="b")
    return m


def _training(
    key: str = "w", value: str = "w_new", twice: bool = False, ir: int = 10
) -> ModelProto:
    m = _with_init(init("w"), ir=ir)
    ti = m.training_info.add()
    ti.initialization.CopyFrom(
        helper.make_graph(
            [helper.make_node("Identity", ["c"], ["w_new"])], "init", [], [vi("w_new")], [init("c")]
        )
    )
    ti.initialization_binding.add(key=key, value=value)
    if twice:
        ti.initialization_binding.add(key=key, value=value)
    return m


def m003(bad: bool) -> ModelProto:
    return _training(key="nope" if bad else "w")


def m004(bad: bool) -> ModelProto:
    return _training(value="nope" if bad else "w_new")


def m005(bad: bool) -> ModelProto:
    return _training(twice=bad)


def m006(bad: bool) -> ModelProto:
    return _training(ir=6 if bad else 7)


def _devices(
    num: int = 2,
    cfg_id: str = "mesh",
    tensor: str = "x",
    device: int = 1,
    axis: int = 0,
    ir: int = 11,
    shards: int = 2,
    names: int = 0,
) -> ModelProto:
    m = simple(ir=ir)
    c = m.configuration.add()
    c.name = "mesh"
    c.num_devices = num
    c.device.extend(f"gpu{i}" for i in range(names))
    dc = m.graph.node[0].device_configurations.add()
    dc.configuration_id = cfg_id
    spec = dc.sharding_spec.add()
    spec.tensor_name = tensor
    spec.device.extend([0, device])
    sd = spec.sharded_dim.add()
    sd.axis = axis
    ss = sd.simple_sharding.add()
    ss.dim_value = 2
    ss.num_shards = shards
    return m


def m007(bad: bool) -> ModelProto:
    return _devices(ir=10 if bad else 11)


def m008(bad: bool) -> ModelProto:
    return _devices(names=3 if bad else 2)


def m009(bad: bool) -> ModelProto:
    return _devices(cfg_id="other" if bad else "mesh")


def m010(bad: bool) -> ModelProto:
    return _devices(tensor="w" if bad else "x")


def m011(bad: bool) -> ModelProto:
    return _devices(device=5 if bad else 1)


def m012(bad: bool) -> ModelProto:
    return _devices(axis=3 if bad else -1)


def m013(bad: bool) -> ModelProto:
    s = _sparse([1, 3])
    node = helper.make_node("Identity", ["w"], ["y"])
    return model([node], [], [vi("y", shape=(4,))], sparse=[s], ir=5 if bad else 6, opset=11)


# -- I and C -----------------------------------------------------------------------------------
def i001(bad: bool) -> ModelProto:
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    return model(
        [node],
        [vi("a", shape=(2, 3)), vi("b", shape=(4 if bad else 3, 5))],
        [vi("y", shape=(2, 5))],
    )


def i002(bad: bool) -> ModelProto:
    # An input whose initializer has another element type fails inference for the whole
    # graph (T007 reports the same clash as our own rule).
    node = helper.make_node("Relu", ["x"], ["y"])
    return model([node], [vi("x")], [vi("y")], [init("x", dtype=np.int64 if bad else np.float32)])


def i003(bad: bool) -> ModelProto:
    # onnx.shape_inference does not know the type of a sparse initializer.
    s = _sparse([1, 3])
    node = helper.make_node("Add" if bad else "Identity", ["w", "x"] if bad else ["x"], ["y"])
    return model([node], [vi("x", shape=(4,))], [vi("y", shape=(4,))], sparse=[s])


def c001(bad: bool) -> ModelProto:
    # onnx.checker wants an opset_import even when no node needs one; with an unrelated
    # error of ours present, that complaint is reported as a gap of our rules.
    g = helper.make_graph([], "g", [vi("x")], [vi("x"), vi("missing")] if bad else [vi("x")])
    m = helper.make_model(g)
    m.ClearField("opset_import")
    if not bad:
        m.opset_import.add(domain="", version=17)
    return m


def c002(bad: bool) -> ModelProto:
    # The spec imports the default opset implicitly; onnx.checker insists on an entry.
    g = helper.make_graph([], "g", [vi("x")], [vi("x")])
    m = helper.make_model(g)
    m.ClearField("opset_import")
    if not bad:
        m.opset_import.add(domain="", version=17)
    return m


CASES: dict[str, Callable[[bool], ModelProto]] = {
    name.upper(): fn
    for name, fn in dict(globals()).items()
    if len(name) == 4 and name[0] in "gnotfdmic" and name[1:].isdigit() and callable(fn)
}
