"""Channels-last activations through conv chains, for unwatched runs (see fusion.py).

MobileNet-style models alternate depthwise and pointwise convs with elementwise
activations and squeeze-excite blocks in between.  The depthwise conv is cheaper
channels-last (kernels.nn_conv_nhwc: 20-40% on MobileNetV3's layers, its transposing
copies in and out gone), the pointwise conv is one GEMM either way, and the activations
and the SE block's broadcasting Mul do not care.  So in such a chain every conv writes
its output channels-last and the next conv reads it in place.

A channels-last value is still an (N, C, H, W) array (the transposed view of an
(N, H, W, C) buffer), so every reader sees the same numbers whatever it assumes about
memory: the choice here only moves where transposing copies happen, never what is
computed.  `plan_channels_last` decides per fused Conv node (fusion.ConvChain) whether
its output stays channels-last: when the value is not a graph output, every reader
(through elementwise ops and Add/Mul/Sub/Div, whose numpy results keep their operands'
layout) is a fused depthwise or pointwise conv or a ReduceMean/global pool, and the
layout pays.  Otherwise the conv hands out a plain NCHW array, as before (the chain's
exit).  A conv whose input arrives channels-last uses the channels-last kernel even when
its own output goes back to NCHW: reading the input in place costs less than the plain
kernel's transposing copy.  The SE block's spatial mean of a channels-last value runs as
`SpatialMean` (the node is swapped in the list here).

Plain convs (one group, a kernel larger than 1x1) join in when the compiled direct conv
runs them (float32, native/_conv.c through nn_conv_nhwc): it computes channels-last, so
a ResNet or UNet chain of them stays channels-last from the first conv after the stem's
pool to the global pool, with no transposing copy between its convs.  2-D MaxPool and
AveragePool pass the layout through (their compiled kernel pools a channels-last input
as such; when the pool's own readers want NCHW, as ResNet's head's Flatten after its 7x7
AveragePool, they pay a copy of the pool's smaller output, not the conv NCHW planes), and
a channel Concat with a channels-last input runs as `ChannelsLastConcat`: an Inception
block's branches and the pools and Concat between blocks stay channels-last too.

A ShuffleNet unit stays channels-last too: its grouped 1x1 convs ("grouped_pointwise",
nn_conv_nhwc._GroupedPointwise: each group's columns of the rows by the packed GEMM) and
its channel shuffle (fusion_shuffle.ChannelShuffle, a copy in its input's layout) take
and write the layout, so the depthwise conv between them reads it in place.

Stepped and watched runs never get here: they run plan.nodes, one plain kernel each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxviz.runtime import native, quiet_loop
from onnxviz.runtime.fusion_elementwise import ElementwiseChain
from onnxviz.runtime.fusion_qdq import QdqPair
from onnxviz.runtime.fusion_qdq_pointwise import QdqPointwise
from onnxviz.runtime.fusion_qdq_table import QdqTable
from onnxviz.runtime.fusion_se import SEGate, SpatialAxes
from onnxviz.runtime.fusion_shuffle import ChannelShuffle
from onnxviz.runtime.kernels import nn_pool
from onnxviz.runtime.kernels.nn_conv_nhwc import (
    Activation,
    ChannelsLastConv,
    PoolWindow,
    direct_available,
    is_channels_last,
    planes_copy,
    prepare_channels_last,
)
from onnxviz.runtime.plan import PlanNode, fused_node

if TYPE_CHECKING:
    from onnxviz.runtime.executor import Executor

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Ops whose result has their (first, 4-D) operand's layout and shape: numpy elementwise.
_ELEMENTWISE = frozenset(
    {
        "Relu",
        "HardSwish",
        "HardSigmoid",
        "Clip",
        "Sigmoid",
        "LeakyRelu",
        "Tanh",
        "Neg",
        "Abs",
        "Add",
        "Mul",
        "Sub",
        "Div",
    }
)
# Pools whose compiled kernel reads a channels-last input in place and writes its output
# channels-last (kernels.nn_pool.native_pool2d; other inputs keep NCHW).
_POOLS = frozenset({"MaxPool", "AveragePool"})
# Conv kinds whose kernel computes channels-last (an NCHW output costs it a transpose).
_NATIVE_LAST = frozenset({"depthwise", "direct", "grouped", "grouped_pointwise"})
# Readers that reduce the spatial axes away: (N, C, 1, 1) is the same memory either way.
_SPATIAL_REDUCTIONS = frozenset({"ReduceMean", "GlobalAveragePool", "GlobalMaxPool"})
# The ones `SpatialMean` runs when their input is channels-last.
_SPATIAL_MEANS = frozenset({"ReduceMean", "GlobalAveragePool"})


def is_conv_chain(pn: PlanNode) -> bool:
    """``pn`` is a fused Conv of fusion.py (a ConvChain: it has a ``layout`` seat)."""
    return pn.kind == "fused" and pn.op_type == "Conv" and hasattr(pn.fused, "layout")


def conv_layout_kind(pn: PlanNode, constants: dict[int, Any]) -> str | None:
    """ "depthwise", "pointwise", "direct" (a plain conv the compiled direct kernel
    runs), "grouped" (more than one channel a group) or "grouped_pointwise" (a grouped
    1x1, stride 1, unpadded) for a fused Conv the channels-last kernels run (its weight
    an initializer of that shape), else None."""
    w = constants.get(pn.inputs[1]) if len(pn.inputs) > 1 else None
    attrs = pn.attrs
    group = attrs.get("group", 1)
    if w is None and len(pn.inputs) > 1:
        # A weight folded at run time (the onnx wheel's light models make theirs with
        # ConstantOfShape): its kernel_shape says it is a plain 2-D conv or a pointwise
        # one.  Its dtype is not known yet: a float64 one gets None from
        # prepare_channels_last and runs the plain kernel, NCHW, which every reader
        # takes all the same.
        kernel = list(attrs.get("kernel_shape") or ())
        if len(kernel) != 2:
            return None
        if group != 1:
            # Grouped or depthwise (the weight's shape tells them apart when it runs):
            # both channels-last kernels compute in that layout.
            return "grouped_pointwise" if _grouped_pointwise(attrs, kernel) else "grouped"
        if kernel == [1, 1] and _unpadded(attrs):
            return "pointwise"
        return "direct" if direct_available(np.dtype(np.float32)) else None
    if type(w) is not np.ndarray or w.ndim != 4:
        return None
    if w.shape[1] == 1 and w.shape[0] == group > 1:
        return "depthwise"
    if group == 1 and w.shape[2:] == (1, 1) and _unpadded(attrs):
        return "pointwise"
    if group == 1 and w.shape[1] >= 1 and direct_available(w.dtype):
        return "direct"
    if group > 1 and w.shape[1] > 1:
        if _grouped_pointwise(attrs, list(w.shape[2:])):
            # nn_conv_nhwc._GroupedPointwise: each group's rows by its weight, any
            # input layout, channels-last out (ShuffleNet's 1x1s around its shuffles).
            return "grouped_pointwise"
        if w.shape[2:] != (1, 1):
            # nn_conv_nhwc._Grouped: windows gathered as runs of channels.
            return "grouped"
    return None


def _grouped_pointwise(attrs: dict[str, Any], kernel: list[int]) -> bool:
    """A grouped conv's 1x1 kernel, stride 1, no padding: nn_conv_nhwc._GroupedPointwise."""
    return kernel == [1, 1] and _unpadded(attrs) and all(s == 1 for s in attrs.get("strides") or ())


def _pool_takes_layout(pn: PlanNode) -> bool:
    """A 2-D MaxPool (without its Indices output) or AveragePool the compiled pool runs
    on a channels-last input (its rank and dtype are checked when it runs)."""
    return (
        pn.op_type in _POOLS
        and len(pn.inputs) == 1
        and pn.outputs[0] >= 0
        and all(s < 0 for s in pn.outputs[1:])
        and len(pn.attrs.get("kernel_shape") or ()) == 2
        and all(d == 1 for d in pn.attrs.get("dilations") or ())
    )


def _channel_concat(pn: PlanNode) -> bool:
    """A Concat along the channel axis of 4-D values (the rank is checked when it runs)."""
    return (
        pn.op_type == "Concat"
        and len(pn.outputs) == 1
        and pn.attrs.get("axis", 1) in (1, -3)
        and len(pn.inputs) >= 1
        and min(pn.inputs) >= 0
    )


def _unpadded(attrs: dict[str, Any]) -> bool:
    return not any(attrs.get("pads") or ()) and attrs.get("auto_pad", "NOTSET") in (
        "NOTSET",
        "VALID",
    )


def plan_channels_last(nodes: list[PlanNode], keep: set[int], constants: dict[int, Any]) -> int:
    """Give every fused Conv of ``nodes`` (an unwatched run's list) its `ChannelsLast`
    choice (``constants``: the plan's initializers by slot); the number of convs whose
    output stays channels-last.

    A conv's output stays channels-last when the conv is one the channels-last kernels
    run, every reader takes the layout well (see the module docstring), and it pays:
    the conv is depthwise (its kernel computes channels-last anyway), or some reader is
    a depthwise conv, or a pointwise conv whose own output stays channels-last (the
    layout passes through it to a depthwise conv further on).  A
    pointwise-only chain (ResNet's bottlenecks) gains nothing: its GEMM costs the same
    either way, and the 3x3 convs around it would pay a transposing copy."""
    users: dict[int, list[PlanNode]] = {}
    for pn in nodes:
        for s in (*pn.inputs, *pn.implicit):
            if s >= 0:
                users.setdefault(s, []).append(pn)
    kinds = {id(pn): conv_layout_kind(pn, constants) for pn in nodes if is_conv_chain(pn)}
    emits: dict[int, bool] = {}  # decided from the last node back: readers first
    memo: dict[int, tuple[bool, bool]] = {}
    producer = {s: pn for pn in nodes for s in pn.outputs if s >= 0}

    def runs_channels_last(conv: PlanNode) -> bool | None:
        """Whether the fused conv ``conv`` runs the channels-last kernel: it emits, or its
        input comes channels-last from a conv (through ops that keep the layout); None
        when that conv is not decided yet."""
        if emits.get(id(conv)):
            return True
        return comes_last(conv.inputs[0])

    def comes_last(slot: int) -> bool | None:
        """Whether ``slot`` holds a channels-last value: a conv's that emits, through ops
        that keep the layout (a channel Concat: when one of its inputs does, as
        ChannelsLastConcat then writes); None when that conv is not decided yet."""
        while True:
            pn = producer.get(slot)
            if pn is None:
                return False
            if is_conv_chain(pn):
                return emits.get(id(pn))
            if isinstance(
                pn.fused, (QdqPair, ElementwiseChain, QdqTable, SEGate, ChannelShuffle)
            ) or (
                pn.kind == "kernel"
                and pn.domain == ""
                and len(pn.outputs) == 1
                and (pn.op_type in _ELEMENTWISE or _pool_takes_layout(pn))
            ):
                x_place = getattr(pn.fused, "x_place", 0) if pn.kind == "fused" else 0
                slot = pn.inputs[x_place]
                continue
            if pn.kind == "kernel" and pn.domain == "" and _channel_concat(pn):
                answers = [comes_last(s) for s in pn.inputs]
                return True if any(answers) else (None if None in answers else False)
            return False

    def readers(slot: int) -> tuple[bool, bool]:
        """(every reader of ``slot`` takes channels-last well, the layout pays)."""
        got = memo.get(slot)
        if got is not None:
            return got
        memo[slot] = (False, False)  # a cycle cannot happen in a plan; stay safe
        ok, pays = slot not in keep, False
        for pn in users.get(slot, ()):
            if not ok:
                break
            if is_conv_chain(pn):
                kind = kinds[id(pn)]
                ok = kind is not None
                residual = getattr(pn.fused, "residual", None)
                if ok and residual is not None and pn.inputs[residual] == slot != pn.inputs[0]:
                    # Not the residual of a conv that runs NCHW (its input comes NCHW and
                    # its output goes so): it would add a channels-last residual after
                    # its kernel, through a transposing read, and its held call declines
                    # it (a diffusion UNet's skip convs, the 3x3 after a GroupNorm).
                    ok = runs_channels_last(pn) is not False
                pays = pays or kind in _NATIVE_LAST or emits.get(id(pn), False)
            elif (
                isinstance(pn.fused, (QdqPair, ElementwiseChain, QdqTable, ChannelShuffle))
                and pn.inputs[0] == slot
            ):
                # A quantize-dequantize pair, or a chain of elementwise steps whose other
                # operands are single values (a QDQ model's pair -> HardSwish -> pair),
                # runs over the value's own buffer and hands on its layout (a QDQ model's
                # convs stay channels-last); a channel shuffle copies it in its layout.
                sub_ok, sub_pays = readers(pn.outputs[0])
                ok, pays = ok and sub_ok, pays or sub_pays
            elif (
                isinstance(pn.fused, QdqPointwise)
                and pn.fused.x_place is not None
                and pn.inputs[pn.fused.x_place] == slot
            ):
                # A QDQ model's 1x1 conv as an integer product reads channels-last rows
                # in place (an NCHW value costs it a transposing copy) and writes them.
                pays = True
            elif isinstance(pn.fused, SEGate) and pn.inputs[pn.fused.x_place] == slot:
                # An SE block reads it as rows and writes its product in x's layout.
                sub_ok, sub_pays = readers(pn.outputs[0])
                ok, pays = ok and sub_ok, pays or sub_pays
            elif pn.kind == "kernel" and pn.domain == "" and len(pn.outputs) == 1:
                if pn.op_type in _SPATIAL_REDUCTIONS:
                    # A mean of channels-last rows (SpatialMean, one product) costs less
                    # than numpy's mean over NCHW planes (MobileNetV3's last 7x7 planes
                    # of 576 channels: 40 us against a few).
                    pays = pays or pn.op_type in _SPATIAL_MEANS
                    continue
                if (
                    pn.op_type == "Transpose"
                    and tuple(pn.attrs.get("perm") or ()) == (0, 2, 3, 1)
                    and pn.outputs[0] not in keep  # (a graph output: the view, as before)
                ):
                    # NCHW -> NHWC (a ConvNeXt block's permute before its LayerNorm): of a
                    # channels-last value, the NHWC buffer itself, where an NCHW one cost
                    # the conv its transposing copy and the reader a second one back.
                    continue
                if _pool_takes_layout(pn) and pn.outputs[0] not in keep:
                    # The pool reads the layout in place and writes it.  Readers after it
                    # that want NCHW pay a transposing copy of the pool's output (no
                    # larger than its input; a 1x1 one is NCHW as it is): less than the
                    # conv writing NCHW planes and the pool reading them.  ResNet-50's
                    # last 1x1 conv and its 7x7 AveragePool before a Reshape: 1085 + 152
                    # -> 819 + 24 us; the model 1.028 -> 1.020x onnxruntime, Inception v2
                    # (its branches' pools) 1.163 -> 1.131x.
                    sub_ok, sub_pays = readers(pn.outputs[0])
                    pays = pays or sub_pays or not sub_ok
                    continue
                if (
                    (pn.op_type in _ELEMENTWISE and (len(pn.inputs) == 1 or pn.opset >= 7))
                    or _pool_takes_layout(pn)
                    or _channel_concat(pn)
                ):
                    sub_ok, sub_pays = readers(pn.outputs[0])
                    ok, pays = ok and sub_ok, pays or sub_pays
                else:
                    ok = False
            else:
                ok = False
        memo[slot] = (ok, ok and pays)
        return memo[slot]

    takes: dict[int, bool] = {}  # conv -> whether its kind and readers take the layout
    for pn in reversed(nodes):
        if is_conv_chain(pn):
            kind = kinds[id(pn)]
            ok, pays = readers(pn.outputs[0])
            if getattr(pn.fused, "pool", None) is not None and pn.outputs[0] not in keep:
                ok = ok or kind is not None  # its pool's readers copy, as a pool's above
                pays = True
            takes[id(pn)] = kind is not None and ok
            # A depthwise or direct conv computes channels-last anyway: keeping its
            # output so saves the transposing copy back whenever its readers take it.
            emits[id(pn)] = kind is not None and ok and (pays or kind in _NATIVE_LAST)
    # Then, in run order: a conv whose input comes channels-last and whose readers take
    # the layout keeps it too, pays or not.  Writing NCHW from channels-last rows costs
    # a transposing copy of its output and its held call (a YOLO's C3 blocks after a
    # direct conv: their 1x1 convs at 10x10 and 20x20 ran 34-72 us through the chain's
    # Python call, onnxruntime's 23-38); kept, the copy is gone and readers that take
    # the layout read it as it is.  Its readers' inputs then come channels-last in turn.
    for pn in nodes:
        if is_conv_chain(pn) and not emits[id(pn)] and takes[id(pn)]:
            emits[id(pn)] = bool(runs_channels_last(pn))
    kept = 0
    region: set[int] = set()  # slots that hold channels-last values
    for i, pn in enumerate(nodes):
        if is_conv_chain(pn):
            emit = emits[id(pn)]
            pn.fused.layout = ChannelsLast(emit)
            kept += emit
            if emit:
                region.add(pn.outputs[0])
        elif isinstance(pn.fused, SEGate):
            if pn.inputs[pn.fused.x_place] in region:
                region.add(pn.outputs[0])
        elif isinstance(pn.fused, QdqPointwise):
            region.add(pn.outputs[0])  # its rows are channels-last whatever it read
        elif isinstance(pn.fused, (QdqPair, ElementwiseChain, QdqTable, ChannelShuffle)):
            if pn.inputs[0] in region:
                region.add(pn.outputs[0])
        elif pn.kind != "kernel" or pn.domain != "" or not region.intersection(pn.inputs):
            continue
        elif (
            pn.op_type == "Mul"
            and len(pn.inputs) == 2
            and len(pn.outputs) == 1
            and not any(s in constants for s in pn.inputs)
        ):
            # A gate is a live value (a Mul by a constant keeps its plain, in-place kernel).
            region.add(pn.outputs[0])
            nodes[i] = fused_node(pn, pn, pn.inputs, pn.input_names, ChannelScale(pn))
        elif (pn.op_type in _ELEMENTWISE and len(pn.outputs) == 1) or (
            _pool_takes_layout(pn) and pn.inputs[0] in region
        ):
            region.add(pn.outputs[0])
        elif _channel_concat(pn):
            region.add(pn.outputs[0])
            nodes[i] = fused_node(pn, pn, pn.inputs, pn.input_names, ChannelsLastConcat(pn))
        elif pn.op_type in _SPATIAL_MEANS and pn.inputs[0] in region:
            nodes[i] = fused_node(pn, pn, pn.inputs, pn.input_names, SpatialMean(pn))
    return kept


class ChannelsLast:
    """A fused Conv's layout choice: run the channels-last kernel when the input is
    channels-last or the output should be (``emit``), and give back an NCHW-contiguous
    result unless ``emit``.  The prepared kernel is kept for the input shape, weight and
    bias it was made for (a node sees the same ones run after run)."""

    def __init__(self, emit: bool) -> None:
        self.emit = emit
        # (input shape, dtype, weight, bias, the kernel prepared for them): one tuple,
        # replaced whole, so threads running the same plan never pair one input's key
        # with another's kernel.
        self._prepared: tuple[Any, Any, Any, Any, ChannelsLastConv | None] | None = None

    def __call__(
        self,
        x: Any,
        w: np.ndarray,
        bias: np.ndarray | None,
        attrs: dict[str, Any],
        addend: np.ndarray | None,
        relu: bool,
        act: Activation | None = None,
    ) -> tuple[np.ndarray, bool] | None:
        """The conv's output and whether the activation ``act`` (when given) is in it
        already, or None: run the plain kernel."""
        if type(x) is not np.ndarray or (not self.emit and not is_channels_last(x)):
            return None
        prepared = self._prepared
        if prepared is None or not _made_for(prepared, x, w, bias):
            prepared = (x.shape, x.dtype, w, bias, prepare_channels_last(x, w, bias, attrs))
            self._prepared = prepared
        runner = prepared[4]
        if runner is None:
            return None
        if addend is not None and (
            type(addend) is not np.ndarray
            or addend.dtype != x.dtype
            or addend.shape != runner.out_shape
        ):
            return None  # the plain kernel names the mismatch
        if not self.emit and not relu:
            planes = runner.run_nchw(x, addend, act)
            if planes is not None:
                return planes
        y, done = runner(x, addend, relu, act)
        return (y if self.emit else planes_copy(y)), done

    def held(
        self,
        x: np.ndarray,
        w: np.ndarray,
        bias: np.ndarray | None,
        act: Activation | None,
        nargs: int,
        residual: int | None,
        places: tuple[int, ...],
        expect: tuple[Any, ...],
        fallback: Any,
        inplace: bool = False,
        pool: PoolWindow | None = None,
    ) -> Any:
        """The prepared kernel's compiled call (ChannelsLastConv.held) for a fused node
        whose last call ran it on ``x`` with ``w`` and ``bias`` (and pools its result with
        ``pool``): only when this conv emits channels-last (else `__call__` makes its
        result NCHW), or None."""
        prepared = self._prepared
        if (
            prepared is None
            or not self.emit
            or not _made_for(prepared, x, w, bias)
            or prepared[4] is None
        ):
            return None
        return prepared[4].held(
            x, act, nargs, residual, places, expect, fallback, inplace, pool
        )  # fmt: skip


def _made_for(
    prepared: tuple[Any, ...], x: np.ndarray, w: np.ndarray, bias: np.ndarray | None
) -> bool:
    """Whether ChannelsLast's prepared tuple was made for this input shape and dtype,
    weight and bias."""
    return (
        prepared[0] == x.shape
        and prepared[1] == x.dtype
        and prepared[2] is w
        and prepared[3] is bias
    )


class SpatialMean:
    """A squeeze-excite block's ReduceMean over (H, W) (its keepdims either way: a
    ConvNeXt head's x.mean((2, 3)) keeps none), or a GlobalAveragePool, of a
    channels-last value: float32 by the compiled pool with the
    whole image as its window (nn_pool.spatial_mean), and from the second run by its
    held call (`quick`, native/_pool.c's `held`: the same kernel in C from the node loop;
    ResNet-50's last mean 84 -> 26 us in its run); float64 (or the kernels off) by one
    BLAS product of the (H*W, C) rows with a row of ones, then divided by H*W.  numpy's
    reduction over the rows of a channels-last array runs its inner loop over the C
    channels only (48 us against 11 us channels-first at 16 channels of 56x56).  Any
    other input (layout, dtype, axes) goes to the node's own kernel."""

    def __init__(self, pn: PlanNode) -> None:
        self.node = pn
        self._spatial = SpatialAxes(pn)
        self._ones: np.ndarray | None = None
        # The compiled loop's first try (native/_runloop.c's FUSED steps): made on the
        # first float32 call, for a node of one input (no axes input to check).
        self.quick: Any = None
        self._held_tried = False

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        x = ins[0]
        if (
            is_channels_last(x)
            and x.dtype in _FLOATS
            and x.size
            and self._spatial(ins[1] if len(ins) > 1 else None)
        ):
            keeps = self._spatial.keeps
            n, c, h, w = x.shape
            if x.dtype == np.float32:
                mean = nn_pool.spatial_mean(x)
                if mean is not None:
                    if not self._held_tried:
                        self._held_tried = True
                        if len(ins) == 1 and keeps:  # (the held call keeps the axes)
                            self.quick = nn_pool.held_spatial_mean(quiet_loop.decline)
                    # (keepdims=0: a ConvNeXt's head, torch's x.mean((2, 3)))
                    return [mean if keeps else mean.reshape(n, c)]
            rows = x.transpose(0, 2, 3, 1).reshape(n, h * w, c)
            ones = self._ones
            if ones is None or ones.shape[1] != h * w or ones.dtype != x.dtype:
                ones = self._ones = np.ones((1, h * w), dtype=x.dtype)
            total = np.matmul(ones, rows)  # (N, 1, C)
            total /= x.dtype.type(h * w)
            return [total.reshape((n, c, 1, 1) if keeps else (n, c))]
        out = ex.call_kernel(self.node, ins)
        if type(out[0]) is np.ndarray and not out[0].flags.c_contiguous:
            # A mean over other axes (H alone, the channels) of a channels-last value:
            # numpy's result follows the input's memory order, and a graph output must
            # come out in C order as the stepped run's does (a copy of a reduced value).
            out = [np.ascontiguousarray(out[0])]
        return out


class ChannelScale:
    """A squeeze-excite block's Mul of a channels-last float32 (N, C, H, W) value by its
    (N, C, 1, 1) gate, in either order: the compiled per-channel scale
    (native/_channels.c), one multiply per element, so numpy's values exactly, into a
    new channels-last array as numpy's product would be.  numpy runs that broadcast as
    one inner loop per pixel over the C channels without its SIMD loop (27 us against
    about 10 for MobileNetV3's 28x28x96).  Any other operands go to the node's own
    kernel."""

    def __init__(self, pn: PlanNode) -> None:
        self.node = pn

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        a, b = ins
        x, gate = (
            (b, a) if type(a) is np.ndarray and a.ndim == 4 and a.shape[2:] == (1, 1) else (a, b)
        )
        if (
            type(x) is np.ndarray
            and type(gate) is np.ndarray
            and x.dtype == np.float32
            and gate.dtype == np.float32
            and x.ndim == 4
            and x.shape[2] * x.shape[3] > 1
            and gate.shape == (x.shape[0], x.shape[1], 1, 1)
            and is_channels_last(x)
        ):
            module = native.load("channels")
            if module is not None:
                n, c, h, w = x.shape
                out = np.empty((n, h, w, c), dtype=np.float32)
                module.scale(
                    x.transpose(0, 2, 3, 1), np.ascontiguousarray(gate), out, (n, h * w, c)
                )
                return [out.transpose(0, 3, 1, 2)]
        return ex.call_kernel(self.node, ins)


class ChannelsLastConcat:
    """A Concat along the channels of 4-D float arrays, some of them channels-last: the
    result channels-last too (one (N, H, W, C) buffer the inputs are copied into, as
    numpy's concatenate would copy them), so the convs and pools reading it need no
    transposing copy; Inception's blocks end in one.  The same values as the plain
    kernel's.  From its second run a float32 one runs its held call (`quick`: the same
    copies in C from the node loop; Inception v2's ten 0.66 -> 0.43 ms in its run).
    Anything else (other ranks, mixed dtypes, no channels-last input) goes to
    the node's own kernel."""

    def __init__(self, pn: PlanNode) -> None:
        self.node = pn
        # The compiled loop's first try (native/_runloop.c's FUSED steps): the same copies
        # in C (_channels.c's held_concat), made on the first call the compiled copy ran.
        self.quick: Any = None
        self._held_tried = False

    def __call__(self, ex: Executor, ins: list[Any]) -> list[Any]:
        first = ins[0]
        if type(first) is np.ndarray and first.ndim == 4 and first.dtype in _FLOATS:
            dtype = first.dtype
            if all(
                type(x) is np.ndarray
                and x.ndim == 4
                and x.dtype == dtype
                and x.shape[0] == first.shape[0]
                and x.shape[2:] == first.shape[2:]
                for x in ins
            ) and any(is_channels_last(x) for x in ins):
                n, _, h, w = first.shape
                out = np.empty((n, h, w, sum(x.shape[1] for x in ins)), dtype=dtype)
                module = native.load("channels") if dtype == np.float32 else None
                if module is None or not _place(module, ins, out):
                    np.concatenate([x.transpose(0, 2, 3, 1) for x in ins], axis=3, out=out)
                elif not self._held_tried:
                    self._held_tried = True
                    self.quick = module.held_concat(
                        len(ins), quiet_loop.decline, *native.held_arrays()
                    )
                return [out.transpose(0, 3, 1, 2)]
        return ex.call_kernel(self.node, ins)


def _place(module: Any, ins: list[np.ndarray], out: np.ndarray) -> bool:
    """Copy each float32 input into its channels of the channels-last ``out`` by the
    compiled copy (_channels.place): a channels-last input row by row, an NCHW one plane
    by plane; another layout is made channels-last first.  False when an input is not
    float32 (the caller's numpy concatenate runs)."""
    n, h, w, total = out.shape
    offset = 0
    for x in ins:
        if x.dtype != np.float32:
            return False
        width = x.shape[1]
        xl = x.transpose(0, 2, 3, 1)
        if xl.flags.c_contiguous:
            module.place(xl, out, (n, h * w, width, total, offset), False)
        elif x.flags.c_contiguous:
            module.place(x, out, (n, h * w, width, total, offset), True)
        else:
            module.place(np.ascontiguousarray(xl), out, (n, h * w, width, total, offset), False)
        offset += width
    return True
