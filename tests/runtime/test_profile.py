"""Per-node profile from session events."""

from __future__ import annotations

import numpy as np

from onnxviz.runtime.profile import Profiler
from onnxviz.runtime.session import Session
from tests.runtime.engine_models import chain_model, loop_model


def test_profile_counts_every_node_once_with_sizes() -> None:
    prof = Profiler()
    for ev in Session(chain_model()).steps({"x": np.zeros(3, np.float32)}):
        prof.feed(ev)
    assert set(prof.nodes) == {"main::add", "main::relu", "main::mul"}
    row = prof.nodes["main::mul"]
    assert row.calls == 1 and row.output_bytes == 12 and row.output_text == "float32[3]"
    assert prof.total_seconds == sum(r.seconds for r in prof.rows())
    secs = [r.seconds for r in prof.rows("seconds")]
    assert secs == sorted(secs, reverse=True)
    heat = prof.heat()
    assert max(heat.values()) == 1.0 and all(0 <= v <= 1 for v in heat.values())


def test_profile_counts_loop_iterations() -> None:
    prof = Profiler()
    for ev in Session(loop_model()).steps({"x": np.ones(2, np.float32)}):
        prof.feed(ev)
    body = [r for r in prof.rows() if r.graph_path != "main"]
    assert {r.address.split("::")[1] for r in body} >= {"body_add", "body_less", "body_id"}
    assert all(r.calls == 3 for r in body), [(r.address, r.calls) for r in body]
    assert prof.nodes["main::loop"].calls == 1
