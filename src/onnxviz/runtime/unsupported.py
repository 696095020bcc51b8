"""Operators the interpreter knowingly does not run, each with its reason.

The coverage test (tests/runtime/test_coverage.py) walks every operator schema of the
default, ai.onnx.ml and ai.onnx.preview.training domains at every since_version and
requires a kernel registered for that exact version, a control-flow op run by the
engine, a schema function body the engine can expand, or an entry here.
"""

from __future__ import annotations

# (domain, op_type) -> (since_versions or None for all, reason)
UNSUPPORTED: dict[tuple[str, str], tuple[tuple[int, ...] | None, str]] = {
    ("ai.onnx.preview.training", "Gradient"): (
        None,
        "needs automatic differentiation of the graph it sits in; the interpreter only "
        "runs forward computations",
    ),
}


def unsupported_reason(domain: str, op_type: str, since_version: int) -> str | None:
    entry = UNSUPPORTED.get((domain, op_type))
    if entry is None:
        return None
    versions, reason = entry
    if versions is None or since_version in versions:
        return reason
    return None
