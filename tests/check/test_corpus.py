"""Real models: the onnx wheel's backend data and node test cases.

No error on a model onnx.checker (full check) accepts; on a model it rejects, at least
one error from our own rules, not only the checker fallback."""

from __future__ import annotations

import glob
import os
import random

import onnx
import onnx.backend.test
import pytest
from onnx import AttributeProto, TensorProto, helper

from onnxviz.check import validate
from onnxviz.model.diagnostics import Diagnostic
from onnxviz.model.document import Document
from tests.check.nodecases import node_models as cached_node_models

DATA = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data")
DATA_MODELS = sorted(glob.glob(os.path.join(DATA, "*", "**", "*.onnx"), recursive=True))


def _checker_accepts(m: onnx.ModelProto) -> str | None:
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as exc:
        return str(exc)
    return None


def _errors(diags: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diags if d.severity.value == "error"]


def _own_errors(diags: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in _errors(diags) if d.code[0] != "C"]


@pytest.fixture(scope="module")
def node_models() -> list[tuple[str, onnx.ModelProto]]:
    return list(cached_node_models())


def test_backend_data_models() -> None:
    assert len(DATA_MODELS) > 100
    for path in DATA_MODELS:
        m = onnx.load(path)
        problem = _checker_accepts(m)
        diags = validate(Document.from_model(m, path))
        if problem is None:
            assert not _errors(diags), (path, [str(d) for d in _errors(diags)])
        else:
            assert _own_errors(diags), (path, problem)


def test_node_test_models(node_models: list[tuple[str, onnx.ModelProto]]) -> None:
    assert len(node_models) > 1000
    for name, m in node_models:
        problem = _checker_accepts(m)
        diags = validate(Document.from_model(m))
        if problem is None:
            assert not _errors(diags), (name, [str(d) for d in _errors(diags)])
        else:
            assert _own_errors(diags), (name, problem)


# -- broken models: seeded mutations of the node test models ------------------------------------
def _mutants(m: onnx.ModelProto, rng: random.Random) -> list[tuple[str, onnx.ModelProto]]:
    out = []

    def mutate(label: str, fn: object) -> None:
        c = onnx.ModelProto()
        c.CopyFrom(m)
        try:
            fn(c)  # type: ignore[operator]
        except (IndexError, ValueError, AttributeError):
            return
        out.append((label, c))

    def pick(seq: object) -> int:
        return rng.randrange(len(seq))  # type: ignore[arg-type]

    mutate(
        "undefined input",
        lambda c: c.graph.node[pick(c.graph.node)].input.__setitem__(0, "zz_undefined"),
    )
    mutate("op type", lambda c: setattr(c.graph.node[pick(c.graph.node)], "op_type", "NoSuchOp"))
    mutate(
        "unknown attribute",
        lambda c: c.graph.node[pick(c.graph.node)].attribute.append(helper.make_attribute("zz", 1)),
    )
    mutate(
        "output over input", lambda c: c.graph.node[0].output.__setitem__(0, c.graph.input[0].name)
    )
    mutate(
        "reversed",
        lambda c: (
            c.graph.node.sort(key=lambda n: -list(c.graph.node).index(n))
            if len(c.graph.node) > 1
            else None
        ),
    )
    mutate("no outputs", lambda c: c.graph.node[pick(c.graph.node)].ClearField("output"))
    mutate("undefined output", lambda c: setattr(c.graph.output[0], "name", "zz_nowhere"))
    mutate("input without type", lambda c: c.graph.input[pick(c.graph.input)].ClearField("type"))
    mutate(
        "input without shape",
        lambda c: c.graph.input[pick(c.graph.input)].type.tensor_type.ClearField("shape"),
    )
    mutate("ir version", lambda c: setattr(c, "ir_version", 99))
    mutate("no opset", lambda c: c.ClearField("opset_import"))
    mutate("graph name", lambda c: c.graph.ClearField("name"))

    def attr_type(c: onnx.ModelProto) -> None:
        nodes = [n for n in c.graph.node if n.attribute]
        a = nodes[pick(nodes)].attribute[0]
        a.type = AttributeProto.FLOAT if a.type != AttributeProto.FLOAT else AttributeProto.INT

    mutate("attribute type", attr_type)

    def out_elem(c: onnx.ModelProto) -> None:
        c.graph.output[0].type.tensor_type.elem_type = TensorProto.STRING

    mutate("output element type", out_elem)
    return out


def test_mutants_get_our_own_errors(node_models: list[tuple[str, onnx.ModelProto]]) -> None:
    rng = random.Random(7)
    sample = rng.sample(node_models, 60)
    rejected = 0
    for name, m in sample:
        for label, bad in _mutants(m, rng):
            problem = _checker_accepts(bad)
            if problem is None:
                continue
            rejected += 1
            diags = validate(Document.from_model(bad))
            assert _own_errors(diags), (name, label, problem)
    assert rejected > 300


def test_independent_problems_are_all_reported() -> None:
    m = helper.make_model(
        helper.make_graph(
            [
                helper.make_node("Relu", ["nope"], ["a"], name="r"),
                helper.make_node("Concat", ["a", "a"], ["b"], name="c"),
                helper.make_node("NoSuchOp", ["b"], ["y"], name="n"),
            ],
            "",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [
                helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
                helper.make_tensor_value_info("z", TensorProto.FLOAT, [2]),
            ],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    codes = {d.code for d in _errors(validate(Document.from_model(m)))}
    assert {"G004", "O009", "O003", "G005", "G010"} <= codes
