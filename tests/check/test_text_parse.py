"""The ONNX text format is parsed in the checker's worker process
(check.inference.parse_text_model), never in the app's: onnx.parser is C++ code."""

from __future__ import annotations

import onnx
import pytest

from onnxviz.check.inference import TextParseError, parse_text_model

TEXT = b"""
<ir_version: 8, opset_import: ["" : 17]>
agraph (float[N, 4] x) => (float[N, 4] y) {
    r = Relu(x)
    y = Neg(r)
}
"""


def test_the_worker_parses_what_onnx_parser_parses() -> None:
    model = parse_text_model(TEXT)
    peer = onnx.parser.parse_model(TEXT.decode())  # the peer, in the test process only
    assert model.SerializeToString() == peer.SerializeToString()
    assert [n.op_type for n in model.graph.node] == ["Relu", "Neg"]


def test_a_refusal_is_the_parsers_first_line() -> None:
    with pytest.raises(TextParseError) as err:
        parse_text_model(b"agraph (float x) => (float y) { y = Relu(x) ")
    assert "\n" not in str(err.value) and str(err.value)


def test_text_that_is_not_utf8_is_refused_not_crashed() -> None:
    with pytest.raises(TextParseError):
        parse_text_model(b"\xff\xfe agraph")
    assert parse_text_model(TEXT).graph.name == "agraph"  # the worker is still serving
