"""An edit that adds, removes or renames no value keeps the initializer index of the
previous type table (rebuilding it for a big model's initializers was 90 ms of the UI
thread per edit); the types read through it are a fresh table's."""

from __future__ import annotations

from onnx import helper

from onnxviz.model import commands as c
from onnxviz.model.document import Document
from onnxviz.present.typeinfo import type_table
from tests.model.builders import simple_model


def _every_type(doc: Document, table) -> dict[tuple[str, str], str | None]:  # type: ignore[no-untyped-def]
    out: dict[tuple[str, str], str | None] = {}
    for scope in doc.scopes():
        names = set(scope.producer) | set(scope.other_definitions())
        for name in sorted(names):
            vt = table.lookup(scope, name)
            out[(scope.path, name)] = vt.text if vt else None
    return out


def test_a_node_field_edit_keeps_the_initializer_index_and_the_same_answers() -> None:
    doc = Document.from_model(simple_model())
    before = type_table(doc, infer=False)
    _every_type(doc, before)  # builds its initializer index
    changes = doc.execute(c.SetNodeField("main", 0, "doc_string", "edited"))
    assert not (changes.structural or changes.names or changes.model_fields)
    after = type_table(doc, infer=False)
    after.keep_initializer_index(before)
    types = _every_type(doc, after)
    assert types == _every_type(doc, type_table(doc, infer=False))
    assert types[("main", "bias")] == "float32[4]"  # read through the kept index


def test_tables_over_other_graphs_share_nothing() -> None:
    model = simple_model()
    first = Document.from_model(model)
    changed = type(model)()
    changed.CopyFrom(model)
    init = changed.graph.initializer[0]
    init.CopyFrom(helper.make_tensor(init.name, init.data_type, [1, 1, 1], [0.0]))
    second = Document.from_model(changed)
    old = type_table(first, infer=False)
    _every_type(first, old)
    new = type_table(second, infer=False)
    new.keep_initializer_index(old)  # another GraphProto: nothing taken over
    types = _every_type(second, new)
    assert types == _every_type(second, type_table(second, infer=False))
    assert types[("main", init.name)] is not None and "[1,1,1]" in types[("main", init.name)]
