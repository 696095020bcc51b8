"""Run the ONNX backend test cases through `Session` (used by the conformance tests,
tools/conformance_report.py and the CLI-free checks).

* node cases: ``onnx.backend.test.case.node.collect_testcases()``, each a small model
  with input/expected-output data sets (and the few "simple" whole-model cases of
  ``onnx.backend.test.case.model``, run the same way);
* light models: ``onnx/backend/test/data/light/light_<name>.onnx`` with
  ``light_<name>_output_0.pb``.  Their inputs are what the onnx test runner makes
  (``Runner.generate_dummy_data(random=False)``): a float32 tensor ``arange(n) / n``
  shaped as the declared input, unknown dims set to 1.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from onnxviz.errors import ExecutionError
from onnxviz.runtime.invoke import UnsupportedOperator
from onnxviz.runtime.values import from_proto

# (name, rtol, atol) as onnx.backend.test.case.model lists them.
LIGHT_MODELS: tuple[tuple[str, float, float], ...] = (
    ("bvlc_alexnet", 1e-3, 1e-7),
    ("densenet121", 2e-3, 1e-7),
    ("inception_v1", 1e-3, 1e-7),
    ("inception_v2", 1e-3, 1e-7),
    ("resnet50", 1e-3, 1e-7),
    ("shufflenet", 1e-3, 1e-7),
    ("squeezenet", 1e-3, 1e-7),
    ("vgg19", 1e-3, 1e-7),
    ("zfnet512", 1e-3, 1e-7),
)


@dataclass
class CaseResult:
    name: str
    op: str  # op under test (first node's op type), or the model name
    status: str  # "pass" | "fail" | "unsupported" | "error"
    detail: str = ""


@lru_cache(maxsize=1)
def node_cases() -> list[Any]:
    """The backend node cases.  onnx makes them when asked: it runs every case's own
    numpy code, 13 s of one core, in every process that asks (each test worker of each
    test run).  With ``ONNXVIZ_CASE_CACHE`` set to a folder they are pickled there once
    per onnx, numpy, ml_dtypes and Python version (their expected outputs depend on
    those, as the ml_dtypes 0.7 casts showed) and read back in 0.05 s; the folder must
    be one only this user writes (the test suite's is build/ in the checkout)."""
    folder = os.environ.get("ONNXVIZ_CASE_CACHE", "")
    path = os.path.join(folder, _case_cache_name()) if folder else ""
    if path and os.path.exists(path):
        try:
            with open(path, "rb") as fh:
                cached = pickle.load(fh)
            if isinstance(cached, list):
                return cached
        except Exception:  # a torn or foreign file: make the cases again
            pass
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = list(collect_testcases(None))
    if path:
        _write_case_cache(folder, path, cases)
    return cases


def _write_case_cache(folder: str, path: str, cases: list[Any]) -> None:
    """Pickle ``cases`` to ``path``, written whole and then renamed (a concurrent reader
    sees the old file or this one); a cache that cannot be written is only not kept."""
    tmp = ""
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(cases, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:  # no space, no permission, a case pickle cannot take
        if tmp and os.path.exists(tmp):
            os.remove(tmp)


def _case_cache_name() -> str:
    try:
        from importlib.metadata import version

        ml = version("ml_dtypes")
    except Exception:
        ml = "none"
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return f"node-cases-onnx{onnx.__version__}-numpy{np.__version__}-ml_dtypes{ml}-py{py}.pickle"


@lru_cache(maxsize=1)
def simple_model_cases() -> list[Any]:
    """The small whole-model cases of ``onnx.backend.test.case.model`` (sequence models,
    expand/shape models, string normalizer models, ...) that carry their own data."""
    from onnx.backend.test.case.model import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases() if c.kind == "simple" and c.data_sets]


def case_op(case: Any) -> str:
    nodes = case.model.graph.node
    return nodes[0].op_type if nodes else "?"


def compare(expected: Any, actual: Any, rtol: float, atol: float) -> str | None:
    """None when ``actual`` matches ``expected`` as the onnx backend runner judges."""
    expected = from_proto(expected)
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"expected a sequence of {len(expected)}, got {_kind(actual)}"
        for e, a in zip(expected, actual):
            reason = compare(e, a, rtol, atol)
            if reason:
                return reason
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            return "map keys differ"
        for k in expected:
            reason = compare(expected[k], actual[k], rtol, atol)
            if reason:
                return reason
        return None
    if expected is None:
        return None if actual is None else f"expected an empty optional, got {_kind(actual)}"
    if not isinstance(actual, np.ndarray):
        return f"expected a tensor, got {_kind(actual)}"
    expected = np.asarray(expected)
    if expected.shape != actual.shape:
        return f"shape {actual.shape} != expected {expected.shape}"
    if expected.dtype == object or actual.dtype == object:
        ok = expected.dtype == actual.dtype and np.array_equal(expected, actual)
        return None if ok else "string values differ"
    if expected.dtype != actual.dtype:
        return f"dtype {actual.dtype} != expected {expected.dtype}"
    out_rtol = rtol
    e, a = expected, actual
    if e.dtype.kind not in "biufc":
        if e.dtype.name == "bfloat16":
            out_rtol = max(rtol, 2**-6)
        e = e.astype(np.float32)
        a = a.astype(np.float32)
    try:
        np.testing.assert_allclose(a, e, rtol=out_rtol, atol=atol)
    except AssertionError as exc:
        lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        return "values differ: " + " | ".join(lines[1:4])[:240]
    return None


def _kind(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"tensor {v.dtype}{list(v.shape)}"
    return type(v).__name__


def run_node_case(case: Any, *, stepped: bool = False) -> CaseResult:
    """One case through `Session.run`: the unwatched run (fused node lists, in-place
    reuse) by default, or with ``stepped`` the watched run that keeps every value and
    runs each node on its own, as the debugger does."""
    from onnxviz.runtime.session import Session

    op = case_op(case)
    try:
        session = Session(case.model, keep_intermediates=stepped)
    except ExecutionError as exc:
        return CaseResult(case.name, op, "error", f"compile: {exc}"[:300])
    names = session.input_names
    for inputs, expected in case.data_sets:
        feeds = {n: v for n, v in zip(names, inputs)}
        try:
            with np.errstate(all="ignore"):
                outputs = session.run(feeds)
        except UnsupportedOperator as exc:
            return CaseResult(case.name, op, "unsupported", str(exc)[:300])
        except Exception as exc:
            return CaseResult(case.name, op, "error", f"{type(exc).__name__}: {exc}"[:300])
        for out_name, exp in zip(session.output_names, expected):
            reason = compare(exp, outputs.get(out_name), case.rtol, case.atol)
            if reason:
                return CaseResult(case.name, op, "fail", f"{out_name}: {reason}")
    return CaseResult(case.name, op, "pass")


def light_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim
        )
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def run_light_model(name: str, rtol: float, atol: float) -> CaseResult:
    from onnxviz.runtime.session import Session

    path = os.path.join(light_dir(), f"light_{name}.onnx")
    model = onnx.load(path)
    expected = TensorProto()
    with open(os.path.join(light_dir(), f"light_{name}_output_0.pb"), "rb") as fh:
        expected.ParseFromString(fh.read())
    try:
        session = Session(model)
        with np.errstate(all="ignore"):
            outputs = session.run(light_inputs(model))
    except UnsupportedOperator as exc:
        return CaseResult(f"light_{name}", name, "unsupported", str(exc)[:300])
    except Exception as exc:
        return CaseResult(f"light_{name}", name, "error", f"{type(exc).__name__}: {exc}"[:300])
    reason = compare(expected, outputs[session.output_names[0]], rtol, atol)
    if reason:
        return CaseResult(f"light_{name}", name, "fail", reason)
    return CaseResult(f"light_{name}", name, "pass")
