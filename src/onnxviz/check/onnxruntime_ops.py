"""Operators onnxruntime runs in the ONNX domains although ONNX defines none by that name.

onnxruntime-genai's model builder writes ``SimplifiedLayerNormalization`` (an RMSNorm) in
the default domain: onnxruntime implements it there as an extension, the ONNX spec has
no such operator, and onnx.checker rejects the model.  The user needs both facts: the
model runs in onnxruntime, and it is not portable to other runtimes.  So such a node is
reported as O020, a warning, instead of O003 (an operator that exists nowhere).

The list comes from onnxruntime's own schema registry when onnxruntime is installed
(it is an optional dependency, imported only when a model has such a node), else from
the names known here.
"""

from __future__ import annotations

from functools import lru_cache

# onnxruntime 1.17-1.32's default-domain extensions that exporters write.
_KNOWN = frozenset({"SimplifiedLayerNormalization"})


@lru_cache(maxsize=1)
def default_domain_extensions() -> frozenset[str]:
    """op_types onnxruntime registers in the default ONNX domain (ONNX's own included:
    callers ask only about names ONNX does not define at the model's opset)."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

        names = {s.name for s in ort_state.get_all_operator_schema() if s.domain in ("", "ai.onnx")}
    except Exception:  # no onnxruntime, or a build without the schema registry
        return _KNOWN
    return frozenset(names) | _KNOWN
