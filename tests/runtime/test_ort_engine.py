"""onnxruntime as the second engine (runtime/ort_engine.py): weights from the model's own
folder from any working directory, intermediates in memory-bounded chunks, the profile
mapped onto our node addresses, and the first divergence found by bisection."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from onnx import TensorProto, helper, numpy_helper

from onnxviz.model import inplace
from onnxviz.model.document import Document
from onnxviz.runtime import divergence
from onnxviz.runtime import ort_engine as oe
from onnxviz.runtime.compare import errors_between
from tests.runtime.engine_models import make, vi
from tests.runtime.test_differential import random_graphs

pytest.importorskip("onnxruntime")

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTERS = os.path.join(HERE, "..", "data", "exporters")


def _weighted_model(n: int = 64) -> tuple[onnx.ModelProto, np.ndarray]:
    w = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Relu", ["h"], ["y"]),
        ],
        "g",
        [vi("x", TensorProto.FLOAT, [1, n])],
        [vi("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(w, "W")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, w


def test_external_data_resolves_against_the_models_folder_from_any_cwd(
    tmp_path, monkeypatch
) -> None:
    model, w = _weighted_model()
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(
        model,
        str(folder / "m.onnx"),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    doc = Document.open(str(folder / "m.onnx"))
    x = np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)
    result = oe.run(doc, {"x": x})
    np.testing.assert_allclose(result.outputs["y"], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
    assert result.providers[-1] == "CPUExecutionProvider"
    # intermediates take the same path
    for _, values in oe.iter_intermediates(doc, {"x": x}, ["h"]):
        np.testing.assert_allclose(values["h"], x @ w, rtol=1e-5, atol=1e-5)


def test_single_file_weights_left_in_place_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(inplace, "MIN_FILE_SIZE", 0)
    monkeypatch.setattr(inplace, "MIN_TENSOR_BYTES", 256)
    model, w = _weighted_model()
    path = tmp_path / "single.onnx"
    onnx.save(model, str(path))
    monkeypatch.chdir(tmp_path.parent)
    doc = Document.open(str(path))
    assert any(inplace.is_inplace(t) for t in doc.model.graph.initializer)
    x = np.ones((1, 64), np.float32)
    out = oe.run(doc, {"x": x}).outputs["y"]
    np.testing.assert_allclose(out, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
    # the Document still refers to its map (the copy that ran was changed, not it)
    assert any(inplace.is_inplace(t) for t in doc.model.graph.initializer)


def test_choose_providers_keeps_installed_ones_and_cpu_last() -> None:
    import onnxruntime as ort

    chosen = oe.choose_providers(["NoSuchExecutionProvider", "CPUExecutionProvider"])
    assert chosen == ["CPUExecutionProvider"]
    default = oe.choose_providers()
    assert default[-1] == "CPUExecutionProvider"
    assert set(default) <= set(ort.get_available_providers())
    assert "AzureExecutionProvider" not in default


def test_gpu_providers_come_first_when_installed(monkeypatch) -> None:
    import onnxruntime as ort

    installed = ["TensorrtExecutionProvider", "CPUExecutionProvider", "CUDAExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: installed)
    # TensorRT builds an engine per session (minutes on an LLM): only when asked for
    assert oe.choose_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert oe.choose_providers(["TensorrtExecutionProvider"]) == [
        "TensorrtExecutionProvider",
        "CPUExecutionProvider",
    ]


def _long_chain(n_nodes: int, width: int, *, declare: bool) -> onnx.ModelProto:
    """x -> Add/Mul alternating ``n_nodes`` times; every value ``width`` floats (value
    types declared or not)."""
    nodes = []
    prev = "x"
    for i in range(n_nodes):
        op = "Add" if i % 2 == 0 else "Mul"
        nodes.append(helper.make_node(op, [prev, "c"], [f"v{i}"]))  # unnamed on purpose
        prev = f"v{i}"
    c = numpy_helper.from_array(np.full((width,), 1.01, np.float32), "c")
    model = make(nodes, [vi("x", TensorProto.FLOAT, ["n"])], [vi(prev)], initializers=[c])
    if declare:
        model.graph.value_info.extend(vi(f"v{i}", TensorProto.FLOAT, ["n"]) for i in range(n_nodes))
    return model


def _chain_reference(x: np.ndarray, n_nodes: int) -> dict[str, np.ndarray]:
    out = {}
    v = x
    for i in range(n_nodes):
        v = (v + np.float32(1.01)) if i % 2 == 0 else (v * np.float32(1.01))
        out[f"v{i}"] = v
    return out


@pytest.mark.parametrize("declare", [True, False])
def test_intermediates_come_in_chunks_under_the_budget(declare: bool) -> None:
    width, n_nodes = 1000, 12
    model = _long_chain(n_nodes, width, declare=declare)
    x = np.random.default_rng(0).standard_normal(width).astype(np.float32)
    budget = 3 * width * 4 + 100  # three values per chunk
    chunks = []
    got: dict[str, np.ndarray] = {}
    for chunk, values in oe.iter_intermediates(model, {"x": x}, chunk_bytes=budget):
        assert set(values) == set(chunk.names)
        assert chunk.actual_bytes <= budget
        assert chunk.planned_bytes <= budget
        chunks.append(chunk)
        got.update(values)
    assert len(chunks) == n_nodes // 3
    expected = _chain_reference(x, n_nodes)
    assert list(got) == list(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6)


def test_a_chunk_is_dropped_when_the_next_is_asked_for_unless_kept() -> None:
    model = _long_chain(4, 100, declare=True)
    x = np.zeros(100, np.float32)
    chunks = oe.iter_intermediates(model, {"x": x}, chunk_bytes=800)
    _, first = next(chunks)
    kept = first["v0"]  # a reference the caller keeps survives
    _, second = next(chunks)
    assert first == {} and set(second) == {"v2", "v3"}
    np.testing.assert_allclose(kept, np.full(100, 1.01, np.float32))


def test_a_value_bigger_than_the_budget_runs_alone() -> None:
    model = _long_chain(4, 1000, declare=True)
    x = np.zeros(1000, np.float32)
    chunks = [c for c, _ in oe.iter_intermediates(model, {"x": x}, chunk_bytes=100)]
    assert [len(c.names) for c in chunks] == [1, 1, 1, 1]


def test_unknown_sizes_are_estimated_from_the_largest_value_seen() -> None:
    model = _long_chain(3, 10, declare=False)
    planner = oe.ChunkPlanner(model, {"x": np.zeros(500, np.float32)}, budget=10**6)
    assert planner.known("v0") is None
    assert planner.estimate("v0") == 2000
    planner.observe(np.zeros(5000, np.float64))
    assert planner.estimate("v1") == 40000
    declared = _long_chain(3, 10, declare=True)
    planner = oe.ChunkPlanner(declared, {"x": np.zeros(7, np.float32)}, budget=10**6)
    assert planner.known("v2") == 28  # symbolic "n" bound from the feed


@pytest.mark.parametrize("name", ["optimum_gpt2_with_past", "ort_transformers_bert_mha"])
def test_undeclared_sizes_are_measured_in_a_profiled_run(name: str) -> None:
    """Exports without value_info: one profiled run gives every value's size, so the
    chunks hold what was planned (and stay under the budget)."""
    path = os.path.join(EXPORTERS, f"{name}.onnx")
    doc = Document.open(path)
    feeds = dict(np.load(path[:-5] + ".npz"))
    sizes = oe.measure_sizes(oe.RunnableModel.of(doc), feeds)
    whole = oe.fetch_values(doc, feeds, oe.main_values(doc.model))
    assert set(sizes) == set(oe.main_values(doc.model))
    for value_name, size in sizes.items():
        assert size == whole[value_name].nbytes, value_name
    budget = 2 * max(sizes.values())
    for chunk, _ in oe.iter_intermediates(doc, feeds, chunk_bytes=budget):
        assert chunk.actual_bytes == chunk.planned_bytes <= budget


def test_asking_for_a_value_no_node_computes_is_an_error() -> None:
    from onnxviz.errors import ExecutionError

    model = _long_chain(2, 4, declare=True)
    with pytest.raises(ExecutionError, match="main-graph nodes"):
        list(oe.iter_intermediates(model, {"x": np.zeros(4, np.float32)}, ["x", "v0"]))


def test_profile_maps_every_node_to_our_address_including_unnamed_and_duplicates() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="same"),
        helper.make_node("Neg", ["a"], ["b"], name="same"),
        helper.make_node("Abs", ["b"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["y"], name="last"),
    ]
    model = make(nodes, [vi("x", TensorProto.FLOAT, [4, 4])], [vi("y", TensorProto.FLOAT, [4, 4])])
    doc = Document.from_model(model)
    result = oe.run(doc, {"x": np.ones((4, 4), np.float32)}, profile=True)
    assert result.profile is not None
    rows = result.profile.nodes
    main = doc.main_scope
    expected = {f"main::{main.node_label(i)}" for i in range(4)}
    assert set(rows) == expected
    assert rows["main::last"].op_type == "Sigmoid"
    assert all(r.calls == 1 and r.output_bytes == 64 for r in rows.values())
    assert "[4,4]" in rows["main::last"].output_text
    assert result.profile.total_seconds == pytest.approx(sum(r.seconds for r in rows.values()))
    heat = result.profile.heat()
    assert max(heat.values()) == 1.0
    # the Document's nodes keep their names
    assert [n.name for n in doc.model.graph.node] == ["same", "same", "", "last"]


def test_profile_from_events_ignores_fences_and_nodes_onnxruntime_made() -> None:
    model = _long_chain(2, 4, declare=True)
    runnable = oe.RunnableModel.of(model)
    first, second = (n.name for n in runnable.model.graph.node)
    events: list[dict[str, Any]] = [
        {"cat": "Session", "name": "model_run", "dur": 999},
        {"cat": "Node", "name": f"{first}_fence_before", "dur": 7},
        {"cat": "Node", "name": f"{first}_kernel_time", "dur": 10, "args": {"op_name": "Add"}},
        {"cat": "Node", "name": f"{first}_kernel_time", "dur": 30, "args": {"output_size": "16"}},
        {"cat": "Node", "name": "MemcpyToHost_kernel_time", "dur": 50},
        {"cat": "Node", "name": f"{second}_kernel_time", "dur": 5},
    ]
    prof = oe.profile_from_events(events, runnable)
    assert set(prof.nodes) == {"main::#0", "main::#1"}
    row = prof.nodes["main::#0"]
    assert (row.calls, row.seconds, row.output_bytes) == (2, pytest.approx(40e-6), 16)
    assert prof.nodes["main::#1"].op_type == "Mul"
    assert prof.total_seconds == pytest.approx(45e-6)


# -- first divergence ----------------------------------------------------------------------
def _fake_engines(
    model: onnx.ModelProto, x: np.ndarray, bad: int, delta: float
) -> tuple[Any, Any, list[int]]:
    """Two engines over `_long_chain`: ``theirs`` exact, ``ours`` off by ``delta`` from
    node ``bad`` on (the error propagates, as a real one does)."""
    n = len(model.graph.node)
    truth = _chain_reference(x, n)
    calls: list[int] = []

    def theirs(names: list[str]) -> dict[str, Any]:
        return {k: truth[k] for k in names}

    def ours(names: list[str]) -> dict[str, Any]:
        calls.append(len(names))
        return {k: truth[k] + (delta if int(k[1:]) >= bad else 0) for k in names}

    return ours, theirs, calls


@pytest.mark.parametrize("bad", [0, 1, 17, 38, 39])
def test_bisection_finds_the_first_node_beyond_the_tolerance(bad: int) -> None:
    n = 40
    model = _long_chain(n, 8, declare=True)
    x = np.zeros(8, np.float32)
    ours, theirs, calls = _fake_engines(model, x, bad, 0.5)
    found = divergence.first_divergence(model, {"x": x}, ours=ours, theirs=theirs)
    assert found.node_index == bad
    assert found.address == f"main::#{bad}"
    assert found.probes <= 2 + int(np.ceil(np.log2(n)))  # bisection, not a scan
    assert all(k == 1 for k in calls)  # one value per probe: bounded memory
    assert "first divergence at main::#" in found.text()


def test_bisection_within_tolerance_reports_none() -> None:
    model = _long_chain(10, 8, declare=True)
    x = np.zeros(8, np.float32)
    ours, theirs, _ = _fake_engines(model, x, 3, 1e-7)
    found = divergence.first_divergence(model, {"x": x}, ours=ours, theirs=theirs)
    assert found.node_index is None
    assert "no divergence" in found.text()


def test_divergence_on_a_side_branch_walks_back_to_the_node_whose_inputs_agree() -> None:
    # x -> a (bad) -> b ; x -> c -> d ; y = b + d.  Bisection over the order might land on
    # any beyond node; the report must be "a", whose input agrees.
    nodes = [
        helper.make_node("Neg", ["x"], ["c"], name="c"),
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Abs", ["c"], ["d"], name="d"),
        helper.make_node("Exp", ["a"], ["b"], name="b"),
        helper.make_node("Add", ["b", "d"], ["y"], name="y"),
    ]
    model = make(nodes, [vi("x", TensorProto.FLOAT, [3])], [vi("y", TensorProto.FLOAT, [3])])
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    truth = {"c": -x, "a": np.maximum(x, 0), "d": np.abs(-x)}
    truth["b"] = np.exp(truth["a"])
    truth["y"] = truth["b"] + truth["d"]
    broken = {"a", "b", "y"}

    def theirs(names: list[str]) -> dict[str, Any]:
        return {k: truth[k] for k in names}

    def ours(names: list[str]) -> dict[str, Any]:
        return {k: truth[k] + (1.0 if k in broken else 0.0) for k in names}

    found = divergence.first_divergence(model, {"x": x}, ours=ours, theirs=theirs)
    assert found.address == "main::a"


@pytest.mark.numeric
def test_real_engines_agree_on_a_float_model() -> None:
    model = _long_chain(9, 16, declare=False)
    x = np.random.default_rng(3).standard_normal(16).astype(np.float32)
    found = divergence.first_divergence(Document.from_model(model), {"x": x})
    assert found.node_index is None
    assert found.probes >= 1


@pytest.mark.numeric
def test_real_engines_find_a_changed_initializer() -> None:
    """Our Session runs the Document; onnxruntime a model whose constant differs at one
    node: the search names that node."""
    model = _long_chain(16, 4, declare=True)
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    changed.graph.initializer.append(numpy_helper.from_array(np.full(4, 3.0, np.float32), "k"))
    changed.graph.node[11].input[1] = "k"
    x = np.ones(4, np.float32)
    peer = Document.from_model(changed)

    def theirs(names: list[str]) -> dict[str, Any]:
        return oe.fetch_values(peer, {"x": x}, names)

    found = divergence.first_divergence(Document.from_model(model), {"x": x}, theirs=theirs)
    assert found.node_index == 11


@pytest.mark.numeric
def test_genai_llama_int4_matches_in_chunks_and_profile() -> None:
    """The builder's int4 Llama (MatMulNBits, GroupQueryAttention,
    SkipSimplifiedLayerNormalization): every intermediate from chunked onnxruntime runs
    equals the one from a single run with all of them as outputs, and every node is in
    the profile."""
    path = os.path.join(EXPORTERS, "ort_genai_llama_int4.onnx")
    doc = Document.open(path)
    feeds = dict(np.load(path[:-5] + ".npz"))
    every = oe.main_values(doc.model)
    whole = oe.fetch_values(doc, feeds, every)
    seen = 0
    for chunk, values in oe.iter_intermediates(doc, feeds, chunk_bytes=4096):
        assert chunk.actual_bytes == chunk.planned_bytes  # sizes measured, not guessed
        assert chunk.actual_bytes <= 4096 or len(chunk.names) == 1
        for name, value in values.items():
            d = errors_between(name, value, whole[name])
            assert d.max_abs == 0.0, name
            seen += 1
    assert seen == len(every)
    prof = oe.run(doc, feeds, profile=True).profile
    assert prof is not None
    # onnxruntime turns Constant nodes into initializers at load: they never run
    ran = [n for n in doc.model.graph.node if n.op_type != "Constant"]
    assert len(prof.nodes) == len(ran) > 20


def test_compare_with_onnxruntime_reads_external_data_from_another_cwd(
    tmp_path, monkeypatch
) -> None:
    """The run panel's Compare (compare_with_onnxruntime with the Document's folder)."""
    from onnxviz.runtime.compare import compare_with_onnxruntime

    model, _ = _weighted_model()
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(model, str(folder / "m.onnx"), save_as_external_data=True, size_threshold=0)
    monkeypatch.chdir(tmp_path)
    doc = Document.open(str(folder / "m.onnx"))
    x = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    result = compare_with_onnxruntime(doc.model, {"x": x}, base_dir=doc.base_dir)
    assert [n.op_type for n in result.nodes] == ["MatMul", "Relu"]
    assert result.first_beyond() is None


@pytest.mark.numeric
@pytest.mark.parametrize("name", ["llama_int4", "phi3_int4_past", "qwen2_int4_past"])
def test_genai_int4_models_agree_with_onnxruntime_at_level4_and_at_level0(name: str) -> None:
    """The builder writes accuracy_level 4, and both engines round the activations to int8
    steps there: the models agree.  Where they part it is at a MatMulNBits, and the
    report says why (onnxruntime computing level 4 in float on a CPU without int8
    kernels, or an input on a rounding boundary)."""
    path = os.path.join(EXPORTERS, f"ort_genai_{name}.onnx")
    doc = Document.open(path)
    feeds = dict(np.load(path[:-5] + ".npz"))
    found = divergence.first_divergence(doc, feeds)
    if found.node_index is not None:
        assert found.op_type == "MatMulNBits", found.text()
        assert "accuracy_level 4" in found.note and "int8" in found.text()
    # at the level the op defines (0), the whole model agrees
    exact = onnx.ModelProto()
    exact.CopyFrom(doc.model)
    for node in exact.graph.node:
        for a in node.attribute:
            if a.name == "accuracy_level":
                a.i = 0
    again = divergence.first_divergence(Document.from_model(exact), feeds, rtol=1e-3, atol=1e-4)
    assert again.node_index is None, again.text()


@pytest.mark.numeric
@pytest.mark.parametrize("name", ["optimum_gpt2_with_past", "ort_genai_qwen2_fp32_past"])
def test_kv_cache_decoding_two_steps_matches_onnxruntime(name: str) -> None:
    """Prompt, then one more token fed with the cache the prompt produced (ours to ours,
    onnxruntime's to onnxruntime): logits and caches agree at both steps."""
    from onnxviz.runtime.session import Session

    path = os.path.join(EXPORTERS, f"{name}.onnx")
    doc = Document.open(path)
    feeds = dict(np.load(path[:-5] + ".npz"))
    session = Session(doc)
    pasts = sorted(k for k in feeds if k.startswith("past_key_values"))
    ours_feeds, theirs_feeds = dict(feeds), dict(feeds)
    for step in range(2):
        ours = session.run(ours_feeds)
        theirs = oe.run(doc, theirs_feeds).outputs
        for out, value in ours.items():
            scale = float(np.abs(theirs[out]).max()) or 1.0
            np.testing.assert_allclose(
                value, theirs[out], rtol=0, atol=2e-5 * scale, err_msg=f"{out} step {step}"
            )
        # the next token: one id, the cache grown by the prompt
        past_len = ours[pasts[0].replace("past_key_values", "present")].shape[2]
        nxt = {"input_ids": np.array([[7]], np.int64)}
        if "attention_mask" in feeds:
            nxt["attention_mask"] = np.ones((1, past_len + 1), np.int64)
        if "position_ids" in feeds:
            nxt["position_ids"] = np.array([[past_len]], np.int64)
        for source, target in ((ours, ours_feeds), (theirs, theirs_feeds)):
            target.update(nxt)
            for p in pasts:
                target[p] = source[p.replace("past_key_values", "present")]


# -- resuming chunks from held values (Frontier) against recomputing from the inputs -------
def _all_chunks(
    model: Any, feeds: dict[str, Any], budget: int, resume: bool
) -> tuple[dict[str, Any], int]:
    got: dict[str, Any] = {}
    resumed = 0
    for chunk, values in oe.iter_intermediates(model, feeds, chunk_bytes=budget, resume=resume):
        got.update(values)
        resumed += chunk.resumed
    return got, resumed


def _assert_resume_is_exact(model: Any, feeds: dict[str, Any], budget: int) -> int:
    fast, resumed = _all_chunks(model, feeds, budget, True)
    plain, none = _all_chunks(model, feeds, budget, False)
    assert none == 0
    assert list(fast) == list(plain)
    for name, value in plain.items():
        d = errors_between(name, fast[name], value)
        assert d.max_abs == 0.0 or (d.max_abs is None and d.shape_mismatch is None), name
    return resumed


def test_resumed_chunks_equal_recomputed_ones_on_a_chain() -> None:
    model = _long_chain(12, 1000, declare=True)
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    assert _assert_resume_is_exact(model, {"x": x}, 3 * 4000 + 100) == 3  # chunks 2..4


@pytest.mark.parametrize(
    ("name", "budget"),
    [
        ("ort_genai_llama_int4", 2048),  # multi-output nodes (SkipSimplifiedLayerNormalization)
        ("ort_genai_qwen2_int4_past", 2048),  # GatherBlockQuantized, a KV cache
        ("ort_transformers_bert_mha", 2048),
        ("torch_dynamo_control_flow", 40),  # subgraphs that read outer values
        ("optimum_gpt2_with_past", 8192),
    ],
)
def test_resumed_chunks_equal_recomputed_ones_on_exports(name: str, budget: int) -> None:
    path = os.path.join(EXPORTERS, f"{name}.onnx")
    doc = Document.open(path)
    feeds = dict(np.load(path[:-5] + ".npz"))
    assert _assert_resume_is_exact(doc, feeds, budget) > 0


def test_held_values_over_the_frontier_budget_are_not_kept() -> None:
    model = _long_chain(6, 1000, declare=True)
    frontier = oe.Frontier(model, budget=3999)
    frontier.update({"v0": np.zeros(1000, np.float32)}, ["v1"])
    assert frontier.held == {}  # 4000 bytes > 3999: the next chunk recomputes
    frontier = oe.Frontier(model, budget=4000)
    frontier.update({"v0": np.zeros(1000, np.float32)}, ["v1"])
    assert set(frontier.held) == {"v0"}
    cut, extra = frontier.model_for(oe.RunnableModel.of(model).with_outputs(["v1"], only=True))
    assert [n.output[0] for n in cut.graph.node] == ["v1"] and set(extra) == {"v0"}
    frontier.update({"v1": np.zeros(1000, np.float32)}, ["v3"])
    assert set(frontier.held) == {"v1"}  # v0 has no reader left, node 2 reads v1
    frontier.update({"v5": np.zeros(1000, np.float32)}, [])
    assert frontier.held == {}  # nothing left to run


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(random_graphs())
def test_random_graphs_resumed_chunks_equal_recomputed_ones(case: Any) -> None:
    """Fan-out and residual values that later chunks read (the differential harness's
    random conv/matmul graphs)."""
    model, feeds = case
    budget = max(v.nbytes for v in feeds.values()) * 2
    _assert_resume_is_exact(model, feeds, budget)
