"""The compiled step loop of com.microsoft DynamicQuantizeLSTM (runtime/native/_recurrent.c's
qlstm, routed by kernels/contrib_quant_dynamic._compiled_steps), at every level this CPU
has (level 3 streams R as int8 quads through vpdpbusd, levels 0-2 as int16 pairs).

* On random directions (batch, hidden not a multiple of 16 or 4, steps, ended and empty
  sequences with and without a Y output, initial states or zeros, int8 and uint8 R with
  zero points, per-tensor or per-column scales, with and without B, input_forget): the
  compiled loop gives, bit for bit, the numpy loop (`_numpy_steps`) run with the
  module's own sigmoid and tanh.  Everything else in the step is shared arithmetic: the
  h codes and the integer products must be identical, and the gates and the cell rounded
  step by step as numpy rounds them, or the bits differ (a code one off moves a gate by
  up to 255 * h_scale * r_scale, ~1e-2 here).
* Against the plain numpy loop (numpy's tanh and sigmoid): its first step within a few
  float32 ulps (only the activations differ), and for layers with trained-like scales
  the whole sequence within a few h quantization steps (`_SEQUENCE_TOL`: an activation's
  last bit can move a later h across a rounding boundary of its uint8 code; with the
  wide random scales the recurrence is chaotic and makes any difference grow).
* A NaN or an infinite range in a state to quantize makes the C loop give up; the numpy
  loop then runs, and gives its numbers.  A NaN that appears in the last step goes where
  numpy sends it.
* Peepholes, clip, other activations, a hidden size past 32768 and the kernels off stay
  on the numpy loop; wrong calls raise ValueError; R's packed form is made once.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxviz.runtime import native
from onnxviz.runtime.kernels import _weight_cache
from onnxviz.runtime.kernels import contrib_quant_dynamic as cqd
from onnxviz.runtime.kernels.nn_rnn import _sigmoid
from tests.runtime.native_modules import at_level, compiled

pytestmark = pytest.mark.numeric

LEVELS = native.levels()
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_F32 = np.float32
_ULP1 = 2.0**-23  # a float32 ulp at 1.0
# The largest difference from the numpy loop over a whole sequence of a layer with
# trained-like scales (below): four h quantization steps of h in [-1, 1].  The two loops'
# activations differ in the last bits, which now and then (2 directions in 3,000) puts
# one h on the other side of a rounding boundary of its uint8 code; that moves each gate
# by |R - zr| * h_scale * r_scale <= 255 * h_scale / (128 sqrt(H)) = 2 / sqrt(H) h steps
# and an h by about as much, and the contracting recurrence does not amplify it.
# Measured: 2.3e-4 at most over 3,000 random directions; 2.5 ulp on the first step.
_H_STEP = 2 / 255
_SEQUENCE_TOL = 4 * _H_STEP


def _module() -> Any:
    return compiled("recurrent", "DynamicQuantizeLSTM runs its numpy loop")


class _Direction:
    """One direction's call of the step loops: `_numpy_steps`' arguments."""

    def __init__(self, rng: np.random.Generator, dims: tuple[int, int, int], **kw: Any) -> None:
        steps, batch, hidden = dims
        dtype = kw.get("dtype", np.int8)
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max + 1, (hidden, 4 * hidden)).astype(dtype)
        values.flags.writeable = False  # a constant (an initializer): packed once
        if dtype is np.int8:
            zero = int(rng.integers(-3, 4)) if kw.get("zero_point", True) else 0
        else:
            zero = int(rng.integers(118, 138))
        # "wide": quantize_dynamic's scales of random float weights (the other tests'),
        # a chaotic recurrence; "trained": R's products about h's size (|R - zr| *
        # r_scale * sqrt(H) ~ 0.3-1), a contracting one, as trained layers are.
        low, high = (0.3 / 128 / np.sqrt(hidden), 1 / 128 / np.sqrt(hidden))
        if kw.get("scales", "wide") == "wide":
            low, high = 0.002, 0.02
        size = 4 * hidden if kw.get("per_column", True) else ()
        scale = np.asarray(rng.uniform(low, high, size), _F32)
        self.r = cqd._QuantWeight(values, scale, zero)
        self.x_part = (rng.standard_normal((steps, batch, 4 * hidden)) * 1.5).astype(_F32)
        if kw.get("states", True):
            self.h0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(_F32)
            self.c0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(_F32)
        else:
            self.h0 = np.zeros((batch, hidden), _F32)
            self.c0 = np.zeros((batch, hidden), _F32)
        bias: np.ndarray | None = (rng.standard_normal(4 * hidden) * 0.3).astype(_F32)
        if not kw.get("bias", True):
            bias = None
        self.cell = cqd._Cell(bias, None, [_sigmoid, np.tanh, np.tanh], None, kw.get("forget", 0))
        lens = kw.get("lens")
        self.lens = np.full(batch, steps, np.int64) if lens is None else np.asarray(lens, np.int64)
        self.zero_ended = kw.get("zero_ended", True)

    def args(self, cell: cqd._Cell | None = None) -> tuple[Any, ...]:
        return (self.x_part, self.r, self.lens, (self.h0, self.c0), cell or self.cell,
                self.zero_ended)  # fmt: skip

    def compiled(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        return cqd._compiled_steps(*self.args())

    def numpy(self, cell: cqd._Cell | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return cqd._numpy_steps(*self.args(cell))

    def twin(self, module: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The numpy loop with the module's sigmoid and tanh: the compiled loop's numbers."""

        def act(fn: Any) -> Any:
            def apply(x: np.ndarray) -> np.ndarray:
                x = np.ascontiguousarray(x, dtype=_F32)
                out = np.empty_like(x)
                fn(x, out)
                return out

            return apply

        tanh = act(module.tanh)
        return self.numpy(self.cell._replace(acts=[act(module.sigmoid), tanh, tanh]))


@st.composite
def _directions(draw: Any) -> dict[str, Any]:
    steps = draw(st.integers(1, 9))
    batch = draw(st.integers(1, 7))
    hidden = draw(st.one_of(st.integers(1, 40), st.sampled_from([48, 64, 100])))
    lens = None
    if draw(st.booleans()):
        lens = draw(st.lists(st.integers(0, steps), min_size=batch, max_size=batch))
    return {
        "dims": (steps, batch, hidden),
        "lens": lens,
        "zero_ended": draw(st.booleans()),  # the node has a Y output
        "dtype": draw(st.sampled_from([np.int8, np.uint8])),
        "zero_point": draw(st.booleans()),
        "per_column": draw(st.booleans()),
        "states": draw(st.booleans()),
        "bias": draw(st.booleans()),
        "forget": draw(st.sampled_from([0, 0, 1])),
        "scales": draw(st.sampled_from(["wide", "trained"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def _direction(case: dict[str, Any]) -> _Direction:
    kw = dict(case)
    rng = np.random.default_rng(kw.pop("seed"))
    return _Direction(rng, kw.pop("dims"), **kw)


def _assert_same(got: Any, want: Any) -> None:
    for name, a, b in zip(("y", "h", "c"), got, want, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)


# ---- the compiled loop is the numpy loop ---------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
@SETTINGS
@given(case=_directions())
def test_the_compiled_loop_is_the_numpy_loop_with_its_activations(
    level: int, case: dict[str, Any]
) -> None:
    module = _module()
    d = _direction(case)
    with at_level("recurrent", level):
        native.load("recurrent")
        got = d.compiled()
        assert got is not None
        _assert_same(got, d.twin(module))


@pytest.mark.parametrize("level", LEVELS)
@SETTINGS
@given(case=_directions())
def test_the_compiled_loop_is_within_a_few_h_steps_of_the_numpy_loop(
    level: int, case: dict[str, Any]
) -> None:
    _module()
    d = _direction(case)
    with at_level("recurrent", level):
        native.load("recurrent")
        got = d.compiled()
    assert got is not None
    want = d.numpy()
    # The first step: the same h codes (from the same initial state) and products, so only
    # the activations differ: a few ulps of values of magnitude about 1 (c a bit more).
    np.testing.assert_allclose(got[0][0], want[0][0], rtol=0, atol=8 * _ULP1)
    if d.x_part.shape[0] == 1:
        np.testing.assert_allclose(got[2], want[2], rtol=8 * _ULP1, atol=8 * _ULP1)
    if case["scales"] == "trained":  # a chaotic one makes any difference grow
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=_SEQUENCE_TOL)


class _Spy:
    """`_compiled_steps` wrapped: whether each call ran the compiled loop."""

    def __init__(self) -> None:
        self.ran: list[bool] = []
        self._real = cqd._compiled_steps

    def __call__(self, *args: Any) -> Any:
        out = self._real(*args)
        self.ran.append(out is not None)
        return out


@pytest.mark.parametrize("level", LEVELS)
def test_an_ended_sequence_offers_zero_or_its_last_h(level: int) -> None:
    """With a Y output an ended sequence offers 0 to the next steps' quantization, without
    one its last h (an empty one 0): either way the twin's numbers, and they differ (the
    range, hence every running sequence's codes, depends on it)."""
    module = _module()
    outs = []
    for zero_ended in (True, False):
        d = _Direction(np.random.default_rng(11), (6, 3, 16), lens=[6, 2, 0], zero_ended=zero_ended)
        with at_level("recurrent", level):
            native.load("recurrent")
            got = d.compiled()
            assert got is not None
            _assert_same(got, d.twin(module))
        outs.append(got)
    assert np.abs(outs[0][0][2:, 0] - outs[1][0][2:, 0]).max() > 1e-3
    np.testing.assert_array_equal(outs[1][1][2], 0)  # the empty sequence's h


@pytest.mark.parametrize("y_wanted", [True, False], ids=["with_y", "without_y"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_the_whole_kernel_gives_the_numpy_kernels_numbers(direction: str, y_wanted: bool) -> None:
    """Through dynamic_quantize_lstm (X quantized once, the reversal of padded sequences,
    Y_h and Y_c of an empty sequence, zero_ended from the node's Y output): the compiled
    loops at every level against the kernels off."""
    _module()
    rng = np.random.default_rng(5)
    steps, batch, inputs, hidden = 7, 5, 6, 21
    dirs = 2 if direction == "bidirectional" else 1
    w = rng.integers(0, 256, (dirs, inputs, 4 * hidden)).astype(np.uint8)
    r = rng.integers(0, 256, (dirs, hidden, 4 * hidden)).astype(np.uint8)
    r_scale = rng.uniform(0.3, 1, (dirs, 4 * hidden)) / 128 / np.sqrt(hidden)
    args = [
        rng.standard_normal((steps, batch, inputs)).astype(_F32), w, r,
        (rng.standard_normal((dirs, 8 * hidden)) * 0.3).astype(_F32),
        np.array([7, 0, 3, 5, 1], np.int32),
        (rng.standard_normal((dirs, batch, hidden)) * 0.5).astype(_F32),
        (rng.standard_normal((dirs, batch, hidden)) * 0.5).astype(_F32), None,
        np.full(dirs, 0.01, _F32), np.full(dirs, 128, np.uint8),
        r_scale.astype(_F32), np.full((dirs, 4 * hidden), 131, np.uint8),
    ]  # fmt: skip
    ctx = mock.Mock(wants_output=lambda k: y_wanted or k > 0)
    attrs = {"direction": direction, "hidden_size": hidden}
    with at_level("recurrent", None):
        want = cqd.dynamic_quantize_lstm(ctx, *args, **attrs)
    for level in LEVELS:
        spy = _Spy()
        with at_level("recurrent", level), mock.patch.object(cqd, "_compiled_steps", spy):
            got = cqd.dynamic_quantize_lstm(ctx, *args, **attrs)
        assert spy.ran == [True] * dirs
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=_SEQUENCE_TOL)
        for out in got:
            np.testing.assert_array_equal(out[..., 1, :], 0)  # the empty sequence
        np.testing.assert_array_equal(got[0][1:, :, 4], 0)  # ended after one step


# ---- what the C loop leaves to numpy ------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("where", ["h0", "h0_inf", "h0_huge", "bias"])
def test_a_nan_or_infinite_range_runs_the_numpy_loop(level: int, where: str) -> None:
    """A NaN in a state to quantize (the initial one, or one a NaN bias makes in step 1)
    or a range that overflows float32: the C loop gives up, the numpy loop's numbers
    come out (NaN where it puts them)."""
    module = _module()
    d = _Direction(np.random.default_rng(3), (4, 3, 10), lens=[4, 2, 0])
    if where == "h0":
        d.h0[1, 3] = np.nan
    elif where == "h0_inf":
        d.h0[0, 0] = np.inf
    elif where == "h0_huge":
        d.h0[0, 0], d.h0[2, 1] = 3e38, -3e38  # finite, but hi - lo overflows
    else:
        assert d.cell.bias is not None
        d.cell.bias[5] = np.nan
    with np.errstate(all="ignore"):  # numpy's steps meet them
        want = d.numpy()
    with at_level("recurrent", level), mock.patch.object(
        module, "qlstm", wraps=module.qlstm
    ) as called, np.errstate(all="ignore"):  # fmt: skip
        native.load("recurrent")
        assert d.compiled() is None
        got = cqd._steps(*d.args())
    assert called.call_count == 2
    _assert_same(got, want)
    if where in ("h0", "bias"):
        assert np.isnan(got[0]).any()


@pytest.mark.parametrize("level", LEVELS)
def test_a_nan_in_the_last_step_goes_where_numpy_sends_it(level: int) -> None:
    """No state is quantized after the last step: the C loop runs to its end, and its
    NaN are numpy's (its activations take NaN to NaN)."""
    module = _module()
    d = _Direction(np.random.default_rng(4), (3, 3, 12), lens=[3, 1, 3])
    d.x_part[2, 0, 4] = np.nan  # row 0's gate i of unit 4
    d.x_part[2, 2, 3 * 12 + 7] = np.nan  # row 2's candidate of unit 7
    d.x_part[2, 1] = np.nan  # row 1 ended: its gates are not used
    with at_level("recurrent", level):
        native.load("recurrent")
        got = d.compiled()
        assert got is not None
        with np.errstate(invalid="ignore"):
            want = d.twin(module)
    _assert_same(got, want)
    for out in (got[0][2], got[1], got[2]):  # y's last step, h, c
        assert np.isnan(out[0, 4]) and np.isnan(out[2, 7]) and np.isnan(out).sum() == 2


@pytest.mark.parametrize(
    "change",
    ["peepholes", "clip", "activations", "kernels_off"],
)
def test_other_cases_run_the_numpy_loop(change: str) -> None:
    module = _module()
    d = _Direction(np.random.default_rng(6), (3, 2, 8))
    cell = d.cell
    if change == "peepholes":
        p = np.full(8, 0.1, _F32)
        cell = cell._replace(peepholes=cqd._Peepholes(p, p, p))
    elif change == "clip":
        cell = cell._replace(clip=2.0)
    elif change == "activations":
        cell = cell._replace(acts=[_sigmoid, np.tanh, _sigmoid])
    level = None if change == "kernels_off" else native.cpu_level()
    with at_level("recurrent", level), mock.patch.object(module, "qlstm") as called:
        native.load("recurrent")
        got = cqd._steps(*d.args(cell))
    assert called.call_count == 0
    _assert_same(got, d.numpy(cell))
    # A clip of 0 (or below) is no clip: the compiled loop takes it.
    with at_level("recurrent", native.cpu_level()):
        assert cqd._compiled_steps(*d.args(d.cell._replace(clip=0.0))) is not None


def test_a_hidden_size_past_the_exact_sums_runs_the_numpy_loop() -> None:
    """Past 32768 hidden units an int32 sum of H products could overflow: not compiled
    (checked without building such a weight)."""
    cell = _Direction(np.random.default_rng(0), (1, 1, 4)).cell
    assert cqd._compiles(cell, cqd._COMPILED_MAX_HIDDEN)
    assert not cqd._compiles(cell, cqd._COMPILED_MAX_HIDDEN + 1)
    module = _module()
    with pytest.raises(ValueError, match="hidden in 1..32768"):
        module.qlstm(*_raw_args(module)[:13], 32769, True, False)


# ---- the module's contract ---------------------------------------------------------------


def _raw_args(module: Any, steps: int = 3, batch: int = 2, hidden: int = 5) -> list[Any]:
    """A well-formed qlstm call at the module's level (layout) with fresh buffers."""
    d = _Direction(np.random.default_rng(8), (steps, batch, hidden), dtype=np.uint8)
    w, sums, offset = cqd._packed_recurrent(d.r, module.qlstm_layout())
    assert d.cell.bias is not None
    state = (batch, hidden)
    return [
        d.x_part, w, sums, offset, np.ascontiguousarray(np.broadcast_to(d.r.scale, (4 * hidden,))),
        d.cell.bias, d.h0, d.c0, np.empty((steps, batch, hidden), _F32),
        np.empty(state, _F32), np.empty(state, _F32), steps, batch, hidden, True, False,
    ]  # fmt: skip


@pytest.mark.parametrize("level", LEVELS)
def test_wrong_calls_raise_value_error(level: int) -> None:
    module = _module()
    with at_level("recurrent", level):
        native.load("recurrent")
        good = _raw_args(module)
        assert module.qlstm(*good) == 0  # the well-formed call runs
        assert module.qlstm(*good, np.array([3, 1], np.int64)) == 0
        bad: list[list[Any]] = []
        for k, v in enumerate(good):
            if isinstance(v, np.ndarray):
                flat = v.reshape(-1)
                bad.append([*good[:k], flat[:-1].copy(), *good[k + 1 :]])  # one value short
                bad.append([*good[:k], np.concatenate([flat, flat[:1]]), *good[k + 1 :]])
                other = np.float64 if v.dtype != np.float64 else np.float32
                bad.append([*good[:k], v.astype(other), *good[k + 1 :]])
        layout = module.qlstm_layout()
        r = _Direction(np.random.default_rng(8), (3, 2, 5), dtype=np.uint8).r
        other = 0 if layout else 1
        bad.append([good[0], *cqd._packed_recurrent(r, other), *good[4:]])  # other level's
        sums = np.zeros(good[1].size // 32, np.int32)  # (blocks, 4, 16) of the quads
        bad.append([*good[:2], None if layout == 1 else sums, *good[3:]])
        bad.append([*good[:3], 300, *good[4:]])  # an offset no zero point gives
        for k in (8, 9, 10):  # the outputs: read-only, an input, each other
            ro = good[k].copy()
            ro.flags.writeable = False
            bad.append([*good[:k], ro, *good[k + 1 :]])
            bad.append([*good[:k], good[6] if k != 8 else good[0], *good[k + 1 :]])
        bad.append([*good[:10], good[9], *good[11:]])
        y_view = good[8].reshape(-1)[:10]
        bad.append([*good[:9], y_view, *good[10:]])  # h_out inside y
        strided = np.empty((2, 10), _F32)[:, ::2]
        bad.append([*good[:6], strided, *good[7:]])  # not contiguous
        for pos, value in [(11, 0), (12, 0), (13, 0), (11, 4), (12, 3), (13, 6)]:
            bad.append([*good[:pos], value, *good[pos + 1 :]])
        for lens in (np.zeros(3, np.int64), np.zeros(2, np.int32), np.zeros(2, np.float64)):
            bad.append([*good, lens])
        for args in bad:
            with pytest.raises(ValueError):
                module.qlstm(*args)


def test_the_packed_weight_is_made_once_per_constant_zero_point_and_layout() -> None:
    _weight_cache.clear()
    rng = np.random.default_rng(9)
    r_all = rng.integers(-128, 128, (2, 6, 24)).astype(np.int8)
    r_all.flags.writeable = False
    scale = np.asarray(0.01, _F32)
    first = cqd._packed_recurrent(cqd._QuantWeight(r_all[1], scale, 2), 0)
    # A new view of the same direction (each call makes one) finds it.
    assert cqd._packed_recurrent(cqd._QuantWeight(r_all[1], scale, 2), 0) is first
    others = [
        cqd._packed_recurrent(cqd._QuantWeight(r_all[0], scale, 2), 0),
        cqd._packed_recurrent(cqd._QuantWeight(r_all[1], scale, 3), 0),
        cqd._packed_recurrent(cqd._QuantWeight(r_all[1], scale, 2), 1),
    ]
    assert all(o is not first for o in others)
    assert not first[0].flags.writeable
    # The pairs layout: element [j, p, g, u, e] = R[2p + e, g*H + 16j + u] - zero point.
    w = first[0]
    assert w.shape == (1, 4, 4, 16, 2) and w.dtype == np.int16
    assert w[0, 1, 2, 3, 1] == int(r_all[1, 3, 2 * 6 + 3]) - 2
    assert not w[:, :, :, 6:].any() and not w[0, 3].any()  # past H columns, rows
    # The quads: R - o (int8 R: o = 0) and the column sums of R - zero point.
    q, sums, offset = others[2]
    assert q.shape == (1, 2, 4, 16, 4) and q.dtype == np.int8 and offset == -2
    assert q[0, 1, 3, 5, 1] == r_all[1, 5, 3 * 6 + 5]
    assert sums is not None
    assert sums[0, 3, 5] == int(r_all[1, :, 3 * 6 + 5].astype(int).sum()) - 6 * 2
    unsigned = rng.integers(0, 256, (6, 24)).astype(np.uint8)
    q8, sums8, offset8 = cqd._packed_recurrent(cqd._QuantWeight(unsigned, scale, 130), 1)
    assert offset8 == 128 - 130 and q8[0, 0, 0, 0, 0] == int(unsigned[0, 0]) - 128
