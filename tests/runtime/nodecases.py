"""Run ONNX backend node-test cases (onnx.backend.test.case.node) through our kernels.

This is the kernel families' quick harness: it evaluates a case's graph node by node
with `call_node` (no control flow; the Session harness covers If/Loop/Scan).  Usage as
a script: ``python -m tests.runtime.nodecases Add Conv ...`` prints each case's result.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxviz.model.tensors import to_array
from onnxviz.runtime.invoke import call_node
from onnxviz.runtime.registry import normalize_domain


def all_cases() -> list[Any]:
    """The backend node cases, loaded once per process (shared with the conformance
    harness: collecting them costs ~10 s of CPU)."""
    from onnxviz.runtime.conformance import node_cases

    return node_cases()


def case_ops(case: Any) -> set[str]:
    return {n.op_type for n in case.model.graph.node}


def cases_for(ops: Iterable[str]) -> Iterator[Any]:
    """Cases whose graph uses one of ``ops`` as its first node's op (the op under test)."""
    wanted = set(ops)
    for case in all_cases():
        nodes = case.model.graph.node
        if nodes and nodes[0].op_type in wanted:
            yield case


def to_value(x: Any) -> Any:
    if isinstance(x, TensorProto):
        return to_array(x)
    if isinstance(x, np.generic):
        return np.asarray(x)
    if isinstance(x, list):
        return [to_value(v) for v in x]
    if isinstance(x, dict):
        return {k: to_value(v) for k, v in x.items()}
    return x


def single_node_model(
    op: str,
    inputs: list[np.ndarray | None],
    n_out: int,
    domain: str,
    attrs: dict[str, Any],
    constants: tuple[int, ...] = (),
) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """A model of one ``op`` node (ai.onnx 17, com.microsoft 1) whose given inputs are
    graph inputs in order (so nothing is folded), except those at ``constants``:
    initializers, as a quantized model's weights are (onnxruntime packs those, and only
    those, with its exact int8 kernels: tests/ort_reference.py); and the graph inputs'
    values, in order."""
    names = [f"in{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outs = [f"out{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, domain=domain, **attrs)
    real = [(k, n, v) for k, (n, v) in enumerate(zip(names, inputs)) if v is not None]
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, n, v in real
            if k not in constants
        ],
        [onnx.ValueInfoProto(name=o) for o in outs],
        [numpy_helper.from_array(v, n) for k, n, v in real if k in constants],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=8,
    )
    return model, [v for k, _, v in real if k not in constants]


def run_graph_simply(model: Any, feeds: list[Any]) -> list[Any]:
    graph = model.graph
    opsets = {normalize_domain(o.domain): o.version for o in model.opset_import}
    env: dict[str, Any] = {"": None}
    for init in graph.initializer:
        env[init.name] = to_array(init)
    inits = {i.name for i in graph.initializer}
    real_inputs = [i.name for i in graph.input if i.name not in inits]
    for name, value in zip(real_inputs, feeds):
        env[name] = to_value(value)
    for node in graph.node:
        ins = [env[n] if n else None for n in node.input]
        outs = call_node(node, ins, opsets)
        for name, value in zip(node.output, outs):
            if name:
                env[name] = value
    return [env[o.name] for o in graph.output]


def values_match(expected: Any, actual: Any, rtol: float, atol: float) -> str | None:
    """None when they match (as the onnx backend tests judge), else the reason."""
    from onnxviz.runtime.conformance import compare

    return compare(expected, actual, rtol, atol)


def check_case(case: Any) -> tuple[str, str]:
    """('pass'|'fail'|'unsupported'|'error', detail)."""
    from onnxviz.runtime.invoke import UnsupportedOperator

    for inputs, expected in case.data_sets:
        try:
            with np.errstate(all="ignore"):
                actual = run_graph_simply(case.model, list(inputs))
        except UnsupportedOperator as exc:
            return "unsupported", str(exc)
        except Exception as exc:
            return "error", f"{type(exc).__name__}: {exc}"[:300]
        for e, a in zip(expected, actual):
            reason = values_match(e, a, case.rtol, case.atol)
            if reason:
                return "fail", reason
    return "pass", ""


if __name__ == "__main__":
    ops = sys.argv[1:]
    counts: dict[str, int] = {}
    for case in cases_for(ops) if ops else all_cases():
        status, detail = check_case(case)
        counts[status] = counts.get(status, 0) + 1
        if status != "pass" or "-v" in ops:
            print(f"{status:12s} {case.name}: {detail}")
    print(counts)
