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
from onnx import TensorProto

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
