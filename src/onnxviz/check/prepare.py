"""The copy of a model that onnx's inference and checker get: tensor data as they should
see it, and no declared inner types.

Runs in check's worker process on the bytes the parent sent ("prepare+infer") and in the
parent (`inference.prepare_for_inference`).  It imports neither onnx nor numpy: the
worker reads protobuf messages through onnx's own generated classes loaded without the
onnx package (`check.onnx_native`), so a worker is ready in a fraction of the time
`import onnx` takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from onnxviz.model.elem_bits import ELEMENT_BITS
from onnxviz.model.external import is_external, read_external_bytes

if TYPE_CHECKING:
    from onnx import GraphProto, ModelProto, TensorProto

# Initializers with more elements than this reach inference and the checker without
# their data: their type and shape are all they need, and data propagation only reads
# small shape tensors (Reshape, Expand, Slice, ... inputs).
DATA_KEPT_UP_TO = 4096
_DEFAULT = 0  # TensorProto.DEFAULT (data in the message)


def all_graphs(model: ModelProto) -> Iterator[GraphProto]:
    """The main graph and every graph nested in a node attribute (not functions)."""
    stack: list[GraphProto] = [model.graph]
    while stack:
        g = stack.pop()
        yield g
        for node in g.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    stack.append(attr.g)
                stack.extend(attr.graphs)


def _expected_nbytes(t: TensorProto) -> int:
    """model.tensors.tensor_nbytes without its numpy import for the common types."""
    bits = ELEMENT_BITS.get(t.data_type, 0)
    if bits and all(d >= 0 for d in t.dims):
        n = 1
        for d in t.dims:
            n *= d
        return (n * bits + 7) // 8
    from onnxviz.model.tensors import tensor_nbytes  # strings, unknown types: it decides

    return tensor_nbytes(t)  # type: ignore[arg-type]


def seen_as_loaded(copy: ModelProto, base_dir: str | None, graphs: list[Any]) -> None:
    """Tensor data as onnx's C++ code should see it, in place: big tensors without their
    bytes (embedded or external: a 1 GiB weight is not needed to infer a shape), small
    external ones read from the model's own folder and embedded, so that inference and
    the checker never open files relative to the current directory (or at all).  A
    small external tensor that cannot be read is left data-less: the loader's D101-D105
    already name what is wrong with it."""
    del copy  # the graphs are the copy's
    for g in graphs:
        for t in g.initializer:
            n = 1
            for d in t.dims:
                n *= d
            if is_external(t):
                data = None
                if n <= DATA_KEPT_UP_TO:
                    try:
                        raw = bytes(read_external_bytes(t, base_dir))
                        data = raw if len(raw) == _expected_nbytes(t) else None
                    except Exception:  # missing, escaping or short: the loader said so
                        data = None
                del t.external_data[:]
                t.data_location = _DEFAULT
                if data is not None:
                    t.raw_data = data
            elif n > DATA_KEPT_UP_TO and t.HasField("raw_data"):
                t.ClearField("raw_data")


def prepare_graphs(copy: ModelProto, base_dir: str | None, graphs: list[Any]) -> None:
    """In place, on a copy whose graphs are ``graphs``: tensor data as loaded
    (`seen_as_loaded`), and no value_info or main-graph output types, so that inferred
    types stay apart from declared ones."""
    seen_as_loaded(copy, base_dir, graphs)
    for g in graphs:
        del g.value_info[:]
    for fn in copy.functions:
        del fn.value_info[:]
    for out in copy.graph.output:
        out.ClearField("type")


def drop_tensor_data(model: ModelProto) -> None:
    """The inferred model goes back without initializers: the parent has them."""
    for g in all_graphs(model):
        del g.initializer[:]
        del g.sparse_initializer[:]
