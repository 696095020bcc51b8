"""The regions of `runtime.diff_local`: what B's nodes of one matched value are, and the
same outputs whether the regions run one by one (our interpreter, or one onnxruntime
session each) or together in one onnxruntime session (the numeric diff's fast path
with onnxruntime)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

from onnxviz.model.diff.index import index_graph
from onnxviz.runtime.diff_local import find_regions, run_region, run_regions_together
from tests.model import diff_corpus as C

from .test_differential import random_graphs

pytestmark = pytest.mark.numeric


def _qdq_and_regions(width: int, seed: int):  # type: ignore[no-untyped-def]
    a = C.mlp(layers=4, width=width, seed=seed)
    x = np.random.default_rng(seed).standard_normal((2, width)).astype(np.float32)
    q = C.quantize_qdq(a, x)
    b = index_graph("main", q.graph)
    compared = [f"relu{i}_dqa" for i in range(3)]
    targets = [*compared, "y"]
    regions = find_regions(b, targets, {*compared, "x"})
    return a, q, x, b, regions


def test_a_region_stops_at_the_compared_values_and_counts_its_quantizations() -> None:
    _, q, _, b, regions = _qdq_and_regions(8, 0)
    r1 = regions["relu1_dqa"]
    assert r1 is not None and r1.inputs == ["relu0_dqa"]
    ops = [b.nodes[i].op_type for i in r1.nodes]
    assert ops.count("MatMul") == 1 and ops.count("Relu") == 1  # one layer, no more
    assert ops.count("QuantizeLinear") == len(r1.scales) >= 1
    assert all(s in b.initializers for s in r1.scales)
    ry = regions["y"]
    assert ry is not None and ry.inputs == ["relu2_dqa"]


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regions_together_give_what_each_gives_alone(width: int, seed: int) -> None:
    pytest.importorskip("onnxruntime")
    a, q, x, _, regions = _qdq_and_regions(width, seed)
    rng = np.random.default_rng(seed + 7)
    # A's values stand in at the boundaries (any float values of the right shape do).
    feeds = {"x": x} | {
        f"relu{i}_dqa": np.abs(rng.standard_normal((2, width))).astype(np.float32) for i in range(3)
    }
    rs = [r for r in regions.values() if r is not None]
    together = run_regions_together(rs, q, None, feeds)
    for region, got in zip(rs, together):
        mine = {n: feeds[n] for n in region.inputs}
        alone_ort = run_region(region, q, None, mine, "onnxruntime")
        alone_ours = run_region(region, q, None, mine, "onnxviz")
        np.testing.assert_array_equal(got, alone_ort)
        inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
        step = max((float(np.abs(inits[s]).max()) for s in region.scales), default=0.0)
        # Our interpreter and onnxruntime may round a quantized value one step apart.
        assert np.abs(got.astype(np.float64) - alone_ours).max() <= 1.01 * step + 1e-5


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(random_graphs(), st.integers(0, 2**16))
def test_regions_fed_the_true_values_give_the_full_run_s_values(case, pick: int) -> None:  # type: ignore[no-untyped-def]
    """On random graphs (the runtime's differential harness: convs, residuals, fan-out,
    outputs mid-chain), with a random half of the values as boundaries: each region
    run on the full run's values of its boundaries gives the full run's value, alone
    (our interpreter) and together (one onnxruntime session)."""
    pytest.importorskip("onnxruntime")
    from onnxviz.runtime.session import Session

    model, feeds = case
    values = [o for n in model.graph.node for o in n.output]
    full = Session(model).run(feeds, fetch=values)
    rng = np.random.default_rng(pick)
    boundaries = {v for v in values if rng.random() < 0.5} | {"x"}
    index = index_graph("main", model.graph)
    regions = find_regions(index, values, boundaries)
    rs = [r for r in regions.values() if r is not None]
    assert len(rs) == len(values)  # every value computed from the graph input is cut out
    known = {**feeds, **full}
    together = run_regions_together(rs, model, None, {n: known[n] for r in rs for n in r.inputs})
    for region, got in zip(rs, together):
        alone = run_region(region, model, None, {n: known[n] for n in region.inputs}, "onnxviz")
        want = full[region.output]
        scale = 1e-4 * (1.0 + float(np.abs(want).max()))
        assert np.abs(alone - want).max() <= scale
        assert np.abs(got - want).max() <= scale
        assert not (set(region.inputs) - boundaries)  # regions stop at the boundaries
