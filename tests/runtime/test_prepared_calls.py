"""The unwatched run's prepared calls (prepared.py) and the small-array rule of in-place
reuse (inplace.MIN_ELEMENTS) give the stepped run's numbers (issue 21).

Random graphs (hypothesis) of Add, Sub, Mul and Div over float32, float64, int32 and
int64 values with broadcasting, 0-d values, fan-out, a value used twice by one node,
graph outputs in the middle of a chain and values big enough to be reused in place:
the unwatched run (shortcut arithmetic, in place) and the plain run must equal the
stepped run (every node through its kernel), exactly for integers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from onnxviz.runtime import quiet_loop
from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.session import Session

from .differential import assert_modes_agree, stepped_values

pytestmark = pytest.mark.numeric

DTYPES = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT,
    np.dtype(np.float64): onnx.TensorProto.DOUBLE,
    np.dtype(np.int32): onnx.TensorProto.INT32,
    np.dtype(np.int64): onnx.TensorProto.INT64,
}
# (base shape) -> operands broadcast against it; (128, 128) is past inplace.MIN_ELEMENTS.
BASES = [(), (3,), (2, 3), (4, 1, 3), (2, 4, 3), (128, 128)]


def _operand_shape(draw, base: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``base``: leading axes dropped, some axes set to 1."""
    drop = draw(st.integers(0, len(base)))
    return tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in base[drop:])


def _values(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    # Nonzero, so that any value may divide (integer Div by zero is undefined).
    if dt.kind == "i":
        v = rng.integers(1, 6, size=shape) * rng.choice([-1, 1], size=shape)
        return np.asarray(v, dtype=dt)
    v = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return np.asarray(v, dtype=dt)


@st.composite
def arithmetic_graphs(draw) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dt = draw(st.sampled_from(list(DTYPES)))
    base = draw(st.sampled_from(BASES))
    elem = DTYPES[dt]
    feeds: dict[str, np.ndarray] = {}
    inits: list[onnx.TensorProto] = []
    shapes: dict[str, tuple[int, ...]] = {}
    divisors: list[str] = []  # never zero: graph inputs and constants
    for k in range(draw(st.integers(1, 3))):
        name = f"in{k}"
        shape = base if k == 0 else _operand_shape(draw, base)
        feeds[name] = _values(rng, shape, dt)
        shapes[name] = shape
        divisors.append(name)
    for k in range(draw(st.integers(0, 2))):
        name = f"c{k}"
        shape = _operand_shape(draw, base)
        inits.append(numpy_helper.from_array(_values(rng, shape, dt), name))
        shapes[name] = shape
        divisors.append(name)
    nodes: list[onnx.NodeProto] = []
    outputs: list[str] = []
    frontier = list(shapes)
    for i in range(draw(st.integers(1, 10))):
        op = draw(st.sampled_from(["Add", "Sub", "Mul", "Div"]))
        a = draw(st.sampled_from(frontier))
        b = draw(st.sampled_from(divisors if op == "Div" else frontier))  # may be a itself
        if draw(st.booleans()) and op != "Div":
            a, b = b, a
        y = f"v{i}"
        nodes.append(helper.make_node(op, [a, b], [y], name=f"n{i}"))
        shapes[y] = tuple(np.broadcast_shapes(shapes[a], shapes[b]))
        frontier.append(y)
        if draw(st.integers(0, 4)) == 0:
            outputs.append(y)  # a graph output in the middle of the chain
    outputs = list(dict.fromkeys([*outputs, frontier[-1]]))
    graph = helper.make_graph(
        nodes,
        "arith",
        [helper.make_tensor_value_info(n, elem, list(v.shape)) for n, v in feeds.items()],
        [helper.make_tensor_value_info(o, elem, None) for o in outputs],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(arithmetic_graphs())
def test_random_arithmetic_gives_the_stepped_numbers_unwatched(case) -> None:
    model, feeds = case
    stepped = assert_modes_agree(model, feeds)
    # Same ufunc on the same operands: the shortcut is exact, not just close.  Three
    # runs of one session: from the second on, small results are written into the
    # arrays the compiled calls kept (native/_runloop.c's binary), and the first run's
    # outputs, still held here, must keep their numbers.
    session = Session(model)
    with np.errstate(all="ignore"):
        runs = [session.run(feeds) for _ in range(3)]
    for fast in runs:
        for name, value in fast.items():
            np.testing.assert_array_equal(value, stepped[name], err_msg=name)
            assert value.dtype == stepped[name].dtype and value.shape == stepped[name].shape


def test_the_unwatched_list_takes_the_shortcut_and_the_stepped_list_does_not() -> None:
    """The shortcut is really used (else the test above compares a path with itself)."""
    f = onnx.TensorProto.FLOAT
    nodes = [  # a kept between them: no fused elementwise chain
        helper.make_node("Add", ["x", "z"], ["a"], name="add"),
        helper.make_node("Div", ["a", "z"], ["y"], name="div"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", f, [3]), helper.make_tensor_value_info("z", f, [3])],
        [helper.make_tensor_value_info("y", f, None), helper.make_tensor_value_info("a", f, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    sess = Session(model)
    feeds = {"x": np.array([1.0, -2.0, 4.0], np.float32), "z": np.float32([1, 2, 4])}
    out = sess.run(feeds)["y"]
    stepped = [pn.call for pn in sess.plan.nodes]
    fast = [pn.call for pn in run_nodes(sess.plan)]
    if quiet_loop.loop() is not None:  # the compiled shortcut, the kernel behind it
        assert [type(f).__name__ for f in fast] == ["Binary", "Binary"]
        assert [f.fallback for f in fast] == stepped
    else:
        assert [f.__name__ for f in fast] == ["add", "div"]
    assert all(f is not g for f, g in zip(fast, stepped))
    np.testing.assert_array_equal(out, stepped_values(model, feeds)["y"])
    np.testing.assert_array_equal(out, np.float32([2.0, 0.0, 2.0]))


def test_integer_division_keeps_the_kernels_truncation() -> None:
    """Div on integers is not numpy's true division: the shortcut leaves it to the kernel."""
    i64 = onnx.TensorProto.INT64
    graph = helper.make_graph(
        [helper.make_node("Div", ["a", "b"], ["y"], name="div")],
        "g",
        [
            helper.make_tensor_value_info("a", i64, [4]),
            helper.make_tensor_value_info("b", i64, [4]),
        ],
        [helper.make_tensor_value_info("y", i64, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    a = np.array([7, -7, 9, -9], np.int64)
    b = np.array([2, 2, -4, -4], np.int64)
    y = Session(model).run({"a": a, "b": b})["y"]
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, np.trunc(a / b).astype(np.int64))


def _context_model() -> onnx.ModelProto:
    """Kernels that take a context (executor._call_kernel builds it from the plan):
    MaxPool's optional Indices, Split's output count, Dropout's draws from the run's
    generator, and a second Dropout that draws after the first."""
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p", "idx"], kernel_shape=[2, 2], name="pool"),
        helper.make_node("Split", ["p"], ["s0", "s1", "s2"], axis=1, name="split"),
        helper.make_node("Dropout", ["s0", "r", "t"], ["d0", "m0"], name="drop0"),
        helper.make_node("Dropout", ["s2", "r", "t"], ["d1", "m1"], name="drop1"),
    ]
    f = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "ctx",
        [helper.make_tensor_value_info("x", f, [1, 3, 6, 6])],
        [
            helper.make_tensor_value_info(n, t, None)
            for n, t in [
                ("idx", onnx.TensorProto.INT64),
                ("s1", f),
                ("d0", f),
                ("m0", onnx.TensorProto.BOOL),
                ("d1", f),
                ("m1", onnx.TensorProto.BOOL),
            ]
        ],
        initializer=[
            numpy_helper.from_array(np.array(0.5, np.float32), "r"),
            numpy_helper.from_array(np.array(True), "t"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_context_kernels_see_their_node_and_the_runs_generator() -> None:
    model = _context_model()
    x = np.random.default_rng(5).standard_normal((1, 3, 6, 6)).astype(np.float32)
    stepped = assert_modes_agree(model, {"x": x}, rtol=0)
    sess = Session(model, seed=7)
    first, again = sess.run({"x": x}), sess.run({"x": x})
    # Every run draws from a generator made from the seed: the same masks each run, and
    # the two Dropouts draw one after the other from it (so their masks differ).
    for name in ("d0", "m0", "d1", "m1"):
        np.testing.assert_array_equal(first[name], again[name])
    rng = np.random.default_rng(7)
    keep0 = rng.random((1, 1, 5, 5)) >= 0.5
    keep1 = rng.random((1, 1, 5, 5)) >= 0.5
    np.testing.assert_array_equal(first["m0"], keep0)
    np.testing.assert_array_equal(first["m1"], keep1)
    # MaxPool gave the indices only because the node asks for them; Split made 3 parts.
    assert first["idx"].shape == (1, 3, 5, 5) and first["idx"].dtype == np.int64
    pooled = np.concatenate([stepped["s0"], first["s1"], stepped["s2"]], axis=1)
    np.testing.assert_array_equal(x.reshape(-1)[first["idx"]], pooled)
    np.testing.assert_array_equal(first["s1"], stepped["s1"])
    assert first["s1"].shape == (1, 1, 5, 5)


@pytest.mark.skipif(quiet_loop.loop() is None, reason="the compiled shortcut is not built")
def test_the_compiled_shortcut_takes_what_the_python_one_takes() -> None:
    """native/_runloop.c's binary: numpy's operator on two ndarrays of one listed dtype,
    found by equality once (an unpickled array's dtype is an equal object of its own),
    and the kernel (its fallback) for anything else: mixed dtypes, integer Div, a list."""
    import pickle

    fell: list[tuple[Any, Any]] = []

    def kernel(a: Any, b: Any) -> str:
        fell.append((a, b))
        return "kernel"

    module = quiet_loop.loop()
    ints = (np.dtype(np.int32), np.dtype(np.int64))
    floats = (np.dtype(np.float32), np.dtype(np.float64))
    add = module.binary(0, ints + floats, kernel)
    div = module.binary(3, floats, kernel)
    x = np.float32([1.5, -2.0, 4.0])
    copy = pickle.loads(pickle.dumps(x))
    assert copy.dtype is not x.dtype and copy.dtype == x.dtype  # (numpy's: a new object)
    for _ in range(2):  # the second time from its known dtypes
        np.testing.assert_array_equal(add(copy, copy), x + x)
        np.testing.assert_array_equal(div(copy, copy), x / x)
    assert not fell
    y = add(np.array(2, np.float32), np.array(3, np.float32))  # 0-d: numpy gives a scalar
    assert y == 5 and not fell
    i = np.int64([7, -7])
    assert div(i, np.int64([2, 2])) == "kernel"  # Div of integers truncates: the kernel
    assert add(x, x.astype(np.float64)) == "kernel"
    assert add(x, [1.0, 2.0, 3.0]) == "kernel"
    assert add(x.astype(">f4"), x.astype(">f4")) == "kernel"  # not equal to a listed one
    assert len(fell) == 4
    np.testing.assert_array_equal(module.binary(1, ints, kernel)(i, i), [0, 0])
    np.testing.assert_array_equal(module.binary(2, ints, kernel)(i, i), [49, 49])
    np.testing.assert_array_equal(module.binary(4, ints, kernel)(i, i + 1), [True, True])
    with pytest.raises(ValueError):
        module.binary(9, ints, kernel)


_COMPARISONS = ["Less", "LessOrEqual", "Equal", "Greater", "GreaterOrEqual"]


@st.composite
def comparison_graphs(draw) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """An arithmetic graph (above) whose values are also compared, 1-5 comparisons,
    each a bool graph output: operands of any of the graph's values (equal ones too,
    a value with itself, broadcasts, 0-d), NaNs and signed zeros among float inputs,
    and sometimes float16 values (the kernel's compute dtype, not the shortcut's)."""
    model, feeds = draw(arithmetic_graphs())
    graph = model.graph
    shapes = {n: v.shape for n, v in feeds.items()}
    shapes.update({t.name: tuple(t.dims) for t in graph.initializer})
    names = list(shapes) + [n.output[0] for n in graph.node]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    for value in feeds.values():
        if value.dtype.kind == "f" and value.size and draw(st.booleans()):
            flat = value.reshape(-1)  # (feeds are fresh arrays: changed in place)
            picks = rng.integers(0, flat.size, size=min(3, flat.size))
            flat[picks] = rng.choice([np.nan, -0.0, 0.0, np.inf], size=picks.size)
    for k in range(draw(st.integers(1, 5))):
        op = draw(st.sampled_from(_COMPARISONS))
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        out = f"cmp{k}"
        graph.node.append(helper.make_node(op, [a, b], [out], name=f"cmp{k}"))
        graph.output.append(helper.make_tensor_value_info(out, onnx.TensorProto.BOOL, None))
    if draw(st.integers(0, 3)) == 0:  # a float16 comparison: the kernel's own path
        half = onnx.TensorProto.FLOAT16
        graph.node.append(helper.make_node("Cast", [names[0]], ["h"], to=half, name="to16"))
        graph.node.append(helper.make_node("Less", ["h", "h"], ["h_lt"], name="lt16"))
        graph.output.append(helper.make_tensor_value_info("h_lt", onnx.TensorProto.BOOL, None))
    return model, feeds


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(comparison_graphs())
def test_random_comparisons_give_the_stepped_bits_unwatched(case) -> None:
    model, feeds = case
    stepped = stepped_values(model, feeds)
    session = Session(model)
    with np.errstate(all="ignore"):
        runs = [session.run(feeds) for _ in range(3)]
        runs.append(Session(model, fuse_ops=False, inplace_ops=False).run(feeds))
    for fast in runs:
        for name, value in fast.items():
            want = stepped[name]
            assert type(value) is np.ndarray, name
            assert value.dtype == want.dtype and value.shape == want.shape, name
            np.testing.assert_array_equal(value, want, err_msg=name)


def test_comparisons_take_the_shortcut_unwatched_only() -> None:
    """Each comparison of the unwatched list is the compiled shortcut over its kernel
    (the Python one without the compiled loop); the stepped list calls the kernel."""
    f = onnx.TensorProto.FLOAT
    nodes = [helper.make_node(op, ["x", "z"], [op], name=op) for op in _COMPARISONS]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", f, [3]), helper.make_tensor_value_info("z", f, [])],
        [helper.make_tensor_value_info(op, onnx.TensorProto.BOOL, None) for op in _COMPARISONS],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = Session(model)
    feeds = {"x": np.float32([1.0, np.nan, 3.0]), "z": np.array(1.0, np.float32)}
    out = sess.run(feeds)
    stepped = [pn.call for pn in sess.plan.nodes]
    fast = [pn.call for pn in run_nodes(sess.plan)]
    if quiet_loop.loop() is not None:
        assert {type(f).__name__ for f in fast} == {"Binary"}
        assert [f.fallback for f in fast] == stepped
    else:
        assert [f.__name__ for f in fast] == [op.lower() for op in _COMPARISONS]
    assert out["Less"].tolist() == [False, False, False]
    assert out["Equal"].tolist() == [True, False, False]
    assert out["GreaterOrEqual"].tolist() == [True, False, True]


@pytest.mark.parametrize("trans_b", [0, 1])
def test_a_gemm_given_a_3d_input_fails_unwatched_as_it_does_stepped(trans_b: int) -> None:
    """Gemm's A must be a matrix.  Its unwatched call is a held product (a Linear layer's
    weight packed once), which MatMul's N-D inputs share: it must hand a 3-D A to the
    kernel, which names the error, as the stepped run does; a 2-D one it still takes."""
    from onnxviz.errors import ExecutionError

    rng = np.random.default_rng(2)
    b = rng.standard_normal((48, 32) if trans_b else (32, 48)).astype(np.float32)
    c = rng.standard_normal(48).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Gemm", ["r", "b", "c"], ["y"], transB=trans_b, name="linear"),
        ],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    matrix = {"x": rng.standard_normal((8, 32)).astype(np.float32)}
    assert_modes_agree(model, matrix)
    session = Session(model)
    for _ in range(2):  # the second run takes the held call the first made
        session.run(matrix)
        with pytest.raises(ExecutionError, match="linear.*2-D"):
            session.run({"x": rng.standard_normal((2, 8, 32)).astype(np.float32)})
    np.testing.assert_allclose(
        session.run(matrix)["y"],
        np.maximum(matrix["x"], 0) @ (b.T if trans_b else b) + c,
        rtol=1e-5,
        atol=1e-5,
    )
