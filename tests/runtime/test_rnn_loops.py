"""The recurrent layers' fast time loops (default activations, no clip) give the general
loop's numbers bit for bit, on every shape, direction, layout, dtype and sequence padding,
with the step products plain or cut into blocks of K (kernels.nn_rnn).

These are the numpy loops: the compiled one (native/_recurrent.c, its own tanh, so not
numpy's bits) is off here and proven in test_native_recurrent.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxviz.runtime.kernels import _weight_cache, blas, nn_rnn

pytestmark = pytest.mark.numeric


@pytest.fixture(autouse=True, scope="module")
def _numpy_loops() -> Iterator[None]:
    with mock.patch.object(nn_rnn, "_RECURRENT", None):
        yield


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A clip no finite value reaches: it sends a layer down the general loop without changing
# a single number, so the general loop is the fast loop's reference.
NO_OP_CLIP = 1e30
GATES = {"LSTM": 4, "GRU": 3, "GRU_lbr": 3}
FAST = {"LSTM": "_lstm_steps", "GRU": "_gru_steps", "GRU_lbr": "_gru_steps"}


def _inputs(
    rng: np.random.Generator, op: str, steps: int, batch: int, n_in: int, hidden: int,
    dirs: int, layout: int, dtype: Any, bias: bool, states: bool,
    lens: np.ndarray | None = None,
) -> list[Any]:  # fmt: skip
    gates = GATES[op]

    def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(dtype)

    x = rand(batch, steps, n_in) if layout else rand(steps, batch, n_in)
    w = rand(dirs, gates * hidden, n_in, scale=0.5)
    r = rand(dirs, gates * hidden, hidden, scale=0.5)
    b = rand(dirs, 2 * gates * hidden, scale=0.5) if bias else None

    def state() -> np.ndarray:
        return rand(batch, dirs, hidden) if layout else rand(dirs, batch, hidden)

    h0 = state() if states else None
    if op == "LSTM":
        return [x, w, r, b, lens, h0, state() if states else None]
    return [x, w, r, b, lens, h0]


def _run(op: str, ins: list[Any], clip: float | None, **attrs: Any) -> list[np.ndarray]:
    if op == "LSTM":
        return list(nn_rnn.lstm(*ins, clip=clip, **attrs))
    return list(nn_rnn.gru(*ins, clip=clip, linear_before_reset=int(op == "GRU_lbr"), **attrs))


@SETTINGS
@given(
    op=st.sampled_from(sorted(GATES)),
    steps=st.integers(1, 6),
    batch=st.integers(1, 6),
    n_in=st.integers(1, 9),
    hidden=st.integers(1, 40),
    direction=st.sampled_from(["forward", "reverse", "bidirectional"]),
    layout=st.integers(0, 1),
    dtype=st.sampled_from([np.float32, np.float64, np.float16]),
    bias=st.booleans(),
    states=st.booleans(),
    split=st.booleans(),
    frozen=st.booleans(),
    padded=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fast_recurrent_loops_give_the_general_loops_numbers(
    op: str, steps: int, batch: int, n_in: int, hidden: int, direction: str, layout: int,
    dtype: Any, bias: bool, states: bool, split: bool, frozen: bool, padded: bool, seed: int,
) -> None:  # fmt: skip
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(seed)
    # Padding: each sample's length anywhere from 0 to all the steps.
    lens = rng.integers(0, steps + 1, batch).astype(np.int32) if padded else None
    ins = _inputs(rng, op, steps, batch, n_in, hidden, dirs, layout, dtype, bias, states, lens)
    if frozen:  # constant weights: the scaled, transposed R comes from the weight cache
        for v in ins[1:4]:
            if v is not None:
                v.flags.writeable = False
    attrs = {"hidden_size": hidden, "direction": direction, "layout": layout}
    fast_loop = getattr(nn_rnn, FAST[op])
    try:
        blas.set_split_few_rows(split)
        with mock.patch.object(nn_rnn, FAST[op], wraps=fast_loop) as spy:
            general = _run(op, ins, NO_OP_CLIP, **attrs)
            assert spy.call_count == 0
            fast = _run(op, ins, None, **attrs)
            assert spy.call_count == dirs
            again = _run(op, ins, None, **attrs)  # a cached R must not have been written into
    finally:
        blas.set_split_few_rows(None)
        _weight_cache.clear()
    for f, g, a in zip(fast, general, again, strict=True):
        assert f.dtype == g.dtype == np.dtype(dtype) and f.shape == g.shape
        np.testing.assert_array_equal(f, g)
        np.testing.assert_array_equal(a, g)


@pytest.mark.parametrize("op", sorted(GATES))
def test_reverse_direction_is_the_forward_one_on_the_reversed_sequence(op: str) -> None:
    # Without padding the reverse direction reads X backwards through a view and writes
    # Y backwards in place: it must be the forward layer run on the reversed sequence.
    rng = np.random.default_rng(5)
    x, w, r, b, *rest = _inputs(rng, op, 7, 3, 4, 9, 1, 0, np.float32, True, True)
    fwd = _run(op, [x[::-1].copy(), w, r, b, *rest], None, hidden_size=9)
    rev = _run(op, [x, w, r, b, *rest], None, hidden_size=9, direction="reverse")
    np.testing.assert_allclose(rev[0], fwd[0][::-1], rtol=1e-6, atol=1e-6)
    for f, g in zip(fwd[1:], rev[1:], strict=True):
        np.testing.assert_allclose(g, f, rtol=1e-6, atol=1e-6)
    # Both directions at once: each half is its one-way layer.
    both = _run(op, [x, np.concatenate([w, w]), np.concatenate([r, r]), np.concatenate([b, b])]
                + [None] + [np.concatenate([s, s]) for s in rest[1:]], None, hidden_size=9,
                direction="bidirectional")  # fmt: skip
    fwd2 = _run(op, [x, w, r, b, *rest], None, hidden_size=9)
    np.testing.assert_array_equal(both[0][:, 0], fwd2[0][:, 0])
    np.testing.assert_array_equal(both[0][:, 1], rev[0][:, 0])


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("op", sorted(GATES))
def test_padded_recurrent_weight_rows_give_the_contiguous_weights_numbers(
    op: str, split: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hidden 256: rows of R^T 4 KB apart (LSTM) unless padded.  The padding only moves
    # the rows in memory: the step GEMMs must give the same numbers to the bit.
    rng = np.random.default_rng(11)
    ins = _inputs(rng, op, 3, 4, 16, 256, 1, 0, np.float32, True, True)
    try:
        blas.set_split_few_rows(split)
        padded = _run(op, ins, None, hidden_size=256)
        monkeypatch.setattr(nn_rnn, "_ROW_PAD_BYTES", 0)
        contiguous = _run(op, ins, None, hidden_size=256)
    finally:
        blas.set_split_few_rows(None)
    for p, c in zip(padded, contiguous, strict=True):
        np.testing.assert_array_equal(p, c)


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("steps, batch", [(0, 2), (3, 0)])
def test_empty_sequences_and_batches(op: str, steps: int, batch: int) -> None:
    # No step (an empty sequence) or no sample: Y is empty, the final states are the
    # initial ones.
    rng = np.random.default_rng(2)
    for direction in ("forward", "reverse", "bidirectional"):
        dirs = 2 if direction == "bidirectional" else 1
        ins = _inputs(rng, op, steps, batch, 3, 5, dirs, 0, np.float32, True, True)
        y, *finals = _run(op, ins, None, hidden_size=5, direction=direction)
        assert y.shape == (steps, dirs, batch, 5)
        for final, initial in zip(finals, ins[5:], strict=True):
            np.testing.assert_array_equal(final, initial)


@pytest.mark.parametrize("op", sorted(GATES))
def test_one_row_batches_give_the_rows_of_a_larger_batch(op: str) -> None:
    # A batch of one takes its own paths (a GRU with linear_before_reset: one product of
    # all three gates per step; products of one row): each sample alone must give its
    # row of the batched run.
    rng = np.random.default_rng(9)
    x, w, r, b, _, *states = _inputs(rng, op, 6, 3, 7, 33, 1, 0, np.float32, True, True)
    batched = _run(op, [x, w, r, b, None, *states], None, hidden_size=33)
    for row in range(3):
        alone = _run(
            op,
            [x[:, row : row + 1], w, r, b, None, *[s[:, row : row + 1] for s in states]],
            None,
            hidden_size=33,
        )
        for a, full in zip(alone, batched, strict=True):
            np.testing.assert_allclose(a[..., 0, :], full[..., row, :], rtol=1e-5, atol=1e-6)
