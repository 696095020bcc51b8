"""Every registered rule has a failing and a passing model (tests/check/cases.py)."""

from __future__ import annotations

import pytest

from onnxviz.check import validate
from onnxviz.check.registry import FAMILIES, RULES
from onnxviz.model.diagnostics import Severity
from onnxviz.model.document import Document
from tests.check.cases import CASES
from tests.check.conftest import LooseDoc

# The loader reports containment of external data itself (D102); D205 shows where there
# is no loader, as for a bare ModelProto.
LOOSE = {"D205"}
# Rules only the onnxruntime validation target applies.
ONNXRUNTIME_TARGET = {"O022"}


def _codes(model: object, loose: bool, target: str = "onnx") -> list[str]:
    doc = LooseDoc(model) if loose else Document.from_model(model)  # type: ignore[arg-type]
    return [d.code for d in validate(doc, target=target)]


def _target(code: str) -> str:
    return "onnxruntime" if code in ONNXRUNTIME_TARGET else "onnx"


def test_every_rule_has_a_case() -> None:
    assert sorted(RULES) == sorted(CASES), "rules without a case / cases without a rule"


def test_registry_entries_are_complete() -> None:
    for code, rule in RULES.items():
        assert rule.family in FAMILIES, code
        assert len(code) == 4 and code[1:].isdigit()
        assert rule.spec and rule.description and rule.hint, code
        assert isinstance(rule.severity, Severity)


@pytest.mark.parametrize("code", sorted(CASES))
def test_failing_model_reports_code(code: str) -> None:
    assert code in _codes(CASES[code](True), code in LOOSE, _target(code))


@pytest.mark.parametrize("code", sorted(CASES))
def test_passing_model_does_not(code: str) -> None:
    assert code not in _codes(CASES[code](False), code in LOOSE, _target(code))


@pytest.mark.parametrize("code", sorted(CASES))
def test_diagnostics_carry_registry_metadata(code: str) -> None:
    doc = LooseDoc(CASES[code](True))
    for d in validate(doc):
        rule = RULES[d.code]
        assert d.spec == rule.spec
        assert d.hint
        assert d.message.endswith((".", ")")) or d.code in ("I001", "I002", "C001"), d.message
        assert d.location.graph_path


def test_function_bodies_are_checked_as_graphs() -> None:
    """Body order, single assignment and undefined names inside a model-local function."""
    from onnx import helper

    from tests.check.cases import model, vi

    body = [
        helper.make_node("Relu", ["t"], ["b"], name="late_use"),
        helper.make_node("Neg", ["a"], ["t"], name="producer"),
        helper.make_node("Neg", ["nowhere"], ["t"], name="again"),
    ]
    fn = helper.make_function("local", "F", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    call = helper.make_node("F", ["x"], ["y"], domain="local")
    m = model([call], [vi("x")], [vi("y")], opsets=[("local", 1)], functions=[fn])
    found = {(d.code, d.location.graph_path, d.location.node) for d in validate(LooseDoc(m))}
    assert ("G002", "function:local:F", "late_use") in found
    assert ("G001", "function:local:F", "producer") in found
    assert ("G004", "function:local:F", "again") in found


def test_strings_that_are_not_utf8_are_located_escaped_and_kept_on_save(tmp_path) -> None:
    """A model whose node name, value name and metadata are not UTF-8 opens; each bad
    string is a located N008 with its bytes escaped; JSON output works; an edit elsewhere
    and a save leave those bytes as they were."""
    import json

    from onnxviz.cli.check import format_report
    from onnxviz.model.document import Document
    from onnxviz.model.text import jsonable
    from tests.check.cases import simple, with_raw_string

    m = simple()
    m.graph.node[0].name = "NODEXX"
    m.metadata_props.add(key="KEYXX", value="fine")
    m = with_raw_string(m, b"NODEXX", b"NO\xfeXXX")
    m = with_raw_string(m, b"KEYXX", b"K\xc3(XX")
    path = tmp_path / "bad.onnx"
    path.write_bytes(m.SerializeToString())
    doc = Document.open(str(path))
    diags = [d for d in validate(doc) if d.code == "N008"]
    where = {(d.location.node, d.location.field) for d in diags}
    assert ("NO\\xfeXXX", "name") in where and (None, "metadata_props[0].key") in where
    assert any("K\\xc3(XX" in d.message for d in diags)
    json.dumps(jsonable([d.to_json() for d in diags]))
    assert "NO\\xfeXXX" in format_report(str(path), diags)
    out = tmp_path / "saved.onnx"
    doc.rename_value(doc.model.graph.output[0].name, "renamed")
    doc.save(str(out))
    saved = out.read_bytes()
    assert b"NO\xfeXXX" in saved and b"K\xc3(XX" in saved and b"renamed" in saved


@pytest.mark.parametrize(
    "field",
    ["name", "op_type", "domain", "input[1]", "output[0]", "attribute[0].name", "doc_string"],
)
def test_a_non_utf8_string_in_any_node_field_is_found_among_many_clean_nodes(field: str) -> None:
    """A full run screens nodes at C speed (str.join) and walks only the suspects: every
    field a node carries must still be caught, on the one bad node of many."""
    from onnx import TensorProto, helper

    from onnxviz.check.validator import Validator
    from tests.check.cases import with_raw_string
    from tests.check.conftest import LooseDoc

    marker = "QQMARKQQ"
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(50)]
    target = helper.make_node(
        "LeakyRelu", ["v50", ""], ["v51"], name="bad", domain="", alpha=0.1, doc_string="doc"
    )
    if field == "name":
        target.name = marker
    elif field == "op_type":
        target.op_type = marker
    elif field == "domain":
        target.domain = marker
    elif field == "input[1]":
        target.input[1] = marker
    elif field == "output[0]":
        target.output[0] = marker
    elif field == "attribute[0].name":
        target.attribute[0].name = marker
    else:
        target.doc_string = marker
    graph = helper.make_graph(
        [*nodes, target],
        "g",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("v50", TensorProto.FLOAT, [2])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m = with_raw_string(m, marker.encode(), b"QQ\xfeMARKQ")
    found = [d for d in Validator(LooseDoc(m)).validate() if d.code == "N008"]
    assert [d.location.field for d in found] == [field]
    assert "QQ\\xfeMARKQ" in found[0].message
