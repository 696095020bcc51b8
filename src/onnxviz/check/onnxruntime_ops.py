"""What onnxruntime adds to ONNX: its contrib operators and default-domain extensions.

onnxruntime-genai's model builder writes ``SimplifiedLayerNormalization`` (an RMSNorm) in
the default domain: onnxruntime implements it there as an extension, the ONNX spec has
no such operator, and onnx.checker rejects the model.  The user needs both facts: the
model runs in onnxruntime, and it is not portable to other runtimes.  So such a node is
reported as O020, a warning, instead of O003 (an operator that exists nowhere); nodes of
onnxruntime's own domains (``com.microsoft``: MatMulNBits, GroupQueryAttention, ...) are
O021, an info saying the same.

With the ``onnxruntime`` validation target (`check.targets`) these nodes are checked
against onnxruntime's own schemas instead, as ONNX nodes are against ONNX's.  Those
schemas are read from ``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()``
in a worker process (importing onnxruntime is native code that costs time and memory,
and the app's process never runs it): the worker answers with `PortableSchema` records
that carry what the operator rules need, and the answer is kept for the session.
Without onnxruntime the names known here stand in, and contrib nodes stay unchecked.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

# onnxruntime 1.17-1.32's default-domain extensions that exporters write.
_KNOWN = frozenset({"SimplifiedLayerNormalization"})
# Domains only onnxruntime defines operators in.
ORT_DOMAINS = frozenset({"com.microsoft", "com.microsoft.nchwc", "com.ms.internal.nhwc"})


@dataclass(frozen=True)
class Formal:
    """One formal input or output: its name and option (0 single, 1 optional, 2 variadic)."""

    name: str
    option: int


@dataclass(frozen=True)
class AttributeSpec:
    type: int  # AttributeProto.AttributeType
    required: bool


@dataclass(frozen=True)
class PortableSchema:
    """The parts of an operator schema the rules read, as plain picklable values (the
    same attribute names as onnx's OpSchema, so the same rules apply)."""

    name: str
    domain: str
    since_version: int
    deprecated: bool
    min_input: int
    max_input: int
    min_output: int
    max_output: int
    inputs: tuple[Formal, ...]
    outputs: tuple[Formal, ...]
    attributes: dict[str, AttributeSpec] = field(default_factory=dict)


def read_onnxruntime_schemas() -> list[PortableSchema] | str:
    """Run in the worker process: every schema onnxruntime registers, or why none."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

        schemas = ort_state.get_all_operator_schema()
    except Exception as exc:  # not installed, or a build without the schema registry
        return f"onnxruntime's schemas are not available ({type(exc).__name__}: {exc})"
    out: list[PortableSchema] = []
    for s in schemas:
        try:
            out.append(
                PortableSchema(
                    name=str(s.name),
                    domain="" if s.domain == "ai.onnx" else str(s.domain),
                    since_version=int(s.since_version),
                    deprecated=bool(s.deprecated),
                    min_input=int(s.min_input),
                    max_input=int(s.max_input),
                    min_output=int(s.min_output),
                    max_output=int(s.max_output),
                    inputs=tuple(Formal(str(p.name), int(p.option)) for p in s.inputs),
                    outputs=tuple(Formal(str(p.name), int(p.option)) for p in s.outputs),
                    attributes={
                        str(k): AttributeSpec(int(a.type), bool(a.required))
                        for k, a in s.attributes.items()
                    },
                )
            )
        except Exception:  # one odd schema must not hide the others
            continue
    return out


class _Registry:
    """onnxruntime's schemas by (domain, op_type), newest first; fetched once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_op: dict[tuple[str, str], list[PortableSchema]] | None = None
        self.problem: str | None = None

    def load(self) -> dict[tuple[str, str], list[PortableSchema]]:
        with self._lock:
            if self._by_op is None:
                self._by_op = {}
                answer = _ask_worker()
                if isinstance(answer, str):
                    self.problem = answer
                else:
                    for s in answer:
                        self._by_op.setdefault((s.domain, s.name), []).append(s)
                    for versions in self._by_op.values():
                        versions.sort(key=lambda s: -s.since_version)
            return self._by_op

    def available(self) -> bool:
        return bool(self.load())

    def schema(self, domain: str, op_type: str, version: int) -> PortableSchema | None:
        """onnxruntime's schema of op_type at opset ``version`` of domain, or None."""
        for s in self.load().get((domain, op_type), ()):
            if s.since_version <= version:
                return s
        return None

    def knows(self, domain: str, op_type: str) -> bool:
        return (domain, op_type) in self.load()


_early: list[Any] = []  # the answer asked for by `ask_early`, not yet read


def ask_early() -> None:
    """Send the request now (`onnxviz check --target onnxruntime` does, before it imports
    onnx), so that the worker imports onnxruntime while this process loads the model."""
    from onnxviz.check.worker import SCHEMAS

    with ONNXRUNTIME._lock:
        if ONNXRUNTIME._by_op is None and not _early:
            _early.append(SCHEMAS.begin(b"", "onnxruntime-schemas"))


def _ask_worker() -> list[PortableSchema] | str:
    from onnxviz.check.worker import SCHEMAS

    pending = _early.pop() if _early else SCHEMAS.begin(b"", "onnxruntime-schemas")
    answer: Any = pending()
    if isinstance(answer, str):
        return answer  # the worker crashed: a sentence saying so
    return answer[1]  # type: ignore[no-any-return]


ONNXRUNTIME = _Registry()


def default_domain_extensions() -> frozenset[str]:
    """op_types onnxruntime registers in the default ONNX domain (ONNX's own included:
    callers ask only about names ONNX does not define at the model's opset)."""
    return frozenset(name for domain, name in ONNXRUNTIME.load() if domain == "") | _KNOWN
