"""Operator coverage: every schema of the default, ai.onnx.ml and
ai.onnx.preview.training domains, at every since_version, has a kernel registered for
that version, is a control-flow op run by the engine, has a schema function body the
engine expands, or is listed in runtime/unsupported.py with a reason."""

from __future__ import annotations

import onnx.defs
import pytest

from onnxviz.runtime.plan import CONTROL_FLOW_OPS
from onnxviz.runtime.registry import registered
from onnxviz.runtime.unsupported import UNSUPPORTED, unsupported_reason

DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training")


def _pairs() -> list[tuple[str, str, int, bool]]:
    out = []
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain in DOMAINS:
            has_fn = bool(s.has_function or s.has_context_dependent_function)
            out.append((s.domain, s.name, int(s.since_version), has_fn))
    return sorted(out)


def _uncovered() -> list[str]:
    reg = registered()
    missing = []
    for domain, op, version, has_fn in _pairs():
        if domain == "" and op in CONTROL_FLOW_OPS:
            continue
        if any(k.since_version == version for k in reg.get((domain, op), [])):
            continue
        if has_fn or unsupported_reason(domain, op, version):
            continue
        missing.append(f"{domain or 'ai.onnx'}::{op}-{version}")
    return missing


def test_every_operator_version_is_covered() -> None:
    missing = _uncovered()
    assert not missing, f"{len(missing)} (op, version) pairs uncovered: {', '.join(missing)}"


def test_unsupported_entries_name_real_ops_with_reasons() -> None:
    names = {(d, o) for d, o, _, _ in _pairs()}
    for key, (_, reason) in UNSUPPORTED.items():
        assert key in names, key
        assert len(reason) > 20


def test_kernels_do_not_claim_versions_the_schema_lacks() -> None:
    versions: dict[tuple[str, str], set[int]] = {}
    for domain, op, version, _ in _pairs():
        versions.setdefault((domain, op), set()).add(version)
    bad = [
        f"{d or 'ai.onnx'}::{o}-{k.since_version}"
        for (d, o), specs in registered().items()
        if (d, o) in versions
        for k in specs
        if k.since_version not in versions[(d, o)]
    ]
    assert not bad, f"kernels registered for versions no schema has: {bad}"


@pytest.mark.parametrize("op", sorted(CONTROL_FLOW_OPS))
def test_control_flow_ops_are_schemas(op: str) -> None:
    assert onnx.defs.has(op)
