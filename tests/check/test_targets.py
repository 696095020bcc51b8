"""Validation targets (check.targets): ``onnx`` is strict to the spec and still names
what only onnxruntime runs; ``onnxruntime`` accepts its extensions and checks contrib
operators against onnxruntime's own schemas, read in a worker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from onnx import TensorProto, helper

import onnxviz
from onnxviz.check import validate
from onnxviz.cli.main import main
from onnxviz.model.document import Document
from tests.data.exporters import MANIFEST, NAMES, path_of

pytest.importorskip("onnxruntime")

MS = "com.microsoft"


def contrib_model(*nodes, inputs=None, opsets=None) -> Document:
    graph = helper.make_graph(
        list(nodes),
        "g",
        inputs
        or [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, 32]),
            helper.make_tensor_value_info("B", TensorProto.UINT8, [16, 1, 16]),
            helper.make_tensor_value_info("scales", TensorProto.FLOAT, [16]),
        ],
        [
            helper.make_tensor_value_info(
                "Y", TensorProto.FLOAT, [1, 16] if inputs is None else [2, 8]
            )
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=opsets or [helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)],
    )
    model.ir_version = 10
    return Document.from_model(model)


def matmul_nbits(**overrides):
    attrs = {"K": 32, "N": 16, "bits": 4, "block_size": 32}
    attrs.update(overrides)
    attrs = {k: v for k, v in attrs.items() if v is not None}
    return helper.make_node(
        "MatMulNBits", ["A", "B", "scales"], ["Y"], name="mm", domain=MS, **attrs
    )


def codes(diags, severity=None) -> set[str]:
    return {d.code for d in diags if severity is None or d.severity.name == severity}


def test_a_well_formed_contrib_node_is_clean_for_onnxruntime_and_named_for_onnx() -> None:
    doc = contrib_model(matmul_nbits())
    ort_diags = validate(doc, target="onnxruntime")
    assert codes(ort_diags, "ERROR") == set() and "O021" not in codes(ort_diags)
    onnx_diags = validate(doc, target="onnx")
    (note,) = [d for d in onnx_diags if d.code == "O021"]
    assert note.location.node == "mm" and "not portable" in note.message
    assert codes(onnx_diags, "ERROR") == set()


def test_contrib_nodes_are_checked_against_onnxruntime_schemas() -> None:
    missing_k = contrib_model(matmul_nbits(K=None))
    diags = validate(missing_k, target="onnxruntime")
    (o009,) = [d for d in diags if d.code == "O009"]
    assert "'K'" in o009.message and o009.location.node == "mm"
    assert "O009" not in codes(validate(missing_k, target="onnx"))  # no schema there

    wrong_type = contrib_model(matmul_nbits(bits=4.0))
    assert "O010" in codes(validate(wrong_type, target="onnxruntime"))
    unknown_attr = contrib_model(matmul_nbits(colour=3))
    assert "O008" in codes(validate(unknown_attr, target="onnxruntime"))
    too_few = contrib_model(
        helper.make_node(
            "MatMulNBits", ["A"], ["Y"], name="mm", domain=MS, K=32, N=16, block_size=32
        )
    )
    (o006,) = [d for d in validate(too_few, target="onnxruntime") if d.code == "O006"]
    assert "1 inputs" in o006.message and "3 to 6" in o006.message


def test_an_operator_onnxruntime_lacks_in_its_domain_is_an_error_only_for_onnxruntime() -> None:
    doc = contrib_model(
        helper.make_node("MatMulNBitz", ["A", "B", "scales"], ["Y"], name="mm", domain=MS)
    )
    (o022,) = [d for d in validate(doc, target="onnxruntime") if d.code == "O022"]
    assert "MatMulNBitz" in o022.message and o022.severity.name == "ERROR"
    assert codes(validate(doc, target="onnx"), "ERROR") == set()


def test_default_domain_extension_is_a_warning_for_onnx_and_accepted_for_onnxruntime() -> None:
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "s"], ["Y"], name="norm", axis=-1)
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, [8]),
    ]
    doc = contrib_model(node, inputs=inputs, opsets=[helper.make_opsetid("", 22)])
    strict = [d for d in validate(doc, target="onnx") if d.code == "O020"]
    assert [d.severity.name for d in strict] == ["WARNING"]
    assert "not portable" in strict[0].message
    relaxed = validate(doc, target="onnxruntime")
    assert [d.severity.name for d in relaxed if d.code == "O020"] == ["INFO"]
    assert codes(relaxed, "WARNING") == set() and codes(relaxed, "ERROR") == set()
    # A bad attribute on it is found through onnxruntime's schema.
    bad = helper.make_node("SimplifiedLayerNormalization", ["x", "s"], ["Y"], name="norm", axis=1.5)
    doc = contrib_model(bad, inputs=inputs, opsets=[helper.make_opsetid("", 22)])
    assert "O010" in codes(validate(doc, target="onnxruntime"))


def test_unknown_target_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown validation target 'tensorrt'"):
        validate(contrib_model(matmul_nbits()), target="tensorrt")


def test_facade_takes_the_target() -> None:
    doc = contrib_model(matmul_nbits(K=None))
    assert "O009" in codes(onnxviz.validate(doc, target="onnxruntime"))


@pytest.mark.parametrize("name", NAMES)
def test_exporter_corpus_has_no_errors_for_onnxruntime(name: str) -> None:
    diags = validate(Document.open(str(path_of(name))), target="onnxruntime")
    errors = [f"{d.code} {d.message}" for d in diags if d.severity.name == "ERROR"]
    assert errors == [], f"{name} ({MANIFEST[name]['exporter']} {MANIFEST[name]['version']})"
    assert "O021" not in codes(diags)
    if name.startswith("ort_genai"):
        # The default-domain extension is accepted; no checker complaint is left over.
        assert codes(diags, "WARNING") <= {"T009"}


def test_cli_target_json_and_exit_codes(tmp_path, capsys) -> None:
    import onnx

    doc = contrib_model(matmul_nbits(K=None))
    path = tmp_path / "m.onnx"
    onnx.save(doc.model, str(path))
    assert main(["check", str(path), "--json"]) == 0
    strict = json.loads(capsys.readouterr().out)
    assert {d["code"] for d in strict} == {"O021"}
    assert main(["check", str(path), "--json", "--target", "onnxruntime"]) == 1
    relaxed = json.loads(capsys.readouterr().out)
    (o009,) = [d for d in relaxed if d["code"] == "O009"]
    assert o009["severity"] == "error" and o009["location"]["node"] == "mm"


def test_onnxruntime_is_never_imported_in_the_app_process(tmp_path) -> None:
    script = (
        "import sys\n"
        "from onnx import helper\n"
        "from onnxviz.check import validate\n"
        "from onnxviz.model.document import Document\n"
        "n = helper.make_node('MatMulNBits', ['A', 'B', 's'], ['Y'], domain='com.microsoft',"
        " N=16, block_size=32)\n"
        "g = helper.make_graph([n], 'g', [], [])\n"
        "m = helper.make_model(g, opset_imports=[helper.make_opsetid('com.microsoft', 1),"
        " helper.make_opsetid('', 21)])\n"
        "d = validate(Document.from_model(m), target='onnxruntime')\n"
        "assert 'O009' in {x.code for x in d}, d\n"
        "print('onnxruntime' in sys.modules)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(root, "src"), root]))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=root
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
