"""Recurrent layers: RNN, GRU, LSTM (every opset; directions, sequence_lens, initial states,
peepholes, activation lists with alpha/beta, clip, layout, linear_before_reset).

The input projection X.W^T of all time steps is one GEMM up front; the time loop (inherently
sequential) does one H.R^T GEMM per step, vectorised over batch.  Reverse directions run
forward over per-batch reversed sequences, so sequence_lens is a gather, not a branch
(without padding the reversal is a view, and each step writes its output row in place).

With the default activations (Sigmoid, Tanh) and no clip, the loops of LSTM and GRU fold
the sigmoid's x/2 into the weights (`_recurrent_t`'s ``half`` rows, and the projection once
per call): a product or sum scaled by 0.5 is the unscaled one scaled, exactly in binary
floating point, so the step takes one tanh over all its gates and gives the same numbers,
bit for bit, as the general loop (tests/runtime/test_rnn_loops.py holds them to it).

When the compiled module runtime/native/_recurrent.c is there (onnxviz.runtime.native),
those same cases in float32 (padded batches too) run their time loop in C
instead: the step product and the gates' element-wise part fused per block of hidden
units, with its own float32 sigmoid and tanh (within 2-3 ulp: not numpy's bits, so the
numpy loops above are the reference only with ONNXVIZ_NATIVE=off; the C loop is held to
the float64 equations and to onnxruntime by tests/runtime/test_native_recurrent.py).
Every run mode calls the same kernel, so stepping shows the numbers a plain run gives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime import native
from onnxviz.runtime.kernels import packed_gemm
from onnxviz.runtime.kernels._weight_cache import derived
from onnxviz.runtime.kernels.blas import few_rows_matmul
from onnxviz.runtime.kernels.math_linalg import few_rows_by_packed_weight
from onnxviz.runtime.kernels.nn_geometry import compute_dtype
from onnxviz.runtime.registry import RUNTIME, kernel, specialized_outputs, specializer

Activation = Callable[[np.ndarray], np.ndarray]

# name -> (uses alpha, uses beta, default alpha, default beta)
_PARAMS: dict[str, tuple[bool, bool, float, float]] = {
    "affine": (True, True, 1.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0),
    "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 0.5 * tanh(x / 2) + 0.5: three cheap passes, no overflow for any x.
    y = np.multiply(x, 0.5)
    np.tanh(y, out=y)
    y *= 0.5
    y += 0.5
    return y


def _make_activation(name: str, alpha: float, beta: float) -> Activation:
    key = name.lower()
    table: dict[str, Activation] = {
        "sigmoid": _sigmoid,
        "tanh": np.tanh,
        "relu": lambda x: np.maximum(x, 0),
        "affine": lambda x: alpha * x + beta,
        "leakyrelu": lambda x: np.where(x >= 0, x, alpha * x),
        "thresholdedrelu": lambda x: np.where(x > alpha, x, 0),
        "scaledtanh": lambda x: alpha * np.tanh(beta * x),
        "hardsigmoid": lambda x: np.clip(alpha * x + beta, 0, 1),
        "elu": lambda x: np.where(x >= 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1)),
        "softsign": lambda x: x / (1 + np.abs(x)),
        "softplus": lambda x: np.logaddexp(0, x),
    }
    if key not in table:
        raise ExecutionError(f"recurrent layer: unknown activation '{name}'")
    return table[key]


def _activations(
    names: list[str] | None,
    defaults: list[str],
    n_dirs: int,
    alphas: list[float] | None,
    betas: list[float] | None,
) -> list[list[Activation]]:
    """Per direction, the activation functions (alpha/beta consumed in order by the
    functions that take them).  Made once per distinct attribute set: a layer's call
    on a short sequence spent a sixth of its time making the same functions again."""
    return _made_activations(
        None if names is None else tuple(names),
        tuple(defaults),
        n_dirs,
        None if alphas is None else tuple(alphas),
        None if betas is None else tuple(betas),
    )


@functools.lru_cache(maxsize=256)
def _made_activations(
    names_t: tuple[str, ...] | None,
    defaults_t: tuple[str, ...],
    n_dirs: int,
    alphas_t: tuple[float, ...] | None,
    betas_t: tuple[float, ...] | None,
) -> list[list[Activation]]:
    names = None if names_t is None else list(names_t)
    defaults = list(defaults_t)
    alphas, betas = alphas_t, betas_t
    per_dir = len(defaults)
    if not names:
        names = defaults * n_dirs
    elif len(names) == per_dir and n_dirs == 2:
        names = names * 2
    # The RNN schema's default lists both directions' functions; a one-way layer uses the first.
    names = names[: per_dir * n_dirs]
    if len(names) != per_dir * n_dirs:
        raise ExecutionError(
            f"recurrent layer: expected {per_dir * n_dirs} activations, got {names}"
        )
    alpha_it, beta_it = iter(alphas or []), iter(betas or [])
    funcs = []
    for name in names:
        uses_a, uses_b, da, db = _PARAMS.get(name.lower(), (False, False, 0.0, 0.0))
        a = next(alpha_it, da) if uses_a else da
        b = next(beta_it, db) if uses_b else db
        funcs.append(_make_activation(name, a, b))
    return [funcs[d * per_dir : (d + 1) * per_dir] for d in range(n_dirs)]


class _Setup:
    """Shapes, layout and per-direction data shared by the three layers."""

    def __init__(
        self,
        x: np.ndarray,
        w: np.ndarray,
        direction: str,
        hidden_size: int | None,
        layout: int,
        sequence_lens: np.ndarray | None,
    ) -> None:
        if direction == "foward":  # the opset-1 GRU schema's default is spelled so
            direction = "forward"
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ExecutionError(f"recurrent layer: unknown direction '{direction}'")
        self.layout = layout
        self.dtype = compute_dtype(x.dtype)
        xs = x.astype(self.dtype, copy=False)
        self.x = xs.transpose(1, 0, 2) if layout == 1 else xs  # (T, B, I)
        self.steps, self.batch = self.x.shape[:2]
        self.n_dirs = 2 if direction == "bidirectional" else 1
        if w.shape[0] != self.n_dirs:
            raise ExecutionError(
                f"recurrent layer: W has {w.shape[0]} directions, expected {self.n_dirs}"
            )
        self.reverse = [False, True] if self.n_dirs == 2 else [direction == "reverse"]
        self.hidden = int(hidden_size) if hidden_size else 0
        # Without sequence_lens every step of every sample counts: none of the padding
        # arrays below is read (each use is behind all_valid).
        self.all_valid = sequence_lens is None
        if sequence_lens is None:
            return
        self.lens = np.asarray(sequence_lens, dtype=np.int64).reshape(-1)
        t = np.arange(self.steps)[:, None]
        self.valid = t < self.lens[None, :]  # (T, B)
        self.all_valid = bool(self.valid.all())
        # Per-batch reversal of the valid prefix (padding stays in place).
        self.rev_index = np.where(self.valid, self.lens[None, :] - 1 - t, t)

    def state(self, init: np.ndarray | None, d: int) -> np.ndarray:
        """Direction ``d``'s initial state (zeros without one): a view of ``init`` when
        its dtype fits, which the loops only read."""
        if init is None:
            return np.zeros((self.batch, self.hidden), dtype=self.dtype)
        s = init.astype(self.dtype, copy=False)
        return s[:, d] if self.layout == 1 else s[d]

    def inputs(self, d: int) -> np.ndarray:
        if not self.reverse[d]:
            return self.x
        if self.all_valid:
            return self.x[::-1]  # a view: the projection's reshape makes the one copy
        return np.take_along_axis(self.x, self.rev_index[:, :, None], axis=0)

    def padding(self) -> list[np.ndarray | None] | None:
        """Per step, (B, 1) True where a sample's sequence goes on, or None at a step
        where all do; None throughout without padding.  The fast time loops keep the
        state of the other samples, as the general loops do."""
        if self.all_valid:
            return None
        return [None if row.all() else row[:, None] for row in self.valid]

    def output(self) -> np.ndarray:
        """The Y of all directions, (T, D, B, H), that the time loops write into."""
        return np.empty((self.steps, self.n_dirs, self.batch, self.hidden), dtype=self.dtype)

    def rows(self, y_all: np.ndarray, d: int) -> np.ndarray:
        """(T, B, H): where direction ``d``'s loop writes its step t.  Without padding a
        reverse direction writes backwards, so Y needs no reordering afterwards."""
        if self.reverse[d] and self.all_valid:
            return y_all[::-1, d]  # type: ignore[no-any-return]
        return y_all[:, d]  # type: ignore[no-any-return]

    def outputs(
        self, y_all: np.ndarray, finals: list[list[np.ndarray]], out_dtype: Any
    ) -> tuple[Any, ...]:
        if not self.all_valid:
            for d in range(self.n_dirs):
                y = np.where(self.valid[:, :, None], y_all[:, d], 0)
                if self.reverse[d]:
                    y = np.take_along_axis(y, self.rev_index[:, :, None], axis=0)
                    y = np.where(self.valid[:, :, None], y, 0)
                y_all[:, d] = y
        states = [_stacked(f) for f in finals]  # each (D, B, H)
        if self.layout == 1:
            y_all = y_all.transpose(2, 0, 1, 3)
            states = [s.transpose(1, 0, 2) for s in states]
        # Y and the stacked states are this call's own arrays: no copy to keep them.
        return (
            y_all.astype(out_dtype, copy=False),
            *[s.astype(out_dtype, copy=False) for s in states],
        )


def _stacked(states: list[np.ndarray]) -> np.ndarray:
    """The directions' final states as one fresh (D, B, H) array (np.stack's own cost
    was a tenth of a short sequence's call)."""
    out = np.empty((len(states), *states[0].shape), dtype=states[0].dtype)
    for d, state in enumerate(states):
        out[d] = state
    return out


def _project(x: np.ndarray, w_all: np.ndarray, d: int, dt: Any) -> np.ndarray:
    """X.W^T of every step as one 2-D GEMM ((T*B, I) x (I, G*H)); a 3-D @ 2-D matmul
    would run T small GEMMs instead.  W^T stays a transposed view: BLAS reads it as is,
    and measured faster than a contiguous copy (which also costs a pass over W)."""
    w = w_all[d]
    t, b, i = x.shape
    x2 = x.reshape(t * b, i)
    if dt == np.float32 and x2.dtype == np.float32 and w.dtype == np.float32:
        # A constant W packed once for the compiled GEMM (a dynamo export's one-step
        # LSTM spent 40% of its run in OpenBLAS packing W^T on every call; 32 steps
        # of 40 features to 256 gates: 7.4 us against OpenBLAS's 11.9).
        y = few_rows_by_packed_weight(
            x2, w, more_rows=True, source=w_all, part=d, small=packed_gemm.projection_macs()
        )
        if y is not None:
            return y.reshape(t, b, w.shape[0])
    return (x2 @ w.astype(dt, copy=False).T).reshape(t, b, w.shape[0])


def _recurrent_t(
    r: np.ndarray, d: int, dt: Any, split: int, half: int = 0
) -> tuple[np.ndarray, ...]:
    """Direction ``d`` of the recurrent weight R [D, G*H, H], transposed to contiguous
    (H, rows) blocks that the step GEMM h @ R^T reads row by row: rows [:split] and, when
    split is less than all of them, rows [split:] as a second block (GRU's z/r gates and
    its candidate).  Rows [:half] are scaled by 0.5 (the sigmoid gates of the default
    loops: see the module docstring).  Made once per constant R (_weight_cache), not on
    every call: the transpose is a pass over the whole matrix."""

    def build() -> tuple[np.ndarray, ...]:
        rd = r[d].astype(dt, copy=False)
        if half:
            rd = rd.copy()  # astype may have returned R itself
            rd[:half] *= 0.5
        blocks = [rd[:split], rd[split:]] if split < rd.shape[0] else [rd]
        return tuple(_padded_rows(block.T) for block in blocks)

    params = (d, np.dtype(dt).str, split, half)
    return derived("rnn_recurrent_t", (r,), params, build)  # type: ignore[no-any-return]


# Elements after each row of a transposed recurrent weight.  A step GEMM reads the rows
# of R^T together; at a distance of a multiple of 4 KB (a [256, 1024] float32 R^T: an
# LSTM of hidden 256) they fall in the same L1 cache sets and evict each other.  128
# more bytes per row: [4, 256] @ [256, 1024] took 41 us instead of 99 on Sandybridge's
# kernels, and on the AVX2 Haswell kernels 23 instead of 28 ([8, 256] rows: 33 instead
# of 46) on a quiet machine, the same when other processes shared its caches (AVX-512
# EPYC, 1 thread).  Same kernel, same sums: the same numbers.
_ROW_PAD_BYTES = 128


def _padded_rows(m: np.ndarray) -> np.ndarray:
    """A C-ordered copy of ``m`` whose rows lie _ROW_PAD_BYTES apart more than their
    length (a view into a wider array: BLAS takes it with its leading dimension)."""
    rows, cols = m.shape
    wide = np.empty((rows, cols + _ROW_PAD_BYTES // m.itemsize), dtype=m.dtype)
    out = wide[:, :cols]
    out[...] = m
    return out


# The compiled time loops (None: compiled kernels off or not built; the numpy loops run).
_RECURRENT = native.load("recurrent")

# Hidden units per block of `_native_packed` (_recurrent.c's UNITS).
_UNITS = 16


def _native_fits(setup: _Setup) -> bool:
    """Whether a default-activation layer's loops can run in C: float32, no empty
    dimension."""
    return (
        _RECURRENT is not None
        and setup.dtype == np.float32
        and min(setup.steps, setup.batch, setup.hidden) > 0
    )


def _native_order(setup: _Setup, d: int) -> tuple[bool, np.ndarray | None]:
    """The C loop's ``reverse`` and ``lens`` for direction ``d``.  Without padding a
    reverse direction writes Y backwards (`_Setup.rows`); with it, its inputs come per
    sample reversed (`_Setup.inputs`), it writes forwards, and an ended sample keeps its
    state (its rows of Y are zeroed by `_Setup.outputs`, as for the numpy loops)."""
    if setup.all_valid:
        return setup.reverse[d], None
    return False, setup.lens


def _native_packed(r: np.ndarray, d: int, first: int, gates: int, hs: int) -> np.ndarray:
    """Gates [first, first + gates) of direction ``d`` of R [D, G*H, H] in the layout the
    C loop reads at its level (_recurrent.c's header, float_layout): per block of _UNITS
    hidden units, (H, gates, _UNITS) with element [k, g, u] = R[(first + g) * H + u, k],
    zero past H; at AVX2 the block as two halves of _UNITS / 2 units, each (H, gates,
    _UNITS / 2).  Made once per constant R and layout (_weight_cache)."""
    assert _RECURRENT is not None
    halves = 2 if _RECURRENT.float_layout() == 1 else 1

    def build() -> np.ndarray:
        rd = r[d, first * hs : (first + gates) * hs].astype(np.float32)
        blocks = -(-hs // _UNITS)
        wide = np.zeros((gates, blocks * _UNITS, hs), dtype=np.float32)
        wide[:, :hs] = rd.reshape(gates, hs, hs)
        part = _UNITS // halves
        packed = wide.reshape(gates, blocks, halves, part, hs).transpose(1, 2, 4, 0, 3)
        return np.ascontiguousarray(packed)

    return derived("rnn_native_packed", (r,), (d, first, gates, halves), build)  # type: ignore[no-any-return]


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def _native_lstm(
    setup: _Setup, d: int, proj: np.ndarray, r: np.ndarray, h: np.ndarray, c: np.ndarray,
    y_all: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Direction ``d``'s LSTM loop in C (``proj`` with Wb + Rb, unscaled); writes its
    rows of ``y_all`` and returns the final h and c."""
    assert _RECURRENT is not None
    b, hs = setup.batch, setup.hidden
    h_out = np.empty((b, hs), dtype=np.float32)
    c_out = np.empty_like(h_out)
    reverse, lens = _native_order(setup, d)
    _lstm_loop(
        _f32(proj), _native_packed(r, d, 0, 4, hs), _f32(h), _f32(c), y_all, h_out, c_out,
        setup.steps, b, hs, setup.n_dirs, d, reverse, lens,
    )  # fmt: skip
    return h_out, c_out


def _lstm_loop(*args: Any) -> None:
    """_recurrent.c's LSTM time loop (every compiled LSTM call goes through here)."""
    assert _RECURRENT is not None
    _RECURRENT.lstm(*args)


def _gru_loop(*args: Any) -> None:
    """_recurrent.c's GRU time loop (every compiled GRU call goes through here)."""
    assert _RECURRENT is not None
    _RECURRENT.gru(*args)


def _native_gru(
    setup: _Setup, d: int, proj: np.ndarray, r: np.ndarray, rb_h: np.ndarray, h: np.ndarray,
    y_all: np.ndarray, linear_before_reset: bool,
) -> np.ndarray:  # fmt: skip
    """Direction ``d``'s GRU loop in C (``proj`` with the biases of `_gru_biases`,
    unscaled); writes its rows of ``y_all`` and returns the final h."""
    assert _RECURRENT is not None
    b, hs = setup.batch, setup.hidden
    h_out = np.empty((b, hs), dtype=np.float32)
    if linear_before_reset:
        w1, w2, rbh = _native_packed(r, d, 0, 3, hs), None, _f32(rb_h)
    else:
        w1, w2, rbh = _native_packed(r, d, 0, 2, hs), _native_packed(r, d, 2, 1, hs), None
    reverse, lens = _native_order(setup, d)
    _gru_loop(
        _f32(proj), w1, w2, rbh, _f32(h), y_all, h_out,
        setup.steps, b, hs, setup.n_dirs, d, reverse, linear_before_reset, lens,
    )  # fmt: skip
    return h_out


def _clip(x: np.ndarray, clip: float | None) -> np.ndarray:
    return np.clip(x, -clip, clip) if clip is not None and clip > 0 else x


def _clips(clip: float | None) -> bool:
    return clip is not None and clip > 0


def _biases(
    b: np.ndarray | None, d: int, gates: int, hidden: int, dt: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Direction ``d``'s input and recurrent biases (Wb, Rb) in ``dt``, read-only; made
    once per constant B (_weight_cache)."""
    if b is None:
        z = np.zeros(gates * hidden, dtype=dt)
        return z, z

    def build() -> tuple[np.ndarray, np.ndarray]:
        bd = b[d].astype(dt)
        return bd[: gates * hidden], bd[gates * hidden :]

    params = (d, gates, hidden, np.dtype(dt).str)
    return derived("rnn_biases", (b,), params, build)  # type: ignore[no-any-return]


def _bias_sum(b: np.ndarray | None, d: int, gates: int, hidden: int, dt: Any) -> np.ndarray | None:
    """Wb + Rb of direction ``d`` (None without B), made once per constant B: the LSTM
    and RNN add both to every step's projection."""
    if b is None:
        return None

    def build() -> np.ndarray:
        wb, rb = _biases(b, d, gates, hidden, dt)
        return wb + rb

    params = (d, gates, hidden, np.dtype(dt).str)
    return derived("rnn_bias_sum", (b,), params, build)  # type: ignore[no-any-return]


def _hidden_size(w: np.ndarray, r: np.ndarray, gates: int, hidden_size: int | None) -> int:
    h = int(hidden_size) if hidden_size else r.shape[-1]
    if w.shape[1] != gates * h or r.shape[1] != gates * h:
        raise ExecutionError(
            f"recurrent layer: W {w.shape} / R {r.shape} do not fit hidden size {h}"
        )
    return h


@kernel("RNN", since=(1, 7, 14, 22))
def rnn(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
    output_sequence: int = 0,
) -> tuple[Any, ...]:
    setup = _Setup(x, w, direction, _hidden_size(w, r, 1, hidden_size), layout, sequence_lens)
    acts = _activations(activations, ["Tanh"], setup.n_dirs, activation_alpha, activation_beta)
    dt = setup.dtype
    all_valid = setup.all_valid
    y_all = setup.output()
    finals = []
    for d in range(setup.n_dirs):
        f = acts[d][0]
        proj = _project(setup.inputs(d), w, d, dt)
        bias = _bias_sum(b, d, 1, setup.hidden, dt)
        if bias is not None:
            proj += bias
        rt = _recurrent_t(r, d, dt, setup.hidden)[0]
        h = setup.state(initial_h, d)
        y = setup.rows(y_all, d)
        for t in range(setup.steps):
            h_new = f(_clip(proj[t] + h @ rt, clip))
            h = h_new if all_valid else np.where(setup.valid[t][:, None], h_new, h)
            y[t] = h_new
        finals.append(h)
    return setup.outputs(y_all, [finals], x.dtype)


def _gru_steps(
    proj: np.ndarray,
    rts: tuple[np.ndarray, ...],
    rb_h: np.ndarray,
    h: np.ndarray,
    y: np.ndarray,
    linear_before_reset: bool,
    keep: list[np.ndarray | None] | None,
) -> np.ndarray:
    """The GRU time loop with the default activations and no clip (``keep``:
    `_Setup.padding`): step GEMMs into reused buffers, the new h written straight into
    its row of y.  The
    z/r columns of ``proj`` and of R^T come scaled by 0.5, so the sigmoid is the tanh
    pass then ``* 0.5 + 0.5`` (`_sigmoid`'s own steps); ``proj`` holds the biases that
    are plain sums (`_gru_biases`).  ``rts`` is `_recurrent_t`'s: the z/r block and the
    candidate's, or one block of all three gates (`_gru_split`).  Every other step is the general loop's, in its order: the same
    roundings.  Outputs given, operands as arrays: for a small layer each call's own
    cost is most of the step (a Python float costs a conversion)."""
    hs = rb_h.shape[0]
    dt = proj.dtype
    half, one = np.asarray(0.5, dtype=dt), np.asarray(1, dtype=dt)
    merged = len(rts) == 1
    pre = np.empty((proj.shape[1], 3 * hs), dtype=dt)  # with merged products: all gates
    pre_zr = pre[:, : 2 * hs] if merged else np.empty((proj.shape[1], 2 * hs), dtype=dt)
    pre_h = pre[:, 2 * hs :] if merged else np.empty((proj.shape[1], hs), dtype=dt)
    blend = np.empty((proj.shape[1], hs), dtype=dt)
    gated = np.empty_like(blend)
    z, rg = pre_zr[:, :hs], pre_zr[:, hs:]
    for t in range(proj.shape[0]):
        p = proj[t]
        if merged:
            few_rows_matmul(h, rts[0], pre)
            np.add(p[:, : 2 * hs], pre_zr, pre_zr)
        else:
            np.add(p[:, : 2 * hs], few_rows_matmul(h, rts[0], pre_zr), pre_zr)
        np.tanh(pre_zr, pre_zr)
        np.multiply(pre_zr, half, pre_zr)
        np.add(pre_zr, half, pre_zr)
        if linear_before_reset:
            if not merged:
                few_rows_matmul(h, rts[1], pre_h)
            np.add(pre_h, rb_h, pre_h)
            np.multiply(rg, pre_h, pre_h)
        else:
            few_rows_matmul(np.multiply(rg, h, gated), rts[1], pre_h)
        np.add(p[:, 2 * hs :], pre_h, pre_h)
        np.tanh(pre_h, pre_h)
        np.subtract(one, z, blend)
        np.multiply(blend, pre_h, blend)
        h_new = y[t]
        np.multiply(z, h, h_new)
        np.add(h_new, blend, h_new)
        going = None if keep is None else keep[t]
        h = h_new if going is None else np.where(going, h_new, h)
    return h


def _gru_split(hs: int, batch: int, linear_before_reset: int) -> int:
    """Rows of R in the first block of `_recurrent_t` for a GRU: the z/r gates, or all
    three gates when the candidate's product does not wait for the reset gate
    (linear_before_reset) and the batch is one row.  One product instead of two then
    saves a call per step (hidden 64-256: 7-16% of the step); with more rows the step's
    element-wise passes over column slices of the shared output cost more (8% slower)."""
    return 3 * hs if linear_before_reset and batch == 1 else 2 * hs


def _gru_biases(proj: np.ndarray, rb: np.ndarray, hs: int, linear_before_reset: int) -> None:
    """Adds to the projection (already holding Wb) the recurrent biases that are plain
    sums: Rb of the z and r gates, and of the candidate unless linear_before_reset puts
    it inside the reset gate's product.  One pass per call instead of one per step."""
    cols = 2 * hs if linear_before_reset else 3 * hs
    proj[:, :, :cols] += rb[:cols]


class _Compiled:
    """What a layer's compiled time loop needs besides its inputs, for one W, R, B and
    attribute set (float32, default activations, no clip, peepholes or sequence_lens,
    layout 0): the directions, the hidden size, per direction R in the loop's layout and
    the biases the projection takes.  The kernels make it on each call; their
    specializers once per node (the lookups were a third of a short sequence's call)."""

    __slots__ = (
        "gates",
        "n_dirs",
        "reverse",
        "hidden",
        "packs",
        "biases",
        "rb_h",
        "lbr",
        "rb_sums",
        "projs",
    )

    def __init__(
        self, gates: int, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
        direction: str, hidden_size: int | None, linear_before_reset: int = 0,
    ) -> None:  # fmt: skip
        hs = _hidden_size(w, r, gates, hidden_size)
        if direction == "foward":  # the opset-1 GRU schema's default is spelled so
            direction = "forward"
        self.gates = gates
        self.n_dirs = 2 if direction == "bidirectional" else 1
        if w.shape[0] != self.n_dirs or direction not in ("forward", "reverse", "bidirectional"):
            raise ValueError("not the compiled loop's case")  # the kernel says why
        self.reverse = [False, True] if self.n_dirs == 2 else [direction == "reverse"]
        self.hidden = hs
        # Per direction, X.W^T + Wb as one held product (`hold_projections`), or None.
        self.projs: list[Any] = [None] * self.n_dirs
        self.lbr = bool(linear_before_reset)
        f32 = np.float32
        self.packs: list[tuple[np.ndarray, np.ndarray | None]]
        if gates == 4:  # LSTM: R's four gates, Wb + Rb
            self.packs = [(_native_packed(r, d, 0, 4, hs), None) for d in range(self.n_dirs)]
            self.biases = [_bias_sum(b, d, 4, hs, f32) for d in range(self.n_dirs)]
            self.rb_h: list[np.ndarray | None] = [None] * self.n_dirs
            self.rb_sums: list[np.ndarray | None] = [None] * self.n_dirs
        else:  # GRU: Wb then the plain sums of Rb (_gru_biases), and the candidate's Rb
            if self.lbr:
                self.packs = [(_native_packed(r, d, 0, 3, hs), None) for d in range(self.n_dirs)]
            else:
                self.packs = [
                    (_native_packed(r, d, 0, 2, hs), _native_packed(r, d, 2, 1, hs))
                    for d in range(self.n_dirs)
                ]
            self.biases = []
            self.rb_h = []
            # The recurrent biases _gru_biases adds per call, found once (its lookup in
            # the weight cache was a tenth of a one-step call).
            self.rb_sums = []
            for d in range(self.n_dirs):
                wb, rb = _biases(b, d, 3, hs, f32)
                self.biases.append(wb)
                self.rb_h.append(_f32(rb[2 * hs :]) if self.lbr else None)
                self.rb_sums.append(None if b is None else rb)

    def hold_projections(self, w: np.ndarray) -> None:
        """For a node's specialized call: each direction's projection of the input and
        its bias, X.W^T + Wb, as a held product (packed_gemm.held_product: in C, the
        bias in the epilogue, rounded as the kernel's sum-then-add is) by the W^T that
        `_project` packs too, for the rows the packed GEMM takes; other rows go to
        `_project` and the add, as the kernel runs them."""
        mod = packed_gemm.module()
        if mod is None:
            return
        for d in range(self.n_dirs):
            p = packed_gemm.packed(w[d].T, mod, source=w, part=d)
            if p is not None:
                bias = self.biases[d]
                fallback = functools.partial(_projected, w=w, d=d, bias=bias)
                row = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
                # the products `_project` sends to the kernel too (the same bits)
                small = packed_gemm.projection_macs()
                self.projs[d] = packed_gemm.held_product(mod, p, row, (), fallback, small)

    def held_layer(
        self, w: np.ndarray, expect: tuple[tuple[int, Any], ...], n: int, call: Any
    ) -> Any:
        """The node's call in C (native/_recurrent.c's `held`): the same projections
        (the held products of `hold_projections`, else `_projected`), bias sums and
        loops as `run`, fronting ``call`` (which takes every call it does not); None
        when the compiled module is off."""
        if _RECURRENT is None:
            return None
        projs = tuple(
            held
            if held is not None
            else functools.partial(_projected, w=w, d=d, bias=self.biases[d])
            for d, held in enumerate(self.projs)
        )
        lstm = self.gates == 4
        return _RECURRENT.held(
            self.gates, self.lbr, self.hidden, w.shape[2], tuple(self.reverse), projs,
            tuple(p[0] for p in self.packs), tuple(p[1] for p in self.packs),
            tuple(self.rb_h), tuple(None if lstm else rb for rb in self.rb_sums),
            expect, n, call, np.ndarray, np.empty, np.dtype(np.float32),
        )  # fmt: skip

    def fits(self, x: Any, w: np.ndarray) -> bool:
        """Whether the loop takes input x: float32 (T, B, I), no empty dimension."""
        return (
            _RECURRENT is not None
            and type(x) is np.ndarray
            and x.dtype == np.float32
            and x.ndim == 3
            and x.shape[2] == w.shape[2]
            and min(x.shape[0], x.shape[1], self.hidden) > 0
        )

    def run(
        self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, initial_h: Any, initial_c: Any
    ) -> tuple[np.ndarray, ...]:
        """(Y, Y_h[, Y_c]) as the kernels' compiled loops give them: the same projection,
        bias sums and loop calls, each output one fresh array."""
        assert _RECURRENT is not None
        steps, batch = x.shape[:2]
        hs, n_dirs = self.hidden, self.n_dirs
        y_all = np.empty((steps, n_dirs, batch, hs), dtype=np.float32)
        h_out = np.empty((n_dirs, batch, hs), dtype=np.float32)
        c_out = np.empty_like(h_out) if self.gates == 4 else None
        for d in range(n_dirs):
            reverse = self.reverse[d]
            xs = x[::-1] if reverse else x
            held = self.projs[d]
            if held is not None:
                proj = held(xs.reshape(steps * batch, x.shape[2])).reshape(steps, batch, -1)
            else:
                proj = _projected(xs.reshape(steps * batch, x.shape[2]), w, d, self.biases[d])
                proj = proj.reshape(steps, batch, -1)
            h = _initial(initial_h, d, batch, hs)
            w1, w2 = self.packs[d]
            if c_out is not None:
                c = _initial(initial_c, d, batch, hs)
                _lstm_loop(
                    _f32(proj), w1, _f32(h), _f32(c), y_all, h_out[d], c_out[d],
                    steps, batch, hs, n_dirs, d, reverse, None,
                )  # fmt: skip
            else:
                rb = self.rb_sums[d]
                if rb is not None:
                    _gru_biases(proj, rb, hs, self.lbr)
                _gru_loop(
                    _f32(proj), w1, w2, self.rb_h[d], _f32(h), y_all, h_out[d],
                    steps, batch, hs, n_dirs, d, reverse, self.lbr, None,
                )  # fmt: skip
        return (y_all, h_out) if c_out is None else (y_all, h_out, c_out)


def _projected(x: np.ndarray, w: np.ndarray, d: int, bias: np.ndarray | None) -> np.ndarray:
    """X.W^T + Wb of direction ``d`` for the rows of ``x`` (its last axis the input
    features; (T, B, I) or (T*B, I)), as the compiled loops take it: `_project`, then the
    bias added; x's leading shape with G*H columns."""
    rows = x.reshape(1, -1, x.shape[-1])
    proj = _project(rows, w, d, np.float32)
    if bias is not None:
        proj += bias
    return proj.reshape(*x.shape[:-1], proj.shape[-1])


def _initial(init: Any, d: int, batch: int, hs: int) -> np.ndarray:
    """Direction ``d``'s initial state, layout 0 (zeros without one)."""
    if init is None:
        return np.zeros((batch, hs), dtype=np.float32)
    return init.astype(np.float32, copy=False)[d]  # type: ignore[no-any-return]


def _compiled_case(
    gates: int, w: Any, r: Any, b: Any, sequence_lens: Any, attrs: dict[str, Any],
    defaults: list[str], peepholes: Any = None,
) -> _Compiled | None:  # fmt: skip
    """The layer's `_Compiled` when its compiled loop runs calls with these weights and
    attributes (see there; `_Compiled.fits` then says whether it takes an input), else
    None: the kernel's general path then runs (and raises what a call deserves)."""
    if (
        _RECURRENT is None
        or sequence_lens is not None
        or peepholes is not None
        or attrs.get("layout", 0)
        or attrs.get("input_forget", 0)
        or _clips(attrs.get("clip"))
        or any(type(a) is not np.ndarray or a.dtype != np.float32 for a in (w, r))
        or (b is not None and (type(b) is not np.ndarray or b.dtype != np.float32))
        or w.ndim != 3
        or r.ndim != 3
    ):
        return None
    direction = attrs.get("direction", "forward")
    n_dirs = 2 if direction == "bidirectional" else 1
    try:
        acts = _activations(
            attrs.get("activations"), defaults, n_dirs,
            attrs.get("activation_alpha"), attrs.get("activation_beta"),
        )  # fmt: skip
    except ExecutionError:
        return None
    default = (_sigmoid, np.tanh, np.tanh)[: len(defaults)]
    if any(tuple(a) != default for a in acts):
        return None
    try:
        compiled = _Compiled(
            gates, w, r, b, direction, attrs.get("hidden_size"),
            attrs.get("linear_before_reset", 0),
        )  # fmt: skip
    except (ExecutionError, ValueError, IndexError):
        return None
    return compiled


def _specialize_layer(kernel_fn: Any, gates: int, defaults: list[str]) -> Any:
    """The specializer (registry.specializer) of LSTM (gates 4) or GRU (3): with
    constant W, R and B, no sequence_lens and no peepholes, the `_Compiled` of the node
    is made once and each call runs it (the kernel's own call makes it again); another
    weight (an initializer a feed overrides) or an input it does not take runs the
    kernel.  The same calls, so the same numbers."""

    def specialize(attrs: dict[str, Any], known: tuple[Any, ...], n: int) -> Any:
        padded = (*known, None, None, None, None, None, None, None, None)
        w, r, b, seq = padded[1], padded[2], padded[3], padded[4]
        peep = padded[7] if gates == 4 else None
        if any(v is RUNTIME for v in (w, r, b, seq, peep)) or w is None or r is None:
            return None
        compiled = _compiled_case(gates, w, r, b, seq, attrs, defaults, peep)
        if compiled is None:
            return None
        compiled.hold_projections(w)
        fallback = functools.partial(kernel_fn, **attrs)

        def call(x: Any, *given: Any) -> Any:
            ins = (*given, None, None, None, None, None, None, None)
            if (
                ins[0] is not w
                or ins[1] is not r
                or ins[2] is not b
                or ins[3] is not None
                or (gates == 4 and ins[6] is not None)
                or not compiled.fits(x, w)
            ):
                outs = fallback(x, *given)
            else:
                state_c = ins[5] if gates == 4 else None
                outs = compiled.run(x, w, b, ins[4], state_c)
            return specialized_outputs(outs, n)

        # The same call in C from the node loop (what it does not take comes to `call`):
        # the weights by identity, no sequence_lens, no peepholes.
        expect = ((1, w), (2, r), (3, b), (4, None)) + (((7, None),) if gates == 4 else ())
        held = compiled.held_layer(w, expect, n, call)
        return call if held is None else held

    return specialize


@kernel("GRU", since=(1, 3, 7, 14, 22))
def gru(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
    linear_before_reset: int = 0,
    output_sequence: int = 0,
) -> tuple[Any, ...]:
    compiled = _compiled_case(
        3, w, r, b, sequence_lens,
        {
            "activation_alpha": activation_alpha, "activation_beta": activation_beta,
            "activations": activations, "clip": clip, "direction": direction,
            "hidden_size": hidden_size, "layout": layout,
            "linear_before_reset": linear_before_reset,
        },
        ["Sigmoid", "Tanh"],
    )  # fmt: skip
    if compiled is not None and compiled.fits(x, w):
        return compiled.run(x, w, b, initial_h, None)
    setup = _Setup(x, w, direction, _hidden_size(w, r, 3, hidden_size), layout, sequence_lens)
    acts = _activations(
        activations, ["Sigmoid", "Tanh"], setup.n_dirs, activation_alpha, activation_beta
    )
    dt = setup.dtype
    all_valid = setup.all_valid
    hs = setup.hidden
    y_all = setup.output()
    finals = []
    for d in range(setup.n_dirs):
        f, g = acts[d]
        wb, rb = _biases(b, d, 3, hs, dt)
        proj = _project(setup.inputs(d), w, d, dt)  # gate order z, r, h
        proj += wb
        h = setup.state(initial_h, d)
        y = setup.rows(y_all, d)
        _gru_biases(proj, rb, hs, linear_before_reset)
        rb_h = rb[2 * hs :]
        split = _gru_split(hs, setup.batch, linear_before_reset)
        if not _clips(clip) and f is _sigmoid and g is np.tanh and _native_fits(setup):
            lbr = bool(linear_before_reset)
            finals.append(_native_gru(setup, d, proj, r, rb_h, h, y_all, lbr))
            continue
        if not _clips(clip) and f is _sigmoid and g is np.tanh:
            proj[:, :, : 2 * hs] *= 0.5
            rts = _recurrent_t(r, d, dt, split, half=2 * hs)
            lbr = bool(linear_before_reset)
            h = _gru_steps(proj, rts, rb_h, h, y, lbr, setup.padding())
            finals.append(h)
            continue
        rts = _recurrent_t(r, d, dt, split)
        for t in range(setup.steps):
            p = proj[t]
            hr = few_rows_matmul(h, rts[0])
            zr = f(_clip(p[:, : 2 * hs] + hr[:, : 2 * hs], clip))
            z, rg = zr[:, :hs], zr[:, hs:]
            if linear_before_reset:
                h_r = hr[:, 2 * hs :] if len(rts) == 1 else few_rows_matmul(h, rts[1])
                cand = p[:, 2 * hs :] + rg * (h_r + rb_h)
            else:
                cand = p[:, 2 * hs :] + few_rows_matmul(rg * h, rts[1])
            hc = g(_clip(cand, clip))
            h_new = (1 - z) * hc + z * h
            h = h_new if all_valid else np.where(setup.valid[t][:, None], h_new, h)
            y[t] = h_new
        finals.append(h)
    return setup.outputs(y_all, [finals], x.dtype)


def _lstm_steps(
    proj: np.ndarray,
    rt: np.ndarray,
    h: np.ndarray,
    c: np.ndarray,
    y: np.ndarray,
    keep: list[np.ndarray | None] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The LSTM time loop with the default activations, without peepholes or clip (the
    common case; ``keep``: `_Setup.padding`): the step GEMM writes into one reused gate
    buffer, one tanh pass covers all four gates (the i, o, f columns of ``proj`` and
    ``rt`` come scaled by 0.5, then ``* 0.5 + 0.5`` finishes `_sigmoid`'s steps), the
    cell state is updated in place and each h goes straight into its row of y.  Every
    step is the general loop's, in its order: the same roundings."""
    hs = rt.shape[0]
    half = np.asarray(0.5, dtype=proj.dtype)  # an array operand: see `_gru_steps`
    gates = np.empty(proj.shape[1:], dtype=proj.dtype)
    c = np.array(c, dtype=proj.dtype)  # own copy: updated in place
    c_old = np.empty_like(c)  # at a padded step: the state the ended samples keep
    iof = gates[:, : 3 * hs]
    i_g, o_g, f_g = gates[:, :hs], gates[:, hs : 2 * hs], gates[:, 2 * hs : 3 * hs]
    c_cand = gates[:, 3 * hs :]
    for t in range(proj.shape[0]):
        going = None if keep is None else keep[t]
        few_rows_matmul(h, rt, gates)
        np.add(gates, proj[t], gates)
        np.tanh(gates, gates)
        np.multiply(iof, half, iof)
        np.add(iof, half, iof)
        if going is not None:
            np.copyto(c_old, c)
        np.multiply(c, f_g, c)
        np.multiply(i_g, c_cand, i_g)  # the gates are rewritten next step: free to overwrite
        np.add(c, i_g, c)
        h_new = y[t]
        np.tanh(c, h_new)
        np.multiply(h_new, o_g, h_new)
        if going is None:
            h = h_new
        else:
            h = np.where(going, h_new, h)
            np.copyto(c, c_old, where=~going)
    return h, c


@kernel("LSTM", since=(1, 7, 14, 22))
def lstm(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    initial_c: np.ndarray | None = None,
    p: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    input_forget: int = 0,
    layout: int = 0,
    output_sequence: int = 0,
) -> tuple[Any, ...]:
    compiled = _compiled_case(
        4, w, r, b, sequence_lens,
        {
            "activation_alpha": activation_alpha, "activation_beta": activation_beta,
            "activations": activations, "clip": clip, "direction": direction,
            "hidden_size": hidden_size, "input_forget": input_forget, "layout": layout,
        },
        ["Sigmoid", "Tanh", "Tanh"],
        p,
    )  # fmt: skip
    if compiled is not None and compiled.fits(x, w):
        return compiled.run(x, w, b, initial_h, initial_c)
    setup = _Setup(x, w, direction, _hidden_size(w, r, 4, hidden_size), layout, sequence_lens)
    acts = _activations(
        activations, ["Sigmoid", "Tanh", "Tanh"], setup.n_dirs, activation_alpha, activation_beta
    )
    dt = setup.dtype
    all_valid = setup.all_valid
    hs = setup.hidden
    y_all = setup.output()
    finals_h, finals_c = [], []
    for d in range(setup.n_dirs):
        f, g, hact = acts[d]
        proj = _project(setup.inputs(d), w, d, dt)  # gate order i, o, f, c
        bias = _bias_sum(b, d, 4, hs, dt)
        if bias is not None:
            proj += bias
        h = setup.state(initial_h, d)
        c = setup.state(initial_c, d)
        y = setup.rows(y_all, d)
        if (
            p is None
            and not input_forget
            and not _clips(clip)
            and (f, g, hact) == (_sigmoid, np.tanh, np.tanh)
        ):
            if _native_fits(setup):
                h, c = _native_lstm(setup, d, proj, r, h, c, y_all)
                finals_h.append(h)
                finals_c.append(c)
                continue
            rt = _recurrent_t(r, d, dt, 4 * hs, half=3 * hs)[0]
            proj[:, :, : 3 * hs] *= 0.5
            h, c = _lstm_steps(proj, rt, h, c, y, setup.padding())
            finals_h.append(h)
            finals_c.append(c)
            continue
        rt = _recurrent_t(r, d, dt, 4 * hs)[0]
        if p is not None:
            pd = p[d].astype(dt)
            p_i, p_o, p_f = pd[:hs], pd[hs : 2 * hs], pd[2 * hs :]
        else:
            p_i = p_o = p_f = np.zeros(hs, dtype=dt)
        for t in range(setup.steps):
            gates = few_rows_matmul(h, rt)
            gates += proj[t]
            if p is None:
                # No peepholes: the i, o, f gates are one activation call.
                iof = f(_clip(gates[:, : 3 * hs], clip))
                i_g, o_g, f_g = iof[:, :hs], iof[:, hs : 2 * hs], iof[:, 2 * hs :]
                if input_forget:
                    f_g = 1 - i_g
            else:
                i_g = f(_clip(gates[:, :hs] + p_i * c, clip))
                if input_forget:
                    f_g = 1 - i_g
                else:
                    f_g = f(_clip(gates[:, 2 * hs : 3 * hs] + p_f * c, clip))
            c_cand = g(_clip(gates[:, 3 * hs :], clip))
            c_new = f_g * c + i_g * c_cand
            if p is not None:
                o_g = f(_clip(gates[:, hs : 2 * hs] + p_o * c_new, clip))
            h_new = o_g * hact(c_new)
            if all_valid:
                h, c = h_new, c_new
            else:
                keep = setup.valid[t][:, None]
                h = np.where(keep, h_new, h)
                c = np.where(keep, c_new, c)
            y[t] = h_new
        finals_h.append(h)
        finals_c.append(c)
    return setup.outputs(y_all, [finals_h, finals_c], x.dtype)


specializer(lstm)(_specialize_layer(lstm, 4, ["Sigmoid", "Tanh", "Tanh"]))
specializer(gru)(_specialize_layer(gru, 3, ["Sigmoid", "Tanh"]))
