"""Run one node's kernel: resolve, decode attributes, call, normalise the outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import NodeProto

from onnxviz.errors import ExecutionError
from onnxviz.runtime.attributes import node_attributes
from onnxviz.runtime.registry import KernelContext, KernelSpec, normalize_domain, resolve

if TYPE_CHECKING:
    from onnxviz.runtime.plan import PlanNode


class UnsupportedOperator(ExecutionError):
    """No kernel (and no expansion) for this op at this opset."""


def find_kernel(node: NodeProto, opsets: dict[str, int]) -> KernelSpec:
    domain = normalize_domain(node.domain)
    opset = opsets.get(domain, 1)
    spec = resolve(domain, node.op_type, opset)
    if spec is None:
        raise UnsupportedOperator(
            f"no kernel for {domain or 'ai.onnx'}::{node.op_type} at opset {opset}",
            node=node.name or None,
            op_type=node.op_type,
        )
    return spec


def normalize_outputs(result: Any, n_outputs: int) -> list[Any]:
    """A kernel's result as one value per output: arrays (numpy scalars made 0-d
    arrays), lists and dicts (sequences, maps) as they are, None for missing outputs."""
    if type(result) is tuple and len(result) == n_outputs:
        # The common multi-output case, every output an array: no per-output call.
        for o in result:
            if type(o) is not np.ndarray:
                break
        else:
            return list(result)
    if n_outputs == 1 and not isinstance(result, tuple):
        outs = [result]
    elif isinstance(result, tuple) or (isinstance(result, list) and n_outputs != 1):
        outs = list(result)
    else:
        outs = [result]
    if len(outs) < n_outputs:
        outs.extend([None] * (n_outputs - len(outs)))
    return [
        o if o is None or isinstance(o, (list, dict)) else _as_array(o) for o in outs[:n_outputs]
    ]


def _as_array(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def call_node(
    node: NodeProto,
    inputs: list[Any],
    opsets: dict[str, int],
    *,
    rng: np.random.Generator | Callable[[], np.random.Generator] | None = None,
    spec: KernelSpec | None = None,
    attributes: dict[str, Any] | None = None,
) -> list[Any]:
    """Run ``node`` on ``inputs`` (None for absent optional inputs); one value per output.
    ``rng``: the random generator, or a function making it when a kernel first draws
    (default: ``numpy.random.default_rng(0)``)."""
    spec = spec or find_kernel(node, opsets)
    domain = normalize_domain(node.domain)
    opset = opsets.get(domain, 1)
    kwargs = attributes if attributes is not None else node_attributes(node, opset)
    n_out = len(node.output)
    if spec.needs_ctx:
        ctx = KernelContext(
            n_outputs=n_out,
            opset=opset,
            node_name=node.name,
            rng_source=rng,
            output_names=tuple(node.output),
        )
        result = spec.fn(ctx, *inputs, **kwargs)
    else:
        result = spec.fn(*inputs, **kwargs)
    return normalize_outputs(result, n_out)


def spec_outputs(
    pn: PlanNode, ins: Sequence[Any], rng: Callable[[], np.random.Generator]
) -> list[Any]:
    """The outputs of plan node ``pn`` by the kernel the plan resolved for it
    (``pn.spec``, not None) and its pre-decoded attributes: `call_node` without its
    per-call lookups (the executor's call, and constant folding's).  ``rng`` makes the
    generator when a kernel first draws."""
    spec = pn.spec
    assert spec is not None
    if spec.needs_ctx:
        # Positional (KernelContext's field order): a third of keywords' cost.
        ctx = KernelContext(len(pn.outputs), pn.opset, pn.node.name, rng, pn.output_names)
        result = spec.fn(ctx, *ins, **pn.attrs)
    else:
        result = spec.fn(*ins, **pn.attrs)
    if len(pn.outputs) == 1 and type(result) is np.ndarray:
        return [result]
    return normalize_outputs(result, len(pn.outputs))
