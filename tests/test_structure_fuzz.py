"""Structure-aware fuzzing (issue 15): hypothesis builds ModelProtos (random graphs with
If/Loop/Scan bodies, model-local functions, every attribute kind, tensor, sequence, map,
optional and sparse types, names with odd Unicode and bytes that are not UTF-8, wrong
counts and dangling references) and drives each through open -> validate -> present ->
layout -> plan -> one run step.  Every stage either works or reports a located
diagnostic or an OnnxvizError; any other exception is a bug.  A bounded, derandomized
number of examples keeps it in the suite's time."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper

from onnxviz.check import validate
from onnxviz.errors import OnnxvizError
from onnxviz.model.document import Document
from onnxviz.model.io import _parse_protobuf

pytestmark = pytest.mark.slow

ODD_NAMES = ["x", "y", "t0", "", "名前", "a b", "/scope/Op_output_0", "\u200b", "x\ny", "ünï"]
OPS = ["Relu", "Add", "MatMul", "Identity", "Concat", "Reshape", "Cast", "Softmax", "NoSuchOp"]
TYPES = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL, TensorProto.STRING, 0, 999]
RAW_MARK = "RAWBYTES"  # replaced by bytes that are not UTF-8 after serialization


def _attribute(draw, name: str) -> AttributeProto:
    kind = draw(st.sampled_from(["i", "f", "s", "ints", "floats", "strings", "t", "g", "empty"]))
    if kind == "i":
        return helper.make_attribute(name, draw(st.integers(-(2**40), 2**40)))
    if kind == "f":
        return helper.make_attribute(name, draw(st.floats(allow_nan=True)))
    if kind == "s":
        return helper.make_attribute(name, draw(st.sampled_from(["", "NOTSET", RAW_MARK])))
    if kind == "ints":
        return helper.make_attribute(
            name, draw(st.lists(st.integers(-5, 5), min_size=1, max_size=4))
        )
    if kind == "floats":
        return helper.make_attribute(name, draw(st.lists(st.floats(-2, 2), min_size=1, max_size=3)))
    if kind == "strings":
        return helper.make_attribute(name, ["a", RAW_MARK])
    if kind == "t":
        return helper.make_attribute(
            name, helper.make_tensor("v", TensorProto.FLOAT, [2], [1.0, 2.0])
        )
    if kind == "g":
        return helper.make_attribute(name, _graph(draw, depth=1))
    attr = AttributeProto()
    attr.name = name  # no type, no value
    return attr


def _value_info(draw, name: str) -> onnx.ValueInfoProto:
    kind = draw(
        st.sampled_from(["tensor", "tensor", "sequence", "map", "optional", "sparse", "none"])
    )
    elem = draw(st.sampled_from(TYPES))
    shape = draw(st.one_of(st.none(), st.lists(st.sampled_from([1, 2, 3, "N", -1]), max_size=3)))
    if kind == "tensor":
        return helper.make_tensor_value_info(name, elem, shape)
    if kind == "sequence":
        return helper.make_tensor_sequence_value_info(name, elem, shape)
    if kind == "map":
        vi = onnx.ValueInfoProto(name=name)
        vi.type.map_type.key_type = TensorProto.INT64
        vi.type.map_type.value_type.tensor_type.elem_type = TensorProto.FLOAT
        return vi
    if kind == "optional":
        vi = onnx.ValueInfoProto(name=name)
        vi.type.optional_type.elem_type.tensor_type.elem_type = TensorProto.FLOAT
        return vi
    if kind == "sparse":
        return helper.make_sparse_tensor_value_info(name, TensorProto.FLOAT, [2, 2])
    return onnx.ValueInfoProto(name=name)


def _graph(draw, depth: int = 0) -> onnx.GraphProto:
    names = ["x", *draw(st.lists(st.sampled_from(ODD_NAMES), max_size=4)), RAW_MARK]
    nodes = []
    for k in range(draw(st.integers(0, 5 if depth == 0 else 2))):
        op = draw(st.sampled_from([*OPS, "If", "Loop", "Scan", "Fn"] if depth == 0 else OPS))
        ins = draw(st.lists(st.sampled_from(names), max_size=3))  # may dangle
        out = draw(st.sampled_from([f"v{k}", *names]))
        names.append(out)
        attrs = []
        if op == "If":
            attrs = [
                helper.make_attribute("then_branch", _graph(draw, depth + 1)),
                helper.make_attribute("else_branch", _graph(draw, depth + 1)),
            ]
        elif op in ("Loop", "Scan"):
            attrs = [helper.make_attribute("body", _graph(draw, depth + 1))]
        elif draw(st.booleans()):
            attrs = [_attribute(draw, draw(st.sampled_from(["axis", "to", "perm", RAW_MARK])))]
        node = helper.make_node(
            op, ins, [out], name=draw(st.sampled_from(["", f"n{k}", RAW_MARK])),
            domain="local" if op == "Fn" else "",
        )  # fmt: skip
        node.attribute.extend(attrs)
        nodes.append(node)
    inputs = [_value_info(draw, n) for n in draw(st.lists(st.sampled_from(names[:3]), max_size=2))]
    outputs = [_value_info(draw, n) for n in draw(st.lists(st.sampled_from(names), max_size=2))]
    inits = []
    if draw(st.booleans()):
        inits.append(
            helper.make_tensor(draw(st.sampled_from(names)), TensorProto.FLOAT, [2], [1.0, 2.0])
        )
    if draw(st.booleans()):  # wrong count: dims say 3, data holds 2
        bad = helper.make_tensor("bad_count", TensorProto.FLOAT, [2], [1.0, 2.0])
        bad.dims[0] = 3  # helper refuses to make it so
        inits.append(bad)
    graph = helper.make_graph(nodes, f"g{depth}", inputs, outputs, initializer=inits)
    if draw(st.booleans()):
        sparse = helper.make_sparse_tensor(
            helper.make_tensor("sp", TensorProto.FLOAT, [2], [1.0, 2.0]),
            helper.make_tensor("sp_i", TensorProto.INT64, [2], [0, 9]),  # index out of range
            [2, 2],
        )
        graph.sparse_initializer.append(sparse)
    return graph


@st.composite
def models(draw) -> bytes:
    graph = _graph(draw)
    fn = helper.make_function(
        "local", "Fn", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )  # fmt: skip
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", draw(st.sampled_from([1, 13, 17, 99]))),
                       helper.make_opsetid("local", 1)],
        functions=[fn] if draw(st.booleans()) else [],
    )  # fmt: skip
    model.ir_version = draw(st.sampled_from([3, 8, 10, 99]))
    data = model.SerializeToString()
    if draw(st.booleans()):
        # Same length, not UTF-8: protobuf hands such strings over as bytes.
        data = data.replace(RAW_MARK.encode(), b"RAW\xff\xfeYTE")
    return data


def _stage(what: str, fn):  # type: ignore[no-untyped-def]
    """Run one stage: an OnnxvizError is a fine answer, any other exception is a bug."""
    try:
        return fn()
    except OnnxvizError:
        return None
    except Exception as exc:  # pragma: no cover - the failure message is the point
        raise AssertionError(f"{what}: {type(exc).__name__}: {exc}") from exc


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(models())
def test_every_stage_answers_a_hostile_model_with_a_diagnostic_or_an_error(data: bytes) -> None:
    from onnxviz.present.presenter import Presenter, display_graph
    from onnxviz.present.typeinfo import type_table
    from onnxviz.runtime.session import Session

    model = _stage("open", lambda: _parse_protobuf("fuzz.onnx", data))
    if model is None:
        return
    doc = Document.from_model(model, "fuzz.onnx")
    diags = _stage("validate", lambda: validate(doc)) or []
    assert all(d.location.graph_path for d in diags)  # every diagnostic is located

    def present() -> object:
        p = Presenter(doc, types=type_table(doc, infer=False))
        p.expanded |= p.default_expansion()
        return display_graph(p)  # builds the scene and lays it out

    _stage("present + layout", present)

    def run_one_step() -> None:
        session = Session(doc)
        feeds = {name: np.zeros((1,), np.float32) for name in session.input_names}
        session.start(feeds)
        session.step()

    _stage("plan + one run step", run_one_step)


def _found_models() -> list[tuple[str, bytes]]:
    """What the strategy above found, kept as explicit cases."""
    f = TensorProto.FLOAT
    relu = helper.make_node("Relu", ["x"], ["y"])
    out: list[tuple[str, bytes]] = []
    # A graph output with no name: the canvas had no pill for it (KeyError 'main|out:').
    m = helper.make_model(
        helper.make_graph([relu], "g", [helper.make_tensor_value_info("x", f, [1])],
                          [helper.make_tensor_value_info("", f, [1])])
    )  # fmt: skip
    out.append(("unnamed graph output", m.SerializeToString()))
    # A graph input with no name, fed: the run looked up its slot (KeyError '').
    m = helper.make_model(
        helper.make_graph([relu], "g", [helper.make_tensor_value_info("x", f, [1]),
                          helper.make_tensor_value_info("", f, [1])],
                          [helper.make_tensor_value_info("y", f, [1])])
    )  # fmt: skip
    out.append(("unnamed graph input", m.SerializeToString()))
    # An element type no one knows (KeyError 999 while preparing the feeds).
    m = helper.make_model(
        helper.make_graph([relu], "g", [helper.make_tensor_value_info("x", 999, [1])],
                          [helper.make_tensor_value_info("y", f, [1])])
    )  # fmt: skip
    out.append(("unknown element type", m.SerializeToString()))
    # An initializer with no name in a graph with no other value (IndexError in the frame).
    empty = helper.make_graph([], "g", [], [], initializer=[helper.make_tensor("", f, [1], [1.0])])
    out.append(("unnamed initializer", helper.make_model(empty).SerializeToString()))
    # Names that are not UTF-8 on an initializer row of a node box (bytes.rsplit("/")).
    out.append((
        "initializer named in bytes",
        b'\x08\x03:d\n\x1a\n\x08RAW\xff\xfeYTE\x12\x02v0"\x08NoSuchOp:\x00\n\x0c\x12\x02v1"\x04Relu:\x00'
        b'\n\x0c\x12\x02v2"\x04Relu:\x00\n\x0c\x12\x02v3"\x04Relu:\x00\x12\x02g0*\x18\x08\x02\x10\x01"'
        b'\x08\x00\x00\x80?\x00\x00\x00@B\x08RAW\xff\xfeYTEB\x04\n\x00\x10\x01B\t\n\x05local\x10\x01',
    ))  # fmt: skip
    return out


@pytest.mark.parametrize(("what", "data"), _found_models(), ids=[w for w, _ in _found_models()])
def test_found_counter_examples(what: str, data: bytes) -> None:
    test_every_stage_answers_a_hostile_model_with_a_diagnostic_or_an_error.hypothesis.inner_test(
        data
    )  # type: ignore[attr-defined]
