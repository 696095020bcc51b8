"""The differential check every fast path goes through: an unwatched run (fused node
lists, in-place reuse, direct BLAS) must give the numbers of the stepped run, which runs
every node on its own and keeps every value.

`assert_modes_agree` runs a model both ways (plus the plain path: no fusion, no in-place
reuse) and compares every graph output.  The tolerance is float32 rounding: a fusion
folds constants in float64 and sums products in another order, so the last bits may
move, but nothing more.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from onnxviz.runtime.events import NodeFinished
from onnxviz.runtime.session import Session

# Relative to each output's own scale: a few float32 ulps after a few hundred products.
RTOL = 2e-5


def stepped_values(model: onnx.ModelProto, feeds: dict[str, Any]) -> dict[str, Any]:
    """Every main-graph value of a run taken one node at a time (never fused), the
    initializers included."""
    sess = Session(model)
    values: dict[str, Any] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update(feeds)
    with np.errstate(all="ignore"):
        for event in sess.steps(feeds):
            if isinstance(event, NodeFinished) and event.depth == 0:
                values.update(event.outputs)
    assert sess.state == "finished", sess.error
    return values


def assert_stepped_bits(
    model: onnx.ModelProto, feeds: dict[str, Any], runs: int = 2
) -> tuple[Session, dict[str, Any]]:
    """Runs ``model`` unwatched ``runs`` times (the first makes the specialized and held
    calls, later ones take their kept state) and checks every graph output of every run
    against the stepped run's, bit for bit (NaNs where it has NaNs): for the fast paths
    that run the kernels' own operations.  The session and the last run's outputs."""
    want = stepped_values(model, feeds)
    session = Session(model)
    got: dict[str, Any] = {}
    for _ in range(runs):
        got = session.run(feeds)
        for out in model.graph.output:
            have, ref = got[out.name], want[out.name]
            assert isinstance(have, np.ndarray), out.name
            assert have.dtype == ref.dtype and have.shape == ref.shape, out.name
            np.testing.assert_array_equal(have, ref, err_msg=out.name)
    return session, got


def close(got: Any, want: Any, what: str, rtol: float = RTOL) -> None:
    """``got`` equals ``want`` up to float rounding (exactly, for non-float values)."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), what
        for i, (g, w) in enumerate(zip(got, want)):
            close(g, w, f"{what}[{i}]", rtol)
        return
    if not isinstance(want, np.ndarray):  # maps, optionals, scalars
        assert not isinstance(got, np.ndarray) and got == want, what
        return
    assert isinstance(got, np.ndarray), f"{what}: {type(got).__name__}"
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: {got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}"
    )
    if want.dtype.kind not in "fc":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite, err_msg=f"{what}: non-finite")
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=f"{what}: inf/nan")
    scale = float(np.max(np.abs(want[finite]), initial=0.0))
    np.testing.assert_allclose(
        got[finite], want[finite], rtol=rtol, atol=rtol * max(scale, 1e-6), err_msg=what
    )


def assert_modes_agree(
    model: onnx.ModelProto,
    feeds: dict[str, Any],
    rtol: float = RTOL,
    steps: dict[str, float] | None = None,
    stepped: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The fused/unwatched run (its first run and the next, which makes the compiled
    calls made on the first) and the plain unwatched run equal the stepped run on every
    graph output; returns the stepped run's values (every node output).  ``steps``: the
    quantization step of outputs a DequantizeLinear makes, by which the fused run may
    differ (its QDQ convs are exact integer products, fusion_qdq_conv.py: a value on a
    rounding boundary can land on the other side); most values must still agree.
    ``stepped``: the stepped values when the caller has them already (`stepped_values`
    of these feeds and this model, or of one with the same nodes and other outputs), so
    a big model is not stepped twice."""
    if stepped is None:
        stepped = stepped_values(model, feeds)
    names = [o.name for o in model.graph.output]
    kept = {k: np.array(v, copy=True) for k, v in feeds.items() if isinstance(v, np.ndarray)}
    with np.errstate(all="ignore"):
        session = Session(model)
        first = session.run(feeds)
        # A second run: the compiled calls fused nodes make on their first run (the held
        # products, norms, chains and convs: native/_runloop.c's quick calls) run from it.
        fused = session.run(feeds)
        plain = Session(model, fuse_ops=False, inplace_ops=False).run(feeds)
    for name in names:
        step = (steps or {}).get(name, 0.0)
        for label, got in (("fused first run", first), ("fused run", fused)):
            what = f"{label}, output {name!r}"
            if step:
                diff = np.abs(np.asarray(got[name]) - np.asarray(stepped[name]))
                assert diff.max() <= step * (1 + 1e-4), what
                assert np.mean(diff == 0) >= 0.5, what
            else:
                close(got[name], stepped[name], what, rtol)
        close(plain[name], stepped[name], f"plain run, output {name!r}", rtol)
    for k, v in kept.items():  # nobody writes into the caller's arrays
        np.testing.assert_array_equal(feeds[k], v, err_msg=f"feed {k!r} was overwritten")
    return stepped


def assert_integer_matmuls_exact(model: onnx.ModelProto, values: dict[str, Any]) -> int:
    """Every MatMulInteger of the main graph, in a stepped run's ``values``, equals
    (A - zero_a) @ (B - zero_b) in exact int64 arithmetic; returns how many were checked.
    (onnxruntime is no reference here: its AVX2 u8s8 kernels saturate.)"""
    checked = 0
    for node in model.graph.node:
        if node.op_type != "MatMulInteger" or node.domain not in ("", "ai.onnx"):
            continue
        ins = [values.get(n) if n else None for n in node.input] + [None] * 4
        a, b, a_zero, b_zero = ins[:4]
        ai = a.astype(np.int64) - (0 if a_zero is None else a_zero.astype(np.int64))
        bi = b.astype(np.int64) - (0 if b_zero is None else b_zero.astype(np.int64))
        np.testing.assert_array_equal(values[node.output[0]], ai @ bi, err_msg=node.name)
        checked += 1
    return checked
