"""com.microsoft ops that onnxruntime.quantization's ``quantize_dynamic`` writes and no
other family here covers: DynamicQuantizeLSTM (for an LSTM), QAttention (for a
com.microsoft Attention: the BERT int8 recipe), QEmbedLayerNormalization (for
EmbedLayerNormalization), and the com.microsoft QuantizeLinear / DequantizeLinear
(``use_qdq_contrib_ops``, 16-bit types), which are the standard kernels under the
contrib domain's name.

The numbers follow onnxruntime's CPU kernels, not just the float model: every integer
product is exact (the MatMulInteger kernel), and activations are quantized where and as
onnxruntime quantizes them, because a different uint8 scale is a different result:

* DynamicQuantizeLSTM quantizes X once per call, one uint8 scale and zero point over
  the first max(sequence_lens) steps of the whole batch (the input GEMM of all steps;
  a reverse direction's reordered rows have the same range), and the hidden state once
  per step over the whole batch (the recurrent GEMM).  onnxruntime splits the batch
  between its intra-op threads when the batch is over 4 (or at least 2 with hidden
  <= 256) and quantizes each part on its own, so its numbers depend on its thread
  count: these are those of a one-thread session (``intra_op_num_threads=1``).
* QAttention takes the uint8 input quantized before it (DynamicQuantizeLinear) and its
  int8/uint8 weight, per tensor or per column.
* Dynamic quantization (`dynamic_uint8`) is onnxruntime's GetQuantizationParameter:
  the range includes 0, scale = (max - min) / 255 in float32, zero point rounded half to
  even, values x / scale rounded half to even plus the zero point, clipped.

DynamicQuantizeLSTM's step loop runs compiled when it can (`_compiled_steps`:
native/_recurrent.c's qlstm, with the default activations, no peepholes, no clip): the
same h codes, integer products and float32 gate steps as `_numpy_steps`, but the module's
own sigmoid and tanh (a few ulp from numpy's: now and then an h lands on the other side of
a code's rounding boundary), as the float LSTM's compiled loop does.  R is packed once per
constant in the layout of the module's level (`_packed_recurrent`).  A NaN or an infinite
range in a state to quantize sends the direction back to the numpy loop, which defines
those cases (tests/runtime/test_native_qlstm.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from onnxviz.runtime import native
from onnxviz.runtime.kernels._tensor_common import fail
from onnxviz.runtime.kernels._weight_cache import derived
from onnxviz.runtime.kernels.contrib_attention import attention_mask_bias, softmax_last
from onnxviz.runtime.kernels.contrib_common import standard_kernel
from onnxviz.runtime.kernels.nn_rnn import (
    Activation,
    _activations,
    _bias_sum,
    _clip,
    _clips,
    _sigmoid,
)
from onnxviz.runtime.kernels.quantize import dequantize_linear, dynamic_quantize_linear
from onnxviz.runtime.registry import KernelContext, kernel

MS = "com.microsoft"
_F32 = np.float32
_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


# ---------------------------------------------------------------- shared quantized math


def dynamic_uint8(values: np.ndarray) -> tuple[np.ndarray, _F32, int]:
    """``values`` (float32) quantized to uint8 with parameters from their own range, as
    onnxruntime quantizes an activation before an integer GEMM: (q, scale, zero point).
    That is DynamicQuantizeLinear's definition, float32 steps in onnxruntime's order."""
    q, scale, zero_point = dynamic_quantize_linear(values)
    return q, _F32(scale), int(zero_point)


def _integer_product(a: np.ndarray, a_zero: int, b: np.ndarray, b_zero: Any) -> np.ndarray:
    """(A - a_zero) @ (B - b_zero) exactly, int32 (b_zero one value or one per column)."""
    matmul_integer = standard_kernel("MatMulInteger", 10)
    a_zp = np.array(a_zero, dtype=a.dtype)
    b_zp = np.asarray(b_zero, dtype=b.dtype)
    return matmul_integer(a, b, a_zp, b_zp)  # type: ignore[no-any-return]


def _scaled(acc: np.ndarray, multiplier: Any) -> np.ndarray:
    """The int32 accumulator back in float32: float(acc) * (a_scale * b_scale), one
    rounding each, as onnxruntime's GEMM output processor does.  A 2-D product with one
    multiplier or one per column takes the compiled pass (`_int8.scale_columns`: the same
    two roundings in one pass, where numpy's cast and product are two: 256 x 1024, a
    quantized LSTM's input projection, 96 -> 56-70 us)."""
    scale = np.asarray(multiplier, dtype=_F32)
    module = native.load("int8")
    if (
        module is not None
        and acc.ndim == 2
        and acc.dtype == np.int32
        and acc.size
        and scale.ndim <= 1
        and scale.size in (1, acc.shape[1])
    ):
        m, n = acc.shape
        columns = np.ascontiguousarray(np.broadcast_to(scale, (n,)))
        out = np.empty((m, n), _F32)
        module.scale_columns(
            np.ascontiguousarray(acc).reshape(-1), m, n, columns, b"", out.reshape(-1)
        )
        return out
    return acc.astype(_F32) * scale


def _is_one_value(t: np.ndarray | None) -> bool:
    return t is not None and t.size == 1 and t.ndim <= 1


# ----------------------------------------------------------------- DynamicQuantizeLSTM


class _QuantWeight(NamedTuple):
    """One direction's int8/uint8 weight [K, 4H] with its scale (a float32 scalar or
    one per column) and its one zero point."""

    values: np.ndarray
    scale: np.ndarray
    zero_point: int


def _direction_weights(
    w: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, dirs: int, hidden: int, name: str
) -> list[_QuantWeight]:
    """W or R split by direction, with onnxruntime's checks: scale and zero point are
    [D] (per direction) or [D, 4H] (per column); a per-column zero point must be 0 for
    int8 weights and one constant for uint8 ones (its GEMM takes one zero point)."""
    if zero_point.dtype != w.dtype:
        fail(f"DynamicQuantizeLSTM: {name} zero point is {zero_point.dtype}, {name} is {w.dtype}")
    for what, t in (("scale", scale), ("zero point", zero_point)):
        if t.ndim not in (1, 2) or t.shape[0] != dirs or (t.ndim == 2 and t.shape[1] != 4 * hidden):
            fail(
                f"DynamicQuantizeLSTM: {name} {what} must have shape [{dirs}] (per tensor) or "
                f"[{dirs}, {4 * hidden}] (per channel), got {list(t.shape)}"
            )
    if zero_point.ndim == 2:
        if w.dtype == np.int8 and np.any(zero_point != 0):
            fail(f"DynamicQuantizeLSTM: {name} int8 per-channel zero points must be 0")
        if w.dtype == np.uint8 and np.any(zero_point != zero_point.flat[0]):
            fail(f"DynamicQuantizeLSTM: {name} uint8 per-channel zero points must be one value")
    out = []
    for d in range(dirs):
        zp = zero_point[d] if zero_point.ndim == 1 else zero_point[d, 0]
        out.append(_QuantWeight(w[d], scale[d].astype(_F32), int(zp)))
    return out


class _Peepholes(NamedTuple):
    i: np.ndarray
    o: np.ndarray
    f: np.ndarray


class _Cell(NamedTuple):
    """One direction's element-wise step parameters."""

    bias: np.ndarray | None  # Wb + Rb, [4H]
    peepholes: _Peepholes | None
    acts: list[Activation]  # f, g, h
    clip: float | None
    input_forget: int


def _lstm_cell(gates: np.ndarray, c_prev: np.ndarray, cell: _Cell) -> tuple[np.ndarray, np.ndarray]:
    """One step's gate arithmetic from X.W + H.R ([B, 4H], gate order i, o, f, c), in
    onnxruntime's order: peephole term, then the fused bias Wb + Rb, then clip."""
    hs = c_prev.shape[1]
    f_act, g_act, h_act = cell.acts
    peep = cell.peepholes
    if peep is None:
        # The same element-wise steps over all four gates at once (i, o, f are
        # contiguous and share f_act): a third of the numpy calls of gate by gate.
        whole = gates if cell.bias is None else gates + cell.bias
        whole = _clip(whole, cell.clip)
        gated = f_act(whole[:, : 3 * hs])
        i_g, o_g = gated[:, :hs], gated[:, hs : 2 * hs]
        f_g = 1 - i_g if cell.input_forget else gated[:, 2 * hs :]
        c_new = c_prev * f_g + i_g * g_act(whole[:, 3 * hs :])
        return o_g * h_act(c_new), c_new

    def pre(k: int, extra: np.ndarray | None = None) -> np.ndarray:
        x = gates[:, k * hs : (k + 1) * hs]
        if extra is not None:
            x = x + extra
        if cell.bias is not None:
            x = x + cell.bias[k * hs : (k + 1) * hs]
        return _clip(x, cell.clip)

    i_g = f_act(pre(0, None if peep is None else c_prev * peep.i))
    if cell.input_forget:
        f_g = 1 - i_g
    else:
        f_g = f_act(pre(2, None if peep is None else c_prev * peep.f))
    c_cand = g_act(pre(3))
    c_new = c_prev * f_g + i_g * c_cand
    o_g = f_act(pre(1, None if peep is None else c_new * peep.o))
    return o_g * h_act(c_new), c_new


class _LstmShape(NamedTuple):
    steps: int
    batch: int
    inputs: int
    hidden: int
    dirs: int


def _lstm_shape(
    x: np.ndarray, w: np.ndarray, r: np.ndarray, direction: str, hidden_size: int | None
) -> _LstmShape:
    if direction not in ("forward", "reverse", "bidirectional"):
        fail(f"DynamicQuantizeLSTM: unknown direction '{direction}'")
    if x.ndim != 3:
        fail(f"DynamicQuantizeLSTM: X must be [seq, batch, input], got {list(x.shape)}")
    dirs = 2 if direction == "bidirectional" else 1
    if r.ndim != 3:
        fail(f"DynamicQuantizeLSTM: R must be 3-D, got {list(r.shape)}")
    hidden = int(hidden_size) if hidden_size else r.shape[1]
    steps, batch, inputs = x.shape
    for name, t, rows in (("W", w, inputs), ("R", r, hidden)):
        if w.dtype not in _BYTES or t.dtype != w.dtype:
            fail(
                f"DynamicQuantizeLSTM: W and R must both be int8 or uint8, got {w.dtype}/{r.dtype}"
            )
        if t.shape != (dirs, rows, 4 * hidden):
            fail(
                f"DynamicQuantizeLSTM: {name} must have shape [{dirs}, {rows}, {4 * hidden}] "
                f"(pre-transposed), got {list(t.shape)}"
            )
    return _LstmShape(steps, batch, inputs, hidden, dirs)


def _check_optional_inputs(
    shape: _LstmShape,
    b: np.ndarray | None,
    sequence_lens: np.ndarray | None,
    initial_h: np.ndarray | None,
    initial_c: np.ndarray | None,
    p: np.ndarray | None,
) -> None:
    dirs, batch, hidden = shape.dirs, shape.batch, shape.hidden
    expected = {
        "B": (b, (dirs, 8 * hidden)),
        "sequence_lens": (sequence_lens, (batch,)),
        "initial_h": (initial_h, (dirs, batch, hidden)),
        "initial_c": (initial_c, (dirs, batch, hidden)),
        "P": (p, (dirs, 3 * hidden)),
    }
    for name, (t, want) in expected.items():
        if t is not None and t.shape != want:
            fail(f"DynamicQuantizeLSTM: {name} must have shape {list(want)}, got {list(t.shape)}")
    if (
        sequence_lens is not None
        and sequence_lens.size
        and (sequence_lens.min() < 0 or sequence_lens.max() > shape.steps)
    ):
        fail(f"DynamicQuantizeLSTM: sequence_lens must lie in [0, {shape.steps}]")


def _reversal_index(lens: np.ndarray, steps: int) -> np.ndarray:
    """[steps, B] source step of each step when every sequence's valid prefix is
    reversed in place (padding steps stay): its own inverse."""
    t = np.arange(steps)[:, None]
    return np.where(t < lens[None, :], lens[None, :] - 1 - t, t)


def _direction_loop(
    x_q: np.ndarray,
    x_scale: _F32,
    x_zero: int,
    w: _QuantWeight,
    r: _QuantWeight,
    lens: np.ndarray,
    state: tuple[np.ndarray, np.ndarray],
    cell: _Cell,
    zero_ended: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One direction over its (already ordered) quantized input [T, B, I]: the step
    outputs [T, B, H] (0 where a sequence has ended), the last h and c of each sequence.

    ``zero_ended``: the state an ended sequence offers the next step's quantization is
    0, not its last h.  onnxruntime reads the previous h from Y's rows, which it zeroes
    for ended sequences when the node has a Y output; without one it reads Y_h's rows,
    which keep the last h (an empty sequence's row is never written: onnxruntime reads
    an unset buffer there, 0 here).  Either way the row is in the batch's range."""
    steps, batch, _ = x_q.shape
    hidden = r.values.shape[0]
    acc = _integer_product(x_q.reshape(steps * batch, -1), x_zero, w.values, w.zero_point)
    x_part = _scaled(acc, x_scale * w.scale).reshape(steps, batch, 4 * hidden)
    return _steps(x_part, r, lens, state, cell, zero_ended)


def _steps(
    x_part: np.ndarray,
    r: _QuantWeight,
    lens: np.ndarray,
    state: tuple[np.ndarray, np.ndarray],
    cell: _Cell,
    zero_ended: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The step loop from the input product on: compiled when it can (`_compiled_steps`),
    else numpy's."""
    compiled = _compiled_steps(x_part, r, lens, state, cell, zero_ended)
    if compiled is not None:
        return compiled
    return _numpy_steps(x_part, r, lens, state, cell, zero_ended)


def _numpy_steps(
    x_part: np.ndarray,
    r: _QuantWeight,
    lens: np.ndarray,
    state: tuple[np.ndarray, np.ndarray],
    cell: _Cell,
    zero_ended: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_direction_loop`'s steps from the input product ``x_part`` [T, B, 4H] (scaled, no
    bias) on: the definition, which `_compiled_steps` follows."""
    steps, batch, _ = x_part.shape
    hidden = r.values.shape[0]
    h, c = state
    y = np.zeros((steps, batch, hidden), _F32)
    last_h = np.zeros((batch, hidden), _F32)
    for t in range(steps):
        h_q, h_scale, h_zero = dynamic_uint8(h)  # per step, over the whole batch
        h_acc = _integer_product(h_q, h_zero, r.values, r.zero_point)
        gates = x_part[t] + _scaled(h_acc, h_scale * r.scale)  # two roundings, as the GEMM
        h_new, c_new = _lstm_cell(gates, c, cell)
        going = (t < lens)[:, None]
        c = np.where(going, c_new, c)
        y[t] = np.where(going, h_new, 0)
        last_h = np.where(going, h_new, last_h)
        h = y[t] if zero_ended else last_h
    return y, last_h, c


# Hidden sizes the compiled loop takes: the int32 sums of H products of two values within
# [-255, 255] are exact up to H = 33025 (native/_recurrent.c's QMAX_K).
_COMPILED_MAX_HIDDEN = 32768


_Packed = tuple[np.ndarray, np.ndarray | None, int]


def _packed_recurrent(r: _QuantWeight, layout: int) -> _Packed:
    """R [H, 4H] in the layout the compiled loop streams at its level (native/_recurrent.c's
    qlstm and qlstm_layout), per block of 16 hidden units, zero past H rows and columns:
    0, pairs: R minus its zero point as int16 (|values| <= 255), per pair of rows
    k = 2p, 2p + 1, per gate, per unit, the pair's two values; 2, byte pairs (AVX2): the
    same order, R - o as int8 (o = 128 for uint8 R, else 0) and the offset o - zero point
    (the kernel widens the bytes and adds the offset's row term); 1, quads (AVX-512 VNNI):
    R - o as int8 (o = 128 for uint8 R, else 0) per quad of rows, with the column sums of
    R minus its zero point and the offset o - zero point.  Made once per constant R, zero
    point and layout (_weight_cache; a direction's R is a view of the initializer)."""
    k, columns = r.values.shape
    hidden = columns // 4
    blocks, rows = -(-hidden // 16), -(-k // 4) * 4
    group = 4 if layout == 1 else 2  # rows of k per vector lane

    def build() -> _Packed:
        values = r.values.astype(np.int16)
        shift = (128 if r.values.dtype == np.uint8 else 0) if layout else r.zero_point
        wide = np.zeros((rows, 4, blocks * 16), np.int8 if layout else np.int16)
        wide[:k, :, :hidden] = (values - np.int16(shift)).reshape(k, 4, hidden)
        packed = wide.reshape(rows // group, group, 4, blocks, 16).transpose(3, 0, 2, 4, 1)
        if not layout:
            return np.ascontiguousarray(packed), None, 0
        if layout == 2:  # byte pairs (AVX2): the zero point's row term in the kernel
            return np.ascontiguousarray(packed), None, shift - r.zero_point
        sums = np.zeros((4, blocks * 16), np.int32)
        sums[:, :hidden] = (values - r.zero_point).sum(axis=0, dtype=np.int32).reshape(4, -1)
        sums = np.ascontiguousarray(sums.reshape(4, blocks, 16).transpose(1, 0, 2))
        return np.ascontiguousarray(packed), sums, shift - r.zero_point

    params = (layout, r.zero_point, r.values.shape, r.values.dtype.str)
    return derived("qlstm_recurrent", (r.values,), params, build)  # type: ignore[no-any-return]


def _compiles(cell: _Cell, hidden: int) -> bool:
    """Whether the compiled loop takes this direction: the default activations, no
    peepholes, no clip (input_forget either way), a hidden size its int32 sums hold."""
    f_act, g_act, h_act = cell.acts
    return (
        cell.peepholes is None
        and not _clips(cell.clip)
        and f_act is _sigmoid
        and g_act is np.tanh
        and h_act is np.tanh
        and hidden <= _COMPILED_MAX_HIDDEN
    )


def _compiled_steps(
    x_part: np.ndarray,
    r: _QuantWeight,
    lens: np.ndarray,
    state: tuple[np.ndarray, np.ndarray],
    cell: _Cell,
    zero_ended: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`_numpy_steps` in C (native/_recurrent.c's qlstm: h quantized, the exact product,
    the gates in the same float32 steps; its own sigmoid and tanh, a few ulp from numpy's),
    or None when the module is off or not built, the case is not its own (`_compiles`),
    or a state to quantize holds a NaN or an infinite range (the numpy steps decide)."""
    module = native.load("recurrent")
    steps, batch, _ = x_part.shape
    hidden = r.values.shape[0]
    if module is None or not x_part.size or not _compiles(cell, hidden):
        return None
    h0, c0 = (np.ascontiguousarray(s, dtype=_F32) for s in state)
    r_scale = np.ascontiguousarray(np.broadcast_to(r.scale, (4 * hidden,)), dtype=_F32)
    bias = None if cell.bias is None else np.ascontiguousarray(cell.bias, dtype=_F32)
    ended = None if int(lens.min()) >= steps else np.ascontiguousarray(lens, dtype=np.int64)
    y = np.empty((steps, batch, hidden), _F32)
    h_out = np.empty((batch, hidden), _F32)
    c_out = np.empty((batch, hidden), _F32)
    w, sums, offset = _packed_recurrent(r, module.qlstm_layout())
    status = module.qlstm(
        np.ascontiguousarray(x_part, dtype=_F32), w, sums, offset, r_scale, bias,
        h0, c0, y, h_out, c_out, steps, batch, hidden, zero_ended, bool(cell.input_forget),
        ended,
    )  # fmt: skip
    return None if status else (y, h_out, c_out)


@kernel("DynamicQuantizeLSTM", domain=MS, since=1, ctx=True)
def dynamic_quantize_lstm(
    ctx: KernelContext,
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    initial_c: np.ndarray | None = None,
    p: np.ndarray | None = None,
    w_scale: np.ndarray | None = None,
    w_zero_point: np.ndarray | None = None,
    r_scale: np.ndarray | None = None,
    r_zero_point: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    input_forget: int = 0,
    layout: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if layout:
        fail("DynamicQuantizeLSTM: layout=1 (batch first) is not supported, as in onnxruntime")
    if w_scale is None or w_zero_point is None or r_scale is None or r_zero_point is None:
        fail("DynamicQuantizeLSTM: W_scale, W_zero_point, R_scale and R_zero_point are required")
    shape = _lstm_shape(x, w, r, direction, hidden_size)
    _check_optional_inputs(shape, b, sequence_lens, initial_h, initial_c, p)
    steps, batch, _, hidden, dirs = shape
    ws = _direction_weights(w, w_scale, w_zero_point, dirs, hidden, "W")
    rs = _direction_weights(r, r_scale, r_zero_point, dirs, hidden, "R")
    acts = _activations(
        activations, ["Sigmoid", "Tanh", "Tanh"], dirs, activation_alpha, activation_beta
    )
    lens = (
        np.full(batch, steps, np.int64)
        if sequence_lens is None
        else sequence_lens.astype(np.int64).reshape(-1)
    )
    y = np.zeros((steps, dirs, batch, hidden), _F32)
    y_h = np.zeros((dirs, batch, hidden), _F32)
    y_c = np.zeros((dirs, batch, hidden), _F32)
    longest = int(lens.max()) if batch else 0
    if longest == 0:
        return y, y_h, y_c
    # One quantization of X for both directions: a reversed direction reorders the same
    # rows (its GEMM covers the same first `longest` steps), so the same range.
    xs = x[:longest].astype(_F32, copy=False)
    x_q, x_scale, x_zero = dynamic_uint8(xs)
    order = _reversal_index(lens, longest)
    empty = (lens == 0)[:, None]
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        xd = np.take_along_axis(x_q, order[:, :, None], axis=0) if reverse else x_q
        h0 = np.zeros((batch, hidden), _F32) if initial_h is None else initial_h[d].astype(_F32)
        c0 = np.zeros((batch, hidden), _F32) if initial_c is None else initial_c[d].astype(_F32)
        peep = None
        if p is not None:
            pd = p[d].astype(_F32)
            peep = _Peepholes(pd[:hidden], pd[hidden : 2 * hidden], pd[2 * hidden :])
        cell = _Cell(_bias_sum(b, d, 4, hidden, _F32), peep, acts[d], clip, input_forget)
        rows, last_h, last_c = _direction_loop(
            xd, x_scale, x_zero, ws[d], rs[d], lens, (h0, c0), cell, ctx.wants_output(0)
        )
        if reverse:
            rows = np.take_along_axis(rows, order[:, :, None], axis=0)
        y[:longest, d] = rows
        y_h[d] = np.where(empty, 0, last_h)
        y_c[d] = np.where(empty, 0, last_c)
    return y, y_h, y_c


# -------------------------------------------------------------------------- QAttention


def _one_value(t: np.ndarray | None, name: str) -> np.ndarray | None:
    if t is not None and not _is_one_value(t):
        fail(f"QAttention: {name} must be a scalar or a 1-element vector, got {list(t.shape)}")
    return None if t is None else t.reshape(())


def _per_column(t: np.ndarray | None, columns: int, name: str) -> np.ndarray | None:
    """A weight scale / zero point: one value, or one per column of the weight."""
    if t is None or _is_one_value(t):
        return None if t is None else t.reshape(())
    if t.shape != (columns,):
        fail(f"QAttention: {name} must have 1 or {columns} values, got {list(t.shape)}")
    return t


def _split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """[B, S, N*h] -> [B, N, S, h]."""
    b, s, width = x.shape
    return x.reshape(b, s, heads, width // heads).transpose(0, 2, 1, 3)


def _qkv_projection(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    input_scale: np.ndarray,
    weight_scale: np.ndarray,
    input_zero_point: np.ndarray | None,
    weight_zero_point: np.ndarray | None,
) -> np.ndarray:
    """[B, S, 3H] float32: (x - zx) @ (W - zw) exactly, times input_scale * weight_scale,
    plus the bias, as onnxruntime's GEMM output processor (scale per tensor or column)."""
    if x.ndim != 3 or x.dtype not in _BYTES:
        what = f"{x.dtype} {list(x.shape)}"
        fail(f"QAttention: input must be int8/uint8 [batch, sequence, hidden], got {what}")
    if weight.ndim != 2 or weight.dtype not in _BYTES or weight.shape[0] != x.shape[2]:
        fail(
            f"QAttention: weight must be int8/uint8 [{x.shape[2]}, 3 * hidden], "
            f"got {weight.dtype} {list(weight.shape)}"
        )
    columns = weight.shape[1]
    if bias.shape != (columns,):
        fail(f"QAttention: bias must have shape [{columns}], got {list(bias.shape)}")
    if input_scale is None or weight_scale is None:
        fail("QAttention: input_scale and weight_scale are required")
    in_scale = _one_value(input_scale, "input_scale")
    in_zero = _one_value(input_zero_point, "input_zero_point")
    w_scale = _per_column(weight_scale, columns, "weight_scale")
    w_zero = _per_column(weight_zero_point, columns, "weight_zero_point")
    if in_zero is not None and in_zero.dtype != x.dtype:
        fail(f"QAttention: input_zero_point is {in_zero.dtype}, input is {x.dtype}")
    if w_zero is not None and w_zero.dtype != weight.dtype:
        fail(f"QAttention: weight_zero_point is {w_zero.dtype}, weight is {weight.dtype}")
    acc = _integer_product(
        x, 0 if in_zero is None else int(in_zero), weight, 0 if w_zero is None else w_zero
    )
    # onnxruntime multiplies the weight scales by the input scale first (float32).
    multiplier = np.asarray(w_scale, _F32) * np.asarray(in_scale, _F32)
    return _scaled(acc, multiplier) + bias.astype(_F32)


@kernel("QAttention", domain=MS, since=1, ctx=True)
def q_attention(
    ctx: KernelContext,
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    input_scale: np.ndarray,
    weight_scale: np.ndarray,
    mask_index: np.ndarray | None = None,
    input_zero_point: np.ndarray | None = None,
    weight_zero_point: np.ndarray | None = None,
    past: np.ndarray | None = None,
    *,
    num_heads: int,
    unidirectional: int = 0,
    scale: float | None = None,
    mask_filter_value: float = -10000.0,
    do_rotary: int = 0,
    past_present_share_buffer: int = 0,
) -> tuple[np.ndarray, np.ndarray | None]:
    if do_rotary or past_present_share_buffer:
        fail("QAttention: do_rotary and past_present_share_buffer are not supported")
    qkv = _qkv_projection(
        x, weight, bias, input_scale, weight_scale, input_zero_point, weight_zero_point
    )
    width = qkv.shape[-1]
    if width % 3 or (width // 3) % num_heads:
        fail(f"QAttention: weight width {width} is not 3 x a multiple of {num_heads} heads")
    hidden = width // 3
    q, k, v = (_split_heads(qkv[..., i * hidden : (i + 1) * hidden], num_heads) for i in range(3))
    batch, _, seq, head = q.shape
    past_len = 0
    if past is not None:
        if past.ndim != 5 or past.shape[:3] != (2, batch, num_heads) or past.shape[4] != head:
            fail(
                f"QAttention: past must be [2, {batch}, {num_heads}, past_length, {head}], "
                f"got {list(past.shape)}"
            )
        past_len = past.shape[3]
        k = np.concatenate([past[0].astype(_F32), k], axis=2)
        v = np.concatenate([past[1].astype(_F32), v], axis=2)
    factor = _F32(scale if scale else 1.0 / np.sqrt(head))
    scores = (q @ np.swapaxes(k, -1, -2)) * factor
    mask = attention_mask_bias(
        mask_index, batch, seq, past_len, k.shape[2], bool(unidirectional), mask_filter_value
    )
    if mask is not None:
        scores = scores + mask
    out = (softmax_last(scores) @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    present = np.stack([k, v]) if ctx.wants_output(1) else None
    return out.astype(_F32, copy=False), present


# -------------------------------------------------------------- QEmbedLayerNormalization


def _dequantized(
    values: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, name: str
) -> np.ndarray:
    """(q - zp) times the scale in float32 (onnxruntime's Dequantize; DequantizeLinear's
    steps, exact for 8-bit q)."""
    if not (_is_one_value(scale) and _is_one_value(zero_point)):
        fail(f"QEmbedLayerNormalization: {name} scale and zero point must be one value each")
    if zero_point.dtype != values.dtype:
        types = f"{zero_point.dtype}, {name} is {values.dtype}"
        fail(f"QEmbedLayerNormalization: {name} zero point is {types}")
    return dequantize_linear(values, scale.reshape(()).astype(_F32), zero_point.reshape(()))


def _embedded(
    table: np.ndarray, ids: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, name: str
) -> np.ndarray:
    """Rows ``ids`` of a quantized table, dequantized after the gather (a vocabulary is
    never expanded to float)."""
    if table.ndim != 2 or table.dtype not in _BYTES:
        what = f"{table.dtype} {list(table.shape)}"
        fail(f"QEmbedLayerNormalization: {name} must be a 2-D int8/uint8 table, got {what}")
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        fail(f"QEmbedLayerNormalization: {name} index out of range [0, {table.shape[0]})")
    return _dequantized(table[ids], scale, zero_point, name)


def _required(t: np.ndarray | None, name: str) -> np.ndarray:
    if t is None:
        fail(f"QEmbedLayerNormalization: input {name} is required")
    return t


@kernel("QEmbedLayerNormalization", domain=MS, since=1)
def q_embed_layer_norm(
    input_ids: np.ndarray,
    segment_ids: np.ndarray | None,
    word_embedding: np.ndarray,
    position_embedding: np.ndarray,
    segment_embedding: np.ndarray | None,
    gamma: np.ndarray,
    beta: np.ndarray,
    mask: np.ndarray | None = None,
    word_scale: np.ndarray | None = None,
    position_scale: np.ndarray | None = None,
    segment_scale: np.ndarray | None = None,
    gamma_scale: np.ndarray | None = None,
    beta_scale: np.ndarray | None = None,
    word_zero_point: np.ndarray | None = None,
    position_zero_point: np.ndarray | None = None,
    segment_zero_point: np.ndarray | None = None,
    gamma_zero_point: np.ndarray | None = None,
    beta_zero_point: np.ndarray | None = None,
    *,
    epsilon: float = 1e-12,
) -> tuple[np.ndarray, np.ndarray]:
    ids_shape = list(input_ids.shape)
    if input_ids.ndim != 2:
        fail(f"QEmbedLayerNormalization: input_ids must be [batch, sequence], got {ids_shape}")
    for name, t in (("segment_ids", segment_ids), ("mask", mask)):
        if t is not None and t.shape != input_ids.shape:
            fail(f"QEmbedLayerNormalization: {name} must have the shape of input_ids {ids_shape}")
    if word_embedding.ndim != 2:
        fail(f"QEmbedLayerNormalization: word_embedding must be 2-D, got {word_embedding.ndim}-D")
    batch, seq = input_ids.shape
    hidden = word_embedding.shape[1]
    positions = np.broadcast_to(np.arange(seq), (batch, seq))  # position ids are implicit
    Part = tuple[str, np.ndarray | None, np.ndarray, np.ndarray | None, np.ndarray | None]
    parts: list[Part] = [
        ("word_embedding", word_embedding, input_ids, word_scale, word_zero_point),
        ("position_embedding", position_embedding, positions, position_scale, position_zero_point),
    ]
    if segment_ids is not None:  # DistilBERT has no segments
        parts.append(
            ("segment_embedding", segment_embedding, segment_ids, segment_scale, segment_zero_point)
        )
    total: np.ndarray | None = None
    for name, table, ids, scale, zero_point in parts:
        table = _required(table, name)
        if table.ndim == 2 and table.shape[1] != hidden:
            widths = f"{table.shape[1]} wide, word_embedding {hidden}"
            fail(f"QEmbedLayerNormalization: {name} is {widths}")
        rows = _embedded(
            table, ids.astype(np.int64), _required(scale, f"{name} scale"),
            _required(zero_point, f"{name} zero point"), name,
        )  # fmt: skip
        total = rows if total is None else total + rows  # word + position, then + segment
    assert total is not None
    if gamma.shape != (hidden,) or beta.shape != (hidden,):
        fail(f"QEmbedLayerNormalization: gamma and beta must have shape [{hidden}]")
    g = _dequantized(
        gamma,
        _required(gamma_scale, "gamma scale"),
        _required(gamma_zero_point, "gamma zero point"),
        "gamma",
    )
    bt = _dequantized(
        beta,
        _required(beta_scale, "beta scale"),
        _required(beta_zero_point, "beta zero point"),
        "beta",
    )
    layer_norm = standard_kernel("LayerNormalization", 17)
    normed = layer_norm(total, g, bt, axis=-1, epsilon=epsilon)[0]
    # onnxruntime counts the mask's 1s (not its non-zeros) per sequence.
    if mask is None:
        mask_index = np.zeros(batch, np.int32)
    else:
        mask_index = (mask == 1).sum(axis=1).astype(np.int32)
    return normed.astype(_F32, copy=False), mask_index


# ------------------------------------------------- com.microsoft Quantize/DequantizeLinear


@kernel("QuantizeLinear", domain=MS, since=1)
def ms_quantize_linear(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
) -> np.ndarray:
    # onnxruntime runs the standard kernel's class under this name (int8 to 16-bit types).
    quantize_linear = standard_kernel("QuantizeLinear", 21)
    return quantize_linear(x, y_scale, y_zero_point, axis=axis)  # type: ignore[no-any-return]


@kernel("DequantizeLinear", domain=MS, since=1)
def ms_dequantize_linear(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
) -> np.ndarray:
    dequantize_linear = standard_kernel("DequantizeLinear", 21)
    return dequantize_linear(x, x_scale, x_zero_point, axis=axis)  # type: ignore[no-any-return]
