"""check's worker process without `import onnx` (check/onnx_native.py): it answers as
onnx's Python API does, and a later `import onnx` in it (the text parser) still works."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxviz.check.worker import InferenceWorker


def _model(tmp_path: Path) -> tuple[bytes, str]:
    """A Reshape whose shape is a small external tensor (data propagation needs it), a
    big external weight, and a node inference rejects in strict mode."""
    shape = numpy_helper.from_array(np.array([2, 8], dtype=np.int64), "shape")
    weight = numpy_helper.from_array(np.ones((8, 5000), dtype=np.float32), "w")
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("MatMul", ["r", "w"], ["y"]),
        helper.make_node("Add", ["y", "bad"], ["z"]),  # "bad" is string-typed: rejected
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [16]),
            helper.make_tensor_value_info("bad", TensorProto.STRING, [1]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 5000])],
        [shape, weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location="m.data", size_threshold=0
    )
    onnx.save(model, str(tmp_path / "m.onnx"))
    return (tmp_path / "m.onnx").read_bytes(), str(tmp_path)


def _answers(data: bytes, folder: str) -> tuple[object, object]:
    infer, check = InferenceWorker(), InferenceWorker()
    try:
        return infer.begin(data, "prepare+infer", folder)(), check.begin(data, "check", folder)()
    finally:
        infer.close()
        check.close()


def test_the_worker_answers_as_onnx_python_api_does(tmp_path: Path) -> None:
    data, folder = _model(tmp_path)
    (inferred_bytes, failure), (verdict, message) = _answers(data, folder)  # type: ignore[misc]
    inferred = onnx.ModelProto()
    inferred.ParseFromString(inferred_bytes)
    types = {vi.name: vi.type for vi in inferred.graph.value_info}
    # The small external shape tensor was read from the model's folder: r is [2, 8].
    assert [d.dim_value for d in types["r"].tensor_type.shape.dim] == [2, 8]
    assert [d.dim_value for d in types["y"].tensor_type.shape.dim] == [2, 5000]
    assert not inferred.graph.initializer  # tensor data stays with the parent
    # The strict-mode failure and the checker's verdict, as onnx's Python API gives them.
    expected = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    from onnxviz.check.inference import prepare_for_inference

    prepare_for_inference(expected, folder)
    try:
        onnx.shape_inference.infer_shapes(expected, True, True, True)
        expected_failure = None
    except Exception as exc:
        expected_failure = str(exc)
    assert failure == expected_failure and failure is not None
    # The checker, run on the file from its folder, accepts it too.
    onnx.checker.check_model(str(tmp_path / "m.onnx"))
    assert verdict == "verdict" and message is None


def test_the_worker_imports_neither_onnx_nor_numpy_until_asked(tmp_path: Path) -> None:
    data, folder = _model(tmp_path)
    (tmp_path / "m.bin").write_bytes(data)
    code = textwrap.dedent(
        f"""
        import io, pickle, struct, sys
        from onnxviz.check import worker
        text = b'<ir_version: 8, opset_import: ["" : 17]> g (float[N] X) => (float[N] Y) {{ Y = Relu(X) }}'
        requests = [("prepare+infer", open({str(tmp_path / "m.bin")!r}, "rb").read(), {folder!r}),
                    ("check", b"", {folder!r})]
        out = io.BytesIO()
        for r in requests:
            body = pickle.dumps(r)
            out.write(struct.pack("<Q", len(body)) + body)
        sys.stdin = io.TextIOWrapper(io.BytesIO(out.getvalue()))
        answers = io.BytesIO()
        sys.stdout = io.TextIOWrapper(answers)
        worker.serve()
        lean = not any(m in sys.modules for m in ("onnx", "numpy"))
        # A request that needs the rest of onnx (the text parser) imports it.
        body = pickle.dumps(("parse", text, None))
        sys.stdin = io.TextIOWrapper(io.BytesIO(struct.pack("<Q", len(body)) + body))
        parsed = io.BytesIO()
        sys.stdout = io.TextIOWrapper(parsed)
        worker.serve()
        verdict = pickle.loads(parsed.getvalue()[8:])[0]
        sys.__stdout__.write(repr((lean, verdict)))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "(True, 'parsed')"
