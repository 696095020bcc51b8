"""QuantizeLinear -> DequantizeLinear pairs over a value already on their grid
(fusion_qdq_idle.IdlePair): after value-moving ops of a dequantized value with the same
parameters the pair gives its input back, which is the stepped value to the bit; any
other pair keeps computing."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxviz.runtime.fusion import run_nodes
from onnxviz.runtime.fusion_qdq_idle import IdlePair
from onnxviz.runtime.session import Session
from tests.runtime.differential import assert_modes_agree

_TYPES = {
    "int8": (np.int8, TensorProto.INT8),
    "uint8": (np.uint8, TensorProto.UINT8),
    "int16": (np.int16, TensorProto.INT16),
    "uint16": (np.uint16, TensorProto.UINT16),
}


def _idle_count(model: onnx.ModelProto) -> int:
    return sum(isinstance(pn.fused, IdlePair) for pn in run_nodes(Session(model).plan))


class _Graph:
    """x [2, 3, 4, 6] -> pair "p0" -> moves -> pair -> Relu (the output)."""

    def __init__(self, code: str, scale: float, zero: int) -> None:
        self.dtype, self.elem = _TYPES[code]
        self.inits = [
            numpy_helper.from_array(np.array(scale, np.float32), "s0"),
            numpy_helper.from_array(np.array(zero, self.dtype), "z0"),
        ]
        self.nodes = [
            helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["x_q"]),
            helper.make_node("DequantizeLinear", ["x_q", "s0", "z0"], ["p0"]),
        ]
        self.shape = [2, 3, 4, 6]

    def const(self, name: str, value: Any) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def move(self, kind: str, x: str, i: int) -> str:
        y = f"m{i}"
        size = int(np.prod(self.shape))
        if kind == "Reshape":
            self.shape = [self.shape[0], size // self.shape[0]] if len(self.shape) > 2 else [size]
            shape = self.const(f"shape{i}", np.array(self.shape, np.int64))
            self.nodes.append(helper.make_node("Reshape", [x, shape], [y]))
        elif kind == "Transpose":
            perm = list(reversed(range(len(self.shape))))
            self.nodes.append(helper.make_node("Transpose", [x], [y], perm=perm))
            self.shape = [self.shape[p] for p in perm]
        elif kind == "Unsqueeze":
            axes = self.const(f"axes{i}", np.array([0], np.int64))
            self.nodes.append(helper.make_node("Unsqueeze", [x, axes], [y]))
            self.shape = [1, *self.shape]
        elif kind == "Flatten":
            self.nodes.append(helper.make_node("Flatten", [x], [y], axis=1))
            self.shape = [self.shape[0], size // self.shape[0]]
        else:
            self.nodes.append(helper.make_node(kind, [x], [y]))
        return y

    def pair(self, x: str, s: str, z: str, name: str) -> str:
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [name + "_q"]))
        self.nodes.append(helper.make_node("DequantizeLinear", [name + "_q", s, z], [name]))
        return name

    def model(self, last: str) -> onnx.ModelProto:
        self.nodes.append(helper.make_node("Relu", [last], ["y"]))
        graph = helper.make_graph(
            self.nodes,
            "idle",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 6])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            self.inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@settings(max_examples=40, deadline=None)
@given(
    code=st.sampled_from(sorted(_TYPES)),
    moves=st.lists(
        st.sampled_from(["Reshape", "Transpose", "Unsqueeze", "Flatten", "Identity"]),
        min_size=0,
        max_size=3,
    ),
    scale=st.floats(2**-20, 32.0, width=32),
    spread=st.floats(0.01, 1e4),
    copy_params=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_pair_after_moves_with_the_values_parameters_gives_them_back(
    code: str,
    moves: list[str],
    scale: float,
    spread: float,
    copy_params: bool,
    seed: int,
) -> None:
    info = np.iinfo(_TYPES[code][0])
    rng = np.random.default_rng(seed)
    zero = int(rng.integers(info.min, info.max + 1))
    g = _Graph(code, scale, zero)
    x = "p0"
    for i, kind in enumerate(moves):
        x = g.move(kind, x, i)
    s, z = "s0", "z0"
    if copy_params:  # equal values in initializers of their own
        s = g.const("s1", np.array(scale, np.float32))
        z = g.const("z1", np.array(zero, g.dtype))
    model = g.model(g.pair(x, s, z, "p1"))
    assert _idle_count(model) == 1
    # Values far past both ends of the range too: the codes saturate at the first pair.
    feeds = {"x": (rng.standard_normal((2, 3, 4, 6)) * spread * scale).astype(np.float32)}
    assert_modes_agree(model, feeds, rtol=0.0)


@pytest.mark.parametrize(
    "change",
    ["scale", "zero point", "zero point type", "subnormal scale", "huge scale", "not a move"],
)
def test_a_pair_that_may_move_the_values_keeps_computing(change: str) -> None:
    g = _Graph("uint8", 0.05, 120)
    x = g.move("Transpose", "p0", 0)
    s, z = "s0", "z0"
    if change == "scale":
        s = g.const("s1", np.array(np.nextafter(np.float32(0.05), np.float32(1)), np.float32))
    elif change == "zero point":
        z = g.const("z1", np.array(121, np.uint8))
    elif change == "zero point type":
        z = g.const("z1", np.array(120, np.int16))
    elif change == "not a move":
        g.nodes.append(helper.make_node("Neg", [x], ["neg"]))
        x = "neg"
    elif change == "subnormal scale":
        g.inits[0] = numpy_helper.from_array(np.array(1e-40, np.float32), "s0")
    else:
        g.inits[0] = numpy_helper.from_array(np.array(3e34, np.float32), "s0")
    model = g.model(g.pair(x, s, z, "p1"))
    assert _idle_count(model) == 0
    rng = np.random.default_rng(0)
    feeds = {"x": (rng.standard_normal((2, 3, 4, 6)) * 5).astype(np.float32)}
    assert_modes_agree(model, feeds, rtol=0.0)


def test_a_pair_whose_codes_someone_reads_is_not_idle() -> None:
    g = _Graph("int8", 0.1, 3)
    x = g.move("Reshape", "p0", 0)
    g.pair(x, "s0", "z0", "p1")
    g.nodes.append(helper.make_node("Cast", ["p1_q"], ["codes"], to=TensorProto.FLOAT))
    model = g.model("p1")
    model.graph.output.append(helper.make_tensor_value_info("codes", TensorProto.FLOAT, None))
    assert _idle_count(model) == 0
    feeds = {"x": np.linspace(-20, 20, 144, dtype=np.float32).reshape(2, 3, 4, 6)}
    assert_modes_agree(model, feeds, rtol=0.0)


def test_overridden_parameters_run_the_pair_itself() -> None:
    """An IR 3 model lists its initializers as inputs: a run that feeds another scale for
    the pair gets the pair's steps, not the planned shortcut."""
    g = _Graph("uint8", 0.05, 128)
    x = g.move("Transpose", "p0", 0)
    s1 = g.const("s1", np.array(0.05, np.float32))
    model = g.model(g.pair(x, s1, "z0", "p1"))
    model.ir_version = 3
    model.opset_import[0].version = 10
    for node in model.graph.node:
        if node.op_type == "Transpose":
            node.attribute[0].ints[:] = [3, 2, 1, 0]
    model.graph.input.append(helper.make_tensor_value_info("s1", TensorProto.FLOAT, []))
    session = Session(model)
    assert sum(isinstance(pn.fused, IdlePair) for pn in run_nodes(session.plan)) == 1
    x_in = np.linspace(-6, 6, 144, dtype=np.float32).reshape(2, 3, 4, 6)
    planned = session.run({"x": x_in})["y"]
    overridden = session.run({"x": x_in, "s1": np.array(0.5, np.float32)})["y"]
    moved = (np.clip(np.rint(x_in / np.float32(0.05)) + 128, 0, 255) - 128) * np.float32(0.05)
    np.testing.assert_array_equal(planned, np.maximum(moved.T, 0))
    regrid = (np.clip(np.rint(moved.T / np.float32(0.5)) + 128, 0, 255) - 128) * np.float32(0.5)
    np.testing.assert_array_equal(overridden, np.maximum(regrid, 0))
