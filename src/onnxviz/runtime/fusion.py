"""Fused node lists for unwatched runs (`Session.run` with nobody stepping or keeping values).

A plan's ``nodes`` are what stepping shows, one node at a time.  When nobody looks at
intermediate values, `run_nodes` gives an equivalent list in which some node pairs run
as one ("fused") node:

* **Conv -> per-channel affine steps -> activation**: a Conv with a constant weight,
  followed by a chain of inference BatchNormalization, Mul and Add nodes (each the only
  user of the previous output, the other operands constants: initializers or
  constant-folded node outputs) and optionally an activation (Relu, HardSwish,
  HardSigmoid, LeakyRelu, Clip with constant bounds: ReLU6), runs as one Conv whose
  weight and bias absorb the chain: y = conv(x, W) * K + B per output channel, so W' =
  W * K and b' = B, folded once in float64 (BatchNormalization: K *= s / sqrt(var +
  eps), B = (B - mean) * that + beta; Mul: K *= c, B *= c; Add: B += c), and the
  activation is applied in place to the Conv's fresh output while it is still in cache
  (nn_conv_nhwc.activate_in_place; Relu, Clip and LeakyRelu through math_activation,
  the kernels' own steps in their order, so the stepped run's bits).  A Mul/Add
  constant must be per-channel ((M, 1, 1), (1, M, 1, 1), a scalar, ...) when the fold
  happens, else the steps run one by one as usual.  A Conv with no such steps still
  becomes a fused node of its own: its weight is handed to the kernel wrapped
  (nn_conv.ConvWeight), so the repacked forms the fast conv paths read are made once,
  not on every run.  Folded and wrapped weights are cached by the identity of the
  arrays they came from, so a run that feeds other values (IR < 4 overridable
  initializers) folds again.  A MaxPool that alone reads such a chain's result (no
  residual in the chain, a window the compiled pool takes as it is) ends the chain
  (`ConvChain.pool`): its held direct conv pools the output band by band of rows while
  they are in cache, the same kernels, so the same bits (ResNet-50's stem and pool 2.47
  -> 1.82 ms in its run).

* **Channels-last conv chains** (fusion_layout.py): the fused Convs of a MobileNet-style
  chain (depthwise and pointwise convs, activations, SE blocks) keep their outputs
  channels-last, so the depthwise convs read and write their own layout in place.

* **Channel shuffles** (fusion_shuffle.py): ShuffleNet's Reshape -> Transpose ->
  Reshape of the channels as one copy in its input's layout (channels-last stays so).

* **MatMul -> Add of a row vector**: a MatMul by a constant 2-D matrix whose output
  only feeds an Add of a constant vector along the last axis (a linear layer's bias)
  runs as one GEMM that writes the bias into its output first and adds the product
  onto it inside BLAS (kernels.blas): no separate pass over the output.  float32 products
  of the shapes where it is faster run the compiled GEMM by the weight packed once,
  the bias added in its epilogue (kernels/packed_gemm.py).

* **Trimmed convs** (fusion_conv_trim.py): a Conv whose padded output a constant Slice
  trims along an axis of stride 1 (a causal Conv1d's exported pad-then-cut) runs as the
  Conv with less padding, before the conv chains are found (the chain then takes the
  Relu after it).

* **Padded convs** (fusion_conv_pad.py): a zero Pad of the spatial axes whose only
  reader is a Conv (TensorFlow's SAME padding, HF's MobileNetV2) runs as the Conv with
  that padding, before the conv chains are found.

* **Written-out layer norms** (fusion_layernorm.py): ReduceMean -> Sub -> Pow ->
  ReduceMean -> Add -> Sqrt -> Div [-> Mul -> Add] over the last axis (TorchScript's
  nn.LayerNorm) as one node.

* **QuantizeLinear -> DequantizeLinear** (fusion_qdq.py): a QDQ model's rounding of an
  activation to its integer grid and back, as one float32 pass with no integer array;
  a pair over a value already on its grid (a Reshape or Transpose of a dequantized
  value, the same parameters: fusion_qdq_idle.py) gives the value back.

* **Quantized convs** (fusion_qdq_conv.py): QuantizeLinear -> DequantizeLinear -> Conv
  (weight a DequantizeLinear of int8) [-> Relu] -> QuantizeLinear -> DequantizeLinear as
  one exact integer product by the compiled int8 kernel, when it is built and on.

* **Code tables** (fusion_qdq_table.py): a QDQ model's elementwise chain of one
  quantized value with a Sigmoid, Tanh or Erf in it (a SiLU between pairs) as a table of
  its 256 codes, made by the chain's own nodes: one pass of QuantizeLinear and a lookup.

* **Elementwise chains** (fusion_elementwise.py): nodes like Div -> Erf -> Add -> Mul ->
  Mul (a GELU), each the only user of the one before, with scalar constants or the
  chain's input as other operands, run block by block in one pass through memory.  A QDQ
  model's QuantizeLinear -> DequantizeLinear pairs between such ops are steps of the
  chain (found before the pairs are, which take the rest).

The fused node sits at the last step's position (every input is ready there), takes
the union of the nodes' outside inputs, and its liveness (``free_after``, in-place
candidates) is computed again over the new list.  Every other node is a copy of the
plan's node (liveness differs, the rest is shared).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from operator import is_
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import native, quiet_loop, shape_memo
from onnxviz.runtime.fusion_conv_pad import pad_convs
from onnxviz.runtime.fusion_conv_trim import trim_convs, trim_routing
from onnxviz.runtime.fusion_elementwise import chain_node, find_chains
from onnxviz.runtime.fusion_int8_matmul import find_integer_matmuls, integer_matmul_node
from onnxviz.runtime.fusion_layernorm import (
    LayerNormChain,
    RmsNormChain,
    find_layer_norms,
    find_rms_norms,
)
from onnxviz.runtime.fusion_layout import plan_channels_last
from onnxviz.runtime.fusion_qdq import find_qdq_pairs, qdq_node
from onnxviz.runtime.fusion_qdq_add import find_qdq_adds, qdq_add_node, settle_float_outputs
from onnxviz.runtime.fusion_qdq_conv import find_qdq_convs, qdq_conv_node
from onnxviz.runtime.fusion_qdq_idle import find_idle_pairs, idle_pair_node
from onnxviz.runtime.fusion_qdq_matmul import find_qdq_matmuls, qdq_matmul_node
from onnxviz.runtime.fusion_qdq_pointwise import find_qdq_pointwise, qdq_pointwise_node
from onnxviz.runtime.fusion_qdq_pool import find_qdq_max_pools, qdq_max_pool_node
from onnxviz.runtime.fusion_qdq_table import find_qdq_tables, qdq_table_node
from onnxviz.runtime.fusion_se import SEGate, find_se_gates
from onnxviz.runtime.fusion_shuffle import channel_shuffle_node, find_channel_shuffles
from onnxviz.runtime.kernels import blas, chain_program, nn_pool, packed_gemm
from onnxviz.runtime.kernels.math_activation import (
    clip_into,
    leaky_relu_in_place,
    relu_into,
    sigmoid,
)
from onnxviz.runtime.kernels.nn_conv import (
    ACT_CLIP,
    ACT_HARDSWISH,
    ACT_NONE,
    ACT_RELU,
    ACT_SILU,
    ConvWeight,
    prepared_direct,
)
from onnxviz.runtime.kernels.nn_conv_nhwc import (
    FUSED_ACTIVATIONS,
    Activation,
    PoolWindow,
    activate_in_place,
)
from onnxviz.runtime.plan import (
    GraphPlan,
    PlanNode,
    fused_node,
    liveness,
    plain_kernel,
    steps_node,
)
from onnxviz.runtime.prefold import prefold
from onnxviz.runtime.prepared import prepare
from onnxviz.runtime.shape_flow import complete_shapes

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_F32 = np.dtype(np.float32)
# The steps that end a conv chain ("hswish": the Mul of a written-out HardSwish, whose
# HardSigmoid step, "hsig", comes just before it; "silu": the Mul of a SiLU, y *
# Sigmoid(y), whose Sigmoid step, "sig", comes just before it).
_ACTIVATIONS = frozenset({"relu", "act", "clip", "leaky", "hswish", "silu"})
# The written-out y * gate(y) pairs a conv chain ends with: (gate op, its kind, the Mul's).
_GATED = (("HardSigmoid", "hsig", "hswish"), ("Sigmoid", "sig", "silu"))


def run_nodes(plan: GraphPlan) -> list[PlanNode]:
    """The node list of ``plan`` for unwatched runs (made once per plan)."""
    nodes = plan.run_nodes
    if nodes is None:
        # The foldable nodes folded first, so the specializers see their values as
        # constants (prefold.py).
        folded = prefold(plan)
        nodes = plan.run_nodes = _fuse(plan, folded)
    return nodes


def _constant_slots(plan: GraphPlan) -> set[int]:
    const = {s for s, _ in plan.constants}
    const.update(plan.outer_constants)
    for pn in plan.nodes:
        if pn.foldable:
            const.update(s for s in pn.outputs if s >= 0)
    return const


def _is_inference_batch_norm(pn: PlanNode) -> bool:
    if pn.kind != "kernel" or pn.domain != "" or pn.op_type != "BatchNormalization":
        return False
    if len(pn.inputs) != 5 or len(pn.outputs) != 1 or min(pn.inputs) < 0:
        return False
    attrs = pn.attrs
    if pn.opset < 7 and not attrs.get("is_test"):
        return False
    return bool(attrs.get("spatial", 1)) and not attrs.get("training_mode", 0)


def _affine_step(pn: PlanNode, y: int, const: set[int]) -> str | None:
    """How ``pn`` continues a Conv's chain on slot ``y`` ("bn", "mul", "add", "relu",
    "act": another activation of FUSED_ACTIVATIONS, "clip", "leaky"), or None."""
    if pn.kind != "kernel" or pn.domain != "" or len(pn.outputs) != 1:
        return None
    if pn.op_type == "Relu":
        return "relu" if tuple(pn.inputs) == (y,) else None
    if pn.op_type in FUSED_ACTIVATIONS:
        return "act" if tuple(pn.inputs) == (y,) else None
    if pn.op_type == "LeakyRelu":
        return "leaky" if tuple(pn.inputs) == (y,) else None
    if pn.op_type == "Clip":
        # Bounds: attributes before opset 11, constant (or absent) inputs after.
        bounds = pn.inputs[1:]
        ok = pn.inputs[:1] == (y,) and all(s < 0 or (s in const and s != y) for s in bounds)
        return "clip" if ok else None
    adds = (pn.op_type == "Add" and pn.opset >= 7) or pn.op_type == "Sum"
    if adds and len(pn.inputs) == 2 and pn.inputs.count(y) == 1:
        other = pn.inputs[1] if pn.inputs[0] == y else pn.inputs[0]
        if other >= 0 and other not in const:
            return "residual"
    if pn.op_type == "BatchNormalization":
        ok = (
            _is_inference_batch_norm(pn)
            and pn.inputs[0] == y
            and y not in pn.inputs[1:]
            and all(s in const for s in pn.inputs[1:])
        )
        return "bn" if ok else None
    if pn.op_type in ("Mul", "Add") and pn.opset >= 7 and len(pn.inputs) == 2:
        a, b = pn.inputs
        if (a == y and b in const) or (b == y and a in const):
            return pn.op_type.lower()
    return None


def _fuse(plan: GraphPlan, folded: dict[int, Any]) -> list[PlanNode]:
    const = _constant_slots(plan)
    keep = {s for s in plan.output_slots if s >= 0}
    constants = dict(plan.constants)
    constants.update(plan.outer_constants)  # (a body's: the enclosing initializers)
    constants.update(folded)
    nodes = plan.nodes
    if trim_routing():
        nodes = trim_convs(nodes, const, constants, keep)
    nodes, reshaped = pad_convs(nodes, const, constants, keep)
    users: dict[int, list[int]] = {}
    producer: dict[int, int] = {}  # slot -> position of the node making it
    for i, pn in enumerate(nodes):
        for s in (*pn.inputs, *pn.implicit):
            if s >= 0:
                users.setdefault(s, []).append(i)
        for s in pn.outputs:
            if s >= 0:
                producer[s] = i
    # Position of a chain's last step -> (head position, step positions, fused node maker).
    chains: dict[int, tuple[int, list[int], Callable[..., PlanNode]]] = {}
    absorbed: set[int] = set()
    claimed: set[int] = set()  # steps of a chain already made (two Convs can meet at an Add)

    def take(positions: list[int], make: Callable[[], PlanNode], into: set[int]) -> None:
        """The node ``make()`` replaces the nodes at ``positions`` (placed at the last);
        they are added to ``into``, the set later finders skip."""
        chains[positions[-1]] = (positions[0], positions[1:], lambda _first, _rest: make())
        absorbed.update(positions[:-1])
        into.update(positions)

    convs = find_qdq_convs(nodes, users, const, keep, constants)
    # Residual Adds between QDQ pairs: over the codes; the convs they read end at their
    # quantizers, and the convs that read their output pairs read the codes.
    pools = find_qdq_max_pools(nodes, users, producer, keep, convs, claimed) if convs else []
    adds = (
        find_qdq_adds(nodes, users, producer, keep, const, convs, claimed, pools) if convs else []
    )
    exposed = {nodes[a.out_dq].outputs[0]: a.out_dq for a in (*pools, *adds)}
    codes_readers = {
        chain[0]
        for chain in convs
        if nodes[chain[0]].op_type == "Conv" and nodes[chain[0]].inputs[0] in exposed
    }
    settle_float_outputs([*pools, *adds], nodes, users, keep, codes_readers)
    for positions in convs:
        node = functools.partial(qdq_conv_node, nodes, positions, exposed)
        take(positions, node, claimed)
    for found in pools:
        take(found.positions, functools.partial(qdq_max_pool_node, nodes, found), claimed)
    for add in adds:
        take(add.positions, functools.partial(qdq_add_node, nodes, add), claimed)
    # Pairs over values already on their grid (after a Reshape, a Transpose) give them
    # back; a QDQ MatMul reading one reads its codes back from the float value.
    for positions in find_idle_pairs(nodes, users, producer, keep, claimed, constants):
        take(positions, functools.partial(idle_pair_node, nodes, positions, constants), claimed)
    qdq_matmuls, dropped = find_qdq_matmuls(nodes, users, producer, const, keep, claimed)
    for qdq_matmul in qdq_matmuls:
        maker = functools.partial(qdq_matmul_node, nodes, qdq_matmul)
        take(qdq_matmul.positions[2:], maker, claimed)
    absorbed.update(dropped)  # activation dequantizers read only by fused MatMuls
    for positions in find_channel_shuffles(nodes, users, keep, claimed, constants):
        # ShuffleNet's Reshape -> Transpose -> Reshape: one copy in its input's layout.
        shuffle = functools.partial(channel_shuffle_node, nodes, positions, constants)
        take(positions, shuffle, claimed)
    for positions in find_se_gates(nodes, users, const, keep, claimed):
        # Before the conv chains: the block's two convs are its own.
        take(positions, functools.partial(steps_node, nodes, positions, SEGate), claimed)
    # A separable QDQ model's 1x1 convs (the QDQ convs above left them): integer products
    # over channels-last rows, before the float conv chains would take them.
    for pointwise in find_qdq_pointwise(nodes, users, producer, const, keep, claimed, constants):
        maker = functools.partial(qdq_pointwise_node, nodes, pointwise)
        take(pointwise.positions, maker, claimed)
    # Elementwise chains of one quantized value (a QDQ SiLU, HardSwish): a table of its
    # codes, before the float chains and pairs would take their nodes.
    for table in find_qdq_tables(nodes, users, producer, const, keep, claimed, absorbed, constants):
        take(table.positions, functools.partial(qdq_table_node, nodes, table), claimed)
    for i, pn in enumerate(nodes):
        if i in claimed:
            continue
        bias_add = _matmul_bias_add(pn, nodes, users, const, keep)
        if bias_add is not None and bias_add not in claimed:
            chains[bias_add] = (i, [bias_add], _matmul_bias_node)
            claimed.add(bias_add)
            absorbed.add(i)
            continue
        if (
            not plain_kernel(pn, "Conv")
            or len(pn.inputs) < 2
            or pn.inputs[1] not in const
            or (len(pn.inputs) > 2 and pn.inputs[2] >= 0 and pn.inputs[2] not in const)
        ):
            continue
        steps: list[int] = []
        kinds: list[str] = []
        y = pn.outputs[0]
        while y >= 0 and y not in keep and not _ACTIVATIONS.intersection(kinds):
            gated = _gated_tail(nodes, users, y, keep, claimed)
            if gated is not None:
                steps.extend(gated[0])
                kinds.extend(gated[1])
                break
            consumers = users.get(y, [])
            if len(consumers) != 1 or consumers[0] in claimed:
                break
            kind = _affine_step(nodes[consumers[0]], y, const)
            if kind is None or ("residual" in kinds and kind not in _ACTIVATIONS):
                break
            steps.append(consumers[0])
            kinds.append(kind)
            y = nodes[consumers[0]].outputs[0]
        pool = _trailing_max_pool(nodes, users, steps[-1] if steps else i, keep, claimed, kinds)
        if pool is not None:
            steps.append(pool)
            kinds.append("pool")
        last = steps[-1] if steps else i
        chains[last] = (
            i,
            steps,
            lambda head, chain, kinds=kinds: _conv_chain_node(head, chain, kinds),
        )
        claimed.update(steps)
        if steps:
            absorbed.add(i)
            absorbed.update(steps[:-1])
    taken = absorbed | claimed | set(chains)
    for positions in find_integer_matmuls(nodes, users, const, keep, taken):
        take(positions, functools.partial(integer_matmul_node, nodes, positions), taken)
    for positions in find_layer_norms(nodes, users, const, keep, taken):
        norm = functools.partial(steps_node, nodes, positions, LayerNormChain)
        take(positions, norm, taken)
    for positions in find_rms_norms(nodes, users, const, keep, taken):
        norm = functools.partial(steps_node, nodes, positions, RmsNormChain)
        take(positions, norm, taken)
    # Chains before pairs: a chain takes the pairs between its ops as steps.
    declared = plan.shapes
    if reshaped:  # (a quantize-dequantize pair a Pad no longer pads: its shapes are new)
        declared = {s: shape for s, shape in declared.items() if s not in reshaped}
    shapes = complete_shapes(nodes, declared, constants)  # (tensor operands: declared)
    # Shape arithmetic keeps its results between runs (shape_memo.py), which a chain
    # would not: a GPT-2's 1 / sqrt(head size) from Shape -> Slice -> Cast, a Sqrt -> Div
    # chain on one value, cost 7 us a run where the kept result costs a lookup.
    arithmetic = shape_memo.memo_slots(nodes, constants)
    for tensor_operands in (False, True):  # (chains of one value first: find_chains)
        for head_slot, positions in find_chains(
            nodes,
            users,
            producer,
            const,
            keep,
            taken | arithmetic,
            constants,
            tensor_operands,
            shapes,
        ):
            maker = functools.partial(chain_node, nodes, head_slot, positions, const)
            take(positions, maker, taken)
    for positions in find_qdq_pairs(nodes, users, keep, taken):
        take(positions, functools.partial(qdq_node, nodes, positions), taken)
    out: list[PlanNode] = []
    for j, pn in enumerate(nodes):
        if j in absorbed:
            continue
        chain = chains.get(j)
        if chain is None:
            out.append(dataclasses.replace(pn))
        else:
            head, steps, make = chain
            out.append(make(nodes[head], [nodes[k] for k in steps]))
    plan_channels_last(out, keep, constants)
    liveness(out, plan.slots, plan.output_names)
    for pn in out:
        if isinstance(pn.fused, ConvChain):
            pn.fused.residual_dies = _dies_here(pn, pn.fused.residual)
    prepare(out, fast=True, constants=constants)
    return out


def _trailing_max_pool(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    last: int,
    keep: set[int],
    claimed: set[int],
    kinds: list[str],
) -> int | None:
    """The position of a MaxPool that alone reads the chain's result (the node at
    ``last``), with a window the compiled pool runs as it is (nn_pool.fixed_window): the
    chain then ends with it, so a held direct conv pools its output rows while they are in
    cache (ConvChain.pool).  None with a residual (the kernel's bands would need the
    addend's rows too) or when the result is a graph output or read elsewhere."""
    y = nodes[last].outputs[0]
    if "residual" in kinds or y < 0 or y in keep:
        return None
    consumers = users.get(y, [])
    if len(consumers) != 1 or consumers[0] in claimed:
        return None
    pool = nodes[consumers[0]]
    if (
        not plain_kernel(pool, "MaxPool")
        or list(pool.inputs) != [y]
        or nn_pool.fixed_window(pool.attrs) is None
    ):
        return None
    return consumers[0]


def _dies_here(pn: PlanNode, place: int | None) -> bool:
    """Whether the input at ``place`` of the (live-marked) node ``pn`` is freed after it,
    read by it once."""
    if place is None:
        return False
    slot = pn.inputs[place]
    return slot >= 0 and slot in pn.free_after and pn.inputs.count(slot) == 1


def _matmul_bias_add(
    pn: PlanNode,
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    const: set[int],
    keep: set[int],
) -> int | None:
    """Position of the Add that takes a constant-matrix MatMul's output (its only use)
    and a constant, or None."""
    if not plain_kernel(pn, "MatMul") or len(pn.inputs) != 2 or pn.inputs[1] not in const:
        return None
    y = pn.outputs[0]
    consumers = users.get(y, [])
    if y < 0 or y in keep or len(consumers) != 1:
        return None
    add = nodes[consumers[0]]
    if add.kind != "kernel" or add.domain != "" or add.op_type != "Add" or add.opset < 7:
        return None
    if len(add.inputs) != 2 or len(add.outputs) != 1:
        return None
    a, b = add.inputs
    if (a == y and b in const and b != y) or (b == y and a in const):
        return consumers[0]
    return None


def _matmul_bias_node(matmul: PlanNode, steps: list[PlanNode]) -> PlanNode:
    add = steps[0]
    place = 0 if add.inputs[1] == matmul.outputs[0] else 1  # the Add's constant operand
    return fused_node(
        matmul,
        add,
        (*matmul.inputs, add.inputs[place]),
        (*matmul.input_names, add.input_names[place]),
        MatMulBias(matmul, add),
    )


# A cache's missing entry (None is a cached answer).
_UNSET: Any = object()
# The direct kernel's epilogue with no activation (its calls' `act`).
_NO_ACT = (ACT_NONE, math.nan, math.nan)


class MatMulBias:
    """A MatMul by a constant matrix and the Add of a constant row vector after it, as one
    GEMM onto the bias."""

    def __init__(self, matmul: PlanNode, add: PlanNode) -> None:
        self.matmul = matmul
        self.add = add
        # The weight of the last compiled product and its packed form, and the bias row
        # (made from the constant c): found again by identity, without the weight
        # cache's lookup (most of a small product's fixed cost).
        self._weight: Any = None
        self._packed: Any = None
        self._c: Any = None
        self._bias: Any = None
        # The last packed product's call, held while the same read-only weight and bias
        # come with a float32 input the kernel takes at the same level: (weight, c, K,
        # N, level, call).  The checks below were half of a 32-row product's 15 us.
        self._held: tuple[Any, Any, int, int, int | None, Any] | None = None
        # The compiled loop's first try (quiet_loop.step_mode): the same product as a
        # held product (packed_gemm.held_product) once it is held, else None.
        self.quick: Any = None

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        a, w, c = ins
        held = self._held
        if (
            held is not None
            and w is held[0]
            and c is held[1]
            and type(a) is np.ndarray
            and a.dtype is _F32
            and a.ndim >= 2
            and a.shape[-1] == held[2]
            and native.level() == held[4]
        ):
            # (a transposed input, a TorchScript attention's Q/K/V projection's, as the
            # path below takes it: copied in C order; it remade the held calls each time)
            a2 = np.ascontiguousarray(a).reshape(-1, held[2])
            if packed_gemm.use_for(a2.shape[0], held[2], held[3]):
                out = np.empty((a2.shape[0], held[3]), dtype=_F32)
                held[5](a2, out)
                return [out.reshape(a.shape[:-1] + (held[3],))]
        if (
            type(a) is np.ndarray
            and type(w) is np.ndarray
            and type(c) is np.ndarray
            and a.dtype in _FLOATS
            and w.dtype == a.dtype
            and c.dtype == a.dtype
            and w.ndim == 2
            and a.ndim >= 2
            and a.shape[-1] == w.shape[0]
            and 1 <= c.ndim <= a.ndim
            and c.size == w.shape[1]
            and c.shape[-1] == w.shape[1]
        ):
            # (a strided input in C order, as MatMul's route and the held products take
            # it: the stepped MatMul's product)
            a2 = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
            out = np.empty((a2.shape[0], w.shape[1]), dtype=a.dtype)
            if a.dtype == np.float32:
                mod = packed_gemm.module()
                p = None
                if mod is not None and packed_gemm.use_for(a2.shape[0], w.shape[0], w.shape[1]):
                    if w is self._weight and not w.flags.writeable:
                        p = self._packed
                    else:
                        p = packed_gemm.packed(w, mod)
                        self._weight, self._packed = (w, p) if p is not None else (None, None)
                if p is not None:
                    # The compiled GEMM by the weight packed once, the bias added to its
                    # accumulators (kernels/packed_gemm.py).
                    bias = self._bias
                    if c is not self._c or c.flags.writeable:
                        bias = np.ascontiguousarray(c.reshape(-1))
                        self._c, self._bias = c, bias
                    packed_gemm.matmul_packed(mod, a2, p, out, bias=bias)
                    level = native.level()
                    if (
                        not w.flags.writeable
                        and not c.flags.writeable
                        and (held is None or held[:2] != (w, c) or held[4] != level)
                    ):
                        call = packed_gemm.product_call(mod, p, bias)
                        self._held = (w, c, w.shape[0], w.shape[1], level, call)
                        if c.ndim <= 2:  # (the held product's outputs add no axes)
                            self.quick = packed_gemm.held_product(
                                mod, p, bias, (w, c), quiet_loop.decline
                            )
                    return [out.reshape(a.shape[:-1] + (w.shape[1],))]
            out[...] = c.reshape(-1)
            blas.gemm(a2, w, out, accumulate=True)
            return [out.reshape(a.shape[:-1] + (w.shape[1],))]
        y = ex.call_kernel(self.matmul, [a, w])[0]
        args = [y, c] if self.add.inputs[0] == self.matmul.outputs[0] else [c, y]
        return ex.call_kernel(self.add, args)


def _gated_tail(
    nodes: list[PlanNode], users: dict[int, list[int]], y: int, keep: set[int], claimed: set[int]
) -> tuple[list[int], list[str]] | None:
    """The positions and kinds of the first pair of `_GATED` written out on ``y``, or
    None."""
    for gate, gate_kind, mul_kind in _GATED:
        pair = _gated_pair(nodes, users, y, keep, claimed, gate)
        if pair is not None:
            return pair, [gate_kind, mul_kind]
    return None


def _gated_pair(
    nodes: list[PlanNode],
    users: dict[int, list[int]],
    y: int,
    keep: set[int],
    claimed: set[int],
    gate: str,
) -> list[int] | None:
    """The positions of y * gate(y) written out on ``y``: g = gate(y) and Mul(y, g)
    either way round, g read by that Mul only; else None.  ``gate`` HardSigmoid: a
    HardSwish (opset < 14 exporters); Sigmoid: a SiLU (torch's SiLU, EfficientNet's and
    YOLO's activation, exported as the two nodes)."""
    consumers = users.get(y, [])
    if len(consumers) != 2 or any(c in claimed for c in consumers):
        return None
    hs_pos = next((c for c in consumers if plain_kernel(nodes[c], gate)), None)
    if hs_pos is None:
        return None
    mul_pos = consumers[1] if consumers[0] == hs_pos else consumers[0]
    hs, mul = nodes[hs_pos], nodes[mul_pos]
    g = hs.outputs[0]
    if tuple(hs.inputs) != (y,) or g < 0 or g in keep or users.get(g) != [mul_pos]:
        return None
    if not plain_kernel(mul, "Mul") or mul.opset < 7 or sorted(mul.inputs) != sorted((y, g)):
        return None
    return [hs_pos, mul_pos] if hs_pos < mul_pos else None


def _conv_chain_node(conv: PlanNode, steps: list[PlanNode], kinds: list[str]) -> PlanNode:
    ins = list(conv.inputs) + [-1] * (3 - len(conv.inputs))
    names = list(conv.input_names) + [""] * (3 - len(conv.input_names))
    # Per step: where its constant operands sit in the fused node's inputs (a value the
    # chain makes itself, as the conv's output a written-out HardSwish reads twice, is
    # none).
    operands: list[list[int]] = []
    inside = {conv.outputs[0], *(pn.outputs[0] for pn in steps)}
    y = conv.outputs[0]
    for pn in steps:
        places = []
        for s, name in zip(pn.inputs, pn.input_names):
            if s != y and s not in inside:
                places.append(len(ins))
                ins.append(s)
                names.append(name)
        operands.append(places)
        y = pn.outputs[0]
    last = steps[-1] if steps else conv
    return fused_node(conv, last, ins, names, ConvChain(conv, steps, kinds, operands))


class ConvChain:
    """A Conv and the per-channel affine steps and Relu after it, as one Conv with folded
    (and repacked) weights."""

    def __init__(
        self, conv: PlanNode, steps: list[PlanNode], kinds: list[str], operands: list[list[int]]
    ) -> None:
        # A MaxPool the chain ends with (`_trailing_max_pool`): applied to the chain's
        # result (its window for the held conv, which pools band by band: ResNet-50's
        # stem and its pool; None: a window the held call does not take).
        self.pool: PlanNode | None = None
        self.pool_window: PoolWindow | None = None
        if kinds and kinds[-1] == "pool":
            self.pool = steps[-1]
            self.pool_window = nn_pool.fixed_window(self.pool.attrs)
            steps, kinds, operands = steps[:-1], kinds[:-1], operands[:-1]
        self.conv = conv
        self.steps = steps
        self.kinds = kinds
        self.operands = operands
        # The last step when it is an activation, applied in place to the conv's output.
        self.activation = steps[-1] if kinds and kinds[-1] in _ACTIVATIONS else None
        # A final Clip's (min, max) input places in the fused node (None: not given).
        self.clip_places: tuple[int | None, int | None] | None = None
        if kinds and kinds[-1] == "clip":
            clip, places = steps[-1], iter(operands[-1])
            given = [next(places) for _ in clip.inputs[1:]]
            self.clip_places = (
                given[0] if len(given) > 0 and clip.inputs[1] >= 0 else None,
                given[1] if len(given) > 1 and clip.inputs[2] >= 0 else None,
            )
        # Where the residual (a live value added after the affine steps) sits in the
        # fused node's inputs.
        self.residual: int | None = None
        if "residual" in kinds:
            self.residual = operands[kinds.index("residual")][0]
        # A written-out HardSwish whose HardSigmoid is HardSwish's gate in float32.
        self.hard_swish_exact = False
        if kinds and kinds[-1] == "hswish":
            attrs = steps[-2].attrs
            self.hard_swish_exact = bool(
                np.float32(attrs.get("alpha", 0.2)) == np.float32(1.0 / 6.0)
                and float(attrs.get("beta", 0.5)) == 0.5
            )
        self._key: tuple[Any, ...] | None = None
        self._places: list[int] | None = None  # where the constants of _key sit in ins
        self._prepared: tuple[ConvWeight, np.ndarray | None] | None = None
        # An NCHW conv's prepared direct call (`nn_conv.prepared_direct`: ``call(x,
        # addend, act)``), per input shape (None: the direct kernel does not run it);
        # emptied when the constants change.
        self._activated: dict[tuple[int, ...], Any] = {}
        # fusion_layout.ChannelsLast: whether this conv reads and writes channels-last.
        self.layout: Any = None
        # The compiled call of this chain the run loop tries first (native/_runloop.c's
        # FUSED steps): made on the first call that runs channels-last, when its runner
        # has one (a 1x1 conv's, nn_conv_nhwc._Pointwise.held); None again when the
        # constants change.  `_held_tried`: made or found none for these constants.
        self.quick: Any = None
        self._held_tried = False
        # Whether the residual's slot is freed after this chain's node (set with the
        # unwatched node list's liveness, fusion._fuse): the held call may write over it.
        self.residual_dies = False

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        got = self._chain(ex, ins)
        return got if self.pool is None else ex.call_kernel(self.pool, got)

    def _chain(self, ex: Executor, ins: list[Any]) -> list[Any]:
        """The chain's result before its pool."""
        # The constants the fold read (never the residual: a new array every run), the
        # same objects as last run (compared in C: this runs for every conv of a run).
        places = self._places
        if places is None:  # a node's inputs are the same places every run
            places = self._places = [i for i in range(len(ins)) if i and i != self.residual]
        key = self._key
        if key is None or not all(map(is_, key, map(ins.__getitem__, places))):
            self._prepared = self._prepare(ins)
            self._key = tuple(ins[i] for i in places)
            self.quick, self._held_tried = None, False
            self._activated = {}
        x = ins[0]
        prepared = self._prepared
        if prepared is None or type(x) is not np.ndarray or x.dtype != prepared[0].array.dtype:
            return self._one_by_one(ex, ins)
        if self.clip_places is not None and self._clip_bounds(ins, x) is None:
            return self._one_by_one(ex, ins)  # bounds the kernel must check or broadcast
        if self.layout is not None:
            addend = None if self.residual is None else ins[self.residual]
            w, b = prepared[0].array, prepared[1]
            act = self._kernel_act(ins, x)
            got = self.layout(x, w, b, self.conv.attrs, addend, False, act)
            if got is not None:
                y, done = got
                if not self._held_tried:
                    self._hold(ex, ins, x, w, b, act)
                return [y if done else self._activate(y, ins)]
        if self.residual is None and self.activation is not None:
            act = self._kernel_act(ins, x)
            if act is not None:
                y = self._conv_activated(x, prepared, act)
                if y is not None:
                    if not self._held_tried:
                        self._hold_nchw(ins, x, act)
                    return [y]
        if self.residual is None:
            # A plain NCHW conv by the direct kernel: its prepared call for this shape,
            # the one the conv's own call makes, without the layers in between (executor,
            # kernel checks, the call cache's keys): the same route and kernel, so the
            # same bits.  Others (and calls it declines) go through the layers.
            y = None if self.activation is not None else self._conv_activated(x, prepared, _NO_ACT)
            if y is None:
                y = ex.call_kernel(self.conv, [x, prepared[0], prepared[1]])[0]
            elif not self._held_tried:
                self._hold_nchw(ins, x, None)
        else:
            spec = self.conv.spec
            if spec is None or spec.needs_ctx:
                return self._one_by_one(ex, ins)
            addend = ins[self.residual]
            try:
                if _spread_over_space(addend, x, prepared[0].array.shape[0]):
                    # A per-channel (or per-item) value added to every position: a
                    # diffusion UNet's time embedding.  The conv as it is (its prepared
                    # call when the direct kernel runs it: the kernel's bits without the
                    # kernel's Python, a diffusion UNet's 32 px convs 10-15 us each),
                    # then numpy's broadcast add, as the Add step gives it.
                    y = self._conv_activated(x, prepared, _NO_ACT)
                    if y is None:
                        y = spec.fn(x, prepared[0], prepared[1], **self.conv.attrs)
                    elif not self._held_tried and self.activation is None:
                        self._hold_nchw(ins, x, None, spread=True)
                    np.add(y, addend, out=y)
                else:
                    # A residual of the output's shape: the prepared call takes it (into
                    # the kernel's epilogue when it is float32 and C-contiguous, else
                    # numpy adds it after), the conv's own route and kernel without its
                    # layers (27-35 us a 3x3 conv of 32-64 channels on small images).
                    y = self._conv_activated(x, prepared, None, addend)
                    if y is None:
                        y = spec.fn(x, prepared[0], prepared[1], addend=addend, **self.conv.attrs)
                    elif not self._held_tried and self.activation is None:
                        self._hold_nchw(ins, x, None)
            except Exception:  # the steps one by one raise it with the right node named
                return self._one_by_one(ex, ins)
        return [self._activate(y, ins)]

    def _conv_activated(
        self,
        x: np.ndarray,
        prepared: tuple[ConvWeight, np.ndarray | None],
        act: Activation | None,
        addend: Any = None,
    ) -> np.ndarray | None:
        """The NCHW conv with the chain's activation in the direct kernel's epilogue, or
        with ``addend`` added (`nn_conv.prepared_direct`: the conv's route and kernel, the
        activation's and the addition's operations, so the steps' bits), or None when the
        kernel does not run it."""
        shape = x.shape
        call = self._activated.get(shape, _UNSET)
        if call is _UNSET:
            call = self._activated[shape] = prepared_direct(
                x, prepared[0].array, prepared[0], prepared[1], self.conv.attrs
            )
        return None if call is None else call(x, addend, act)  # type: ignore[no-any-return]

    def _hold(
        self,
        ex: Executor,
        ins: list[Any],
        x: np.ndarray,
        w: np.ndarray,
        b: Any,
        act: Activation | None,
    ) -> None:
        """Make `quick` for calls like this one: the layout's compiled call of the conv,
        when it has one and the chain's activation is in it (an activation the kernel
        does not apply stays with `_activate`).  It may write over the residual when the
        run allows in-place results (inplace.py's runs) and the residual's slot dies at
        this node (its last read; the call still checks that nothing else holds it)."""
        self._held_tried = True
        if (self.activation is not None and act is None) or (
            self.pool is not None and self.pool_window is None
        ):
            return
        try:
            self.quick = self.layout.held(
                x,
                w,
                b,
                act,
                len(ins),
                self.residual,
                tuple(self._places or ()),
                tuple(self._key or ()),
                quiet_loop.decline,
                ex.inplace and self.residual_dies,
                self.pool_window,
            )
        except ValueError:
            if self.pool is None:
                raise
            # A window past the conv's padded output (the held conv refuses it): the
            # chain's own call runs the pool kernel, which answers as stepping does.
            self.quick = None

    def _hold_nchw(
        self, ins: list[Any], x: np.ndarray, act: Activation | None, spread: bool = False
    ) -> None:
        """Make `quick` for an NCHW conv its prepared direct call just ran (activation
        ``act`` in the kernel, or none; the residual, when the chain adds one, in the
        kernel's epilogue): that call's compiled form (`nn_conv._PreparedNchw.held`: the
        same kernel and arguments, so the same bits, without the 10-15 us of Python each
        of a diffusion UNet's 32 px convs spent around its kernel).  Not with a pool after
        the conv (the node's output is the pool's).  ``spread``: the residual is one value
        per item and channel (a time embedding), which the held call adds after its kernel
        as numpy's broadcast add does here.  (A chain whose layout declined this
        call's NCHW input gets it too: the compiled call takes C-contiguous NCHW images
        only, and hands every other to the chain's own call.)"""
        self._held_tried = True
        if self.pool is not None:
            return
        held = getattr(self._activated.get(x.shape), "held", None)
        if held is None:
            return
        self.quick = held(
            act, len(ins), self.residual, tuple(self._places or ()), tuple(self._key or ()),
            quiet_loop.decline, spread,
        )  # fmt: skip

    def _activate(self, y: np.ndarray, ins: list[Any]) -> np.ndarray:
        act = self.activation
        if act is None:
            return y
        if self.kinds[-1] == "hswish":
            self._hard_swish_pair(y)
            return y
        if self.kinds[-1] == "silu":
            # The Sigmoid node's kernel on the conv's output, then the Mul's product (y *
            # g is g * y), in place: the stepped run's values.
            dense = _dense(y)
            dense *= sigmoid(dense)
            return y
        # The conv's output is fresh and nobody else holds it.  Relu and Clip are the
        # kernels' own row-wise max/min (math_activation), on the contiguous buffer
        # whatever its layout (NCHW or channels-last).
        if act.op_type == "Relu":
            dense = _dense(y)
            relu_into(dense, dense)
        elif act.op_type == "Clip":
            bounds = self._clip_bounds(ins, y)
            assert bounds is not None  # checked before the conv ran
            dense = _dense(y)
            clip_into(dense, bounds[0], bounds[1], dense)
        elif act.op_type == "LeakyRelu":
            leaky_relu_in_place(_dense(y), float(act.attrs.get("alpha", 0.01)))
        else:
            activate_in_place(y, act.op_type, act.attrs)
        return y

    def _hard_swish_pair(self, y: np.ndarray) -> None:
        """A written-out HardSwish in place: the HardSigmoid on a copy (the same steps as
        its kernel), then the product (commutative: y * g is g * y).  With alpha
        float32(1/6) and beta 0.5 in float32 these are the HardSwish kernel's operations,
        so the compiled one runs."""
        if y.dtype == np.float32 and self.hard_swish_exact:
            activate_in_place(y, "HardSwish", {})
            return
        dense = _dense(y)
        gate = dense.copy()
        activate_in_place(gate, "HardSigmoid", self.steps[-2].attrs)
        dense *= gate

    def _kernel_act(self, ins: list[Any], x: np.ndarray) -> Activation | None:
        """The chain's activation as the compiled depthwise kernel applies it (the same
        operations as `_activate`, so the same numbers), or None when it has none or one
        the kernel does not do (Clip with a NaN bound among them)."""
        act = self.activation
        if act is None or x.dtype != np.float32:
            return None
        if self.kinds[-1] == "hswish":
            return (ACT_HARDSWISH, math.nan, math.nan) if self.hard_swish_exact else None
        if self.kinds[-1] == "silu":
            # The epilogue's sigmoid is the compiled one the Sigmoid kernel runs; without
            # it (the chain module off) the kernel's is numpy's, and `_activate` runs it.
            return (ACT_SILU, math.nan, math.nan) if chain_program.CHAIN is not None else None
        if act.op_type == "Relu":
            return (ACT_RELU, math.nan, math.nan)
        if act.op_type == "HardSwish":
            return (ACT_HARDSWISH, math.nan, math.nan)
        if act.op_type == "Clip":
            bounds = self._clip_bounds(ins, x)
            if bounds is None:
                return None
            # A bound as float32 (numpy's max/min of a float32 array take it so too).
            lo, hi = (math.nan if v is None else float(np.float32(v)) for v in bounds)
            if any(v is not None and math.isnan(float(v)) for v in bounds):
                return None  # a NaN bound: numpy's NaN result, not "no bound"
            return (ACT_CLIP, lo, hi)
        return None

    def _clip_bounds(self, ins: list[Any], x: np.ndarray) -> tuple[Any, Any] | None:
        """The chain's Clip bounds (None: no bound), or None when a bound is not a
        one-element array of x's dtype and at most its rank (then the Clip kernel runs
        as a node: it checks the type, and a bound of more axes broadcasts)."""
        if self.clip_places is None:
            return None
        act = self.steps[-1]
        if act.opset < 11:
            lo, hi = act.attrs.get("min"), act.attrs.get("max")
            return (None if lo is None else float(lo), None if hi is None else float(hi))
        got: list[Any] = [None, None]
        for k, place in enumerate(self.clip_places):
            v = ins[place] if place is not None else None
            if v is None:
                continue
            if type(v) is not np.ndarray or v.dtype != x.dtype or v.size != 1 or v.ndim > x.ndim:
                return None
            got[k] = v.reshape(())
        return got[0], got[1]

    def _one_by_one(self, ex: Executor, ins: list[Any]) -> list[Any]:
        """The nodes as they are (values the fold does not cover)."""
        y = ex.call_kernel(self.conv, ins[: len(self.conv.inputs)])[0]
        made = {self.conv.outputs[0]: y}  # the chain's own values by slot
        for pn, places in zip(self.steps, self.operands):
            it = iter(places)
            args = [made[s] if s in made else ins[next(it)] for s in pn.inputs]
            y = ex.call_kernel(pn, args)[0]
            made[pn.outputs[0]] = y
        return [y]

    def _prepare(self, ins: list[Any]) -> tuple[ConvWeight, np.ndarray | None] | None:
        w, b = ins[1], ins[2]
        if type(w) is not np.ndarray or w.dtype not in _FLOATS or w.ndim < 3:
            return None
        if b is not None and (type(b) is not np.ndarray or b.dtype != w.dtype):
            return None
        if all(kind in _ACTIVATIONS or kind in ("residual", "hsig", "sig") for kind in self.kinds):
            return ConvWeight(w), b
        folded = self._fold(w, b, ins)
        return None if folded is None else (ConvWeight(folded[0]), folded[1])

    def _fold(
        self, w: np.ndarray, b: np.ndarray | None, ins: list[Any]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        m = w.shape[0]
        k = np.ones(m)
        if b is None:
            offset = np.zeros(m)
        elif b.shape == (m,):
            offset = b.astype(np.float64)
        else:
            return None
        for pn, kind, places in zip(self.steps, self.kinds, self.operands):
            consts = [ins[p] for p in places]
            if kind == "bn":
                if any(
                    type(c) is not np.ndarray or c.dtype != w.dtype or c.shape != (m,)
                    for c in consts
                ):
                    return None
                scale, beta, mean, var = (c.astype(np.float64) for c in consts)
                kb = scale / np.sqrt(var + float(pn.attrs.get("epsilon", 1e-5)))
                k = k * kb
                offset = (offset - mean) * kb + beta
            elif kind in ("mul", "add"):
                c = _per_channel(consts[0], w)
                if c is None:
                    return None
                if kind == "mul":
                    k = k * c
                    offset = offset * c
                else:
                    offset = offset + c
        wf = (w.astype(np.float64) * k.reshape((m,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        bf = offset.astype(w.dtype)
        # Constants from here on: read-only, so kernels may key their repacked forms on
        # them (kernels._weight_cache keys only arrays that cannot change).
        wf.flags.writeable = False
        bf.flags.writeable = False
        return wf, bf


def _spread_over_space(addend: Any, x: np.ndarray, m: int) -> bool:
    """Whether the residual ``addend`` of a conv of ``x`` into ``m`` channels is one
    value per item and channel (or fewer), broadcast over the output's positions: the
    conv's output keeps its shape when it is added (the fused conv takes only a residual
    of the output's own shape)."""
    if type(addend) is not np.ndarray or addend.dtype != x.dtype or addend.ndim > x.ndim:
        return False
    shape = (1,) * (x.ndim - addend.ndim) + addend.shape  # numpy aligns the last axes
    return shape[0] in (1, x.shape[0]) and shape[1] in (1, m) and all(d == 1 for d in shape[2:])


def _dense(y: np.ndarray) -> np.ndarray:
    """``y``'s buffer as a C-contiguous view when it is one (NCHW, or channels-last seen
    through its transpose), else ``y`` (numpy handles any layout, only slower)."""
    if y.flags.c_contiguous or y.ndim != 4:
        return y
    t = y.transpose(0, 2, 3, 1)
    return t if t.flags.c_contiguous else y


def _per_channel(c: Any, w: np.ndarray) -> np.ndarray | None:
    """A Mul/Add constant as a float64 vector per output channel, if it is one (it must
    broadcast against (N, M, *spatial) without growing the result)."""
    if type(c) is not np.ndarray or c.dtype != w.dtype or c.ndim > w.ndim:
        return None
    m = w.shape[0]
    shape = (1,) * (w.ndim - c.ndim) + c.shape
    if shape[0] != 1 or any(d != 1 for d in shape[2:]) or shape[1] not in (1, m):
        return None
    return np.broadcast_to(c.reshape(-1).astype(np.float64), (m,))
