"""Cast, CastLike and BitCast: node-test cases, spec rules the node tests do not reach,
and comparisons with onnxruntime."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as TP

from onnxviz.errors import ExecutionError
from tests.runtime.nodecases import cases_for, check_case
from tests.runtime.test_kernels_math import run_one, run_ort

CAST_OPS = ["Cast", "CastLike", "BitCast"]

# Cases whose first node is one of our ops but whose graph also needs control flow
# (Range's function body uses Loop): the node-by-node harness cannot run Loop, so these
# go through the Session, which does.
NEEDS_SESSION = {
    "test_range_float16_type_positive_delta_expanded",
    "test_range_bfloat16_type_positive_delta_expanded",
}


@pytest.mark.parametrize("case", list(cases_for(CAST_OPS)), ids=lambda c: c.name)
def test_node_case(case: Any) -> None:
    if case.name in NEEDS_SESSION:
        from onnxviz.runtime.conformance import run_node_case

        result = run_node_case(case)
        status, detail = result.status, result.detail
    else:
        status, detail = check_case(case)
    assert status == "pass", f"{status}: {detail}"


def cast(x: np.ndarray, to: int, opset: int = 25, **attrs: Any) -> np.ndarray:
    return run_one("Cast", [x], opset, to=to, **attrs)


def _f(values: list[float], dtype: Any = np.float32) -> np.ndarray:
    return np.array(values, dtype=dtype)


# ---------------------------------------------------------------- strings
def test_strings_parse_special_values_in_any_case() -> None:
    s = np.array(["INF", "+INF", "-inf", "NaN", "nan", "1e-5", "1E8", " 2.5", "-0"], dtype=object)
    out = cast(s, TP.FLOAT)
    assert out.dtype == np.float32
    assert np.isposinf(out[:2]).all() and np.isneginf(out[2]) and np.isnan(out[3:5]).all()
    np.testing.assert_array_equal(out[5:], _f([1e-5, 1e8, 2.5, -0.0]))
    assert np.signbit(out[-1])


def test_strings_to_integers_keep_every_digit_and_truncate_decimals() -> None:
    s = np.array(["9007199254740993", "-7", "100.5"], dtype=object)
    np.testing.assert_array_equal(cast(s, TP.INT64), [9007199254740993, -7, 100])
    big = np.array(["18446744073709551615"], dtype=object)
    assert cast(big, TP.UINT64)[0] == np.uint64(2**64 - 1)
    with pytest.raises(ExecutionError):
        cast(np.array(["Hello World!"], dtype=object), TP.FLOAT)


def test_numbers_to_strings_round_trip() -> None:
    x = _f([0.1, -3.5, 1e20, 1e-7, np.nan, np.inf, -np.inf, 123456789.0])
    s = cast(x, TP.STRING)
    assert s.dtype == object
    assert s.tolist()[:2] == ["0.1", "-3.5"] and s.tolist()[4:7] == ["NaN", "INF", "-INF"]
    np.testing.assert_array_equal(cast(s, TP.FLOAT), x)
    assert cast(np.array([True, False]), TP.STRING).tolist() == ["1", "0"]
    assert cast(np.array([-3, 2**40], np.int64), TP.STRING).tolist() == ["-3", "1099511627776"]
    bf = cast(np.array([1.5], dtype=ml_dtypes.bfloat16), TP.STRING)
    assert bf.tolist() == ["1.5"]


# ---------------------------------------------------------------- fixed point and bool
def test_integer_narrowing_discards_high_bits() -> None:
    assert cast(np.array([200], np.int16), TP.INT8)[0] == -56  # the spec's example
    i = np.array([200, -200, 7, 8, -9, 2**40 + 3], dtype=np.int64)
    np.testing.assert_array_equal(cast(i, TP.INT4).astype(np.int8), [-8, 8 - 16, 7, -8, 7, 3])
    np.testing.assert_array_equal(cast(i, TP.UINT4).astype(np.int8), [8, 8, 7, 8, 7, 3])
    np.testing.assert_array_equal(cast(i, TP.INT2).astype(np.int8), [0, 0, -1, 0, -1, -1])
    np.testing.assert_array_equal(cast(i, TP.UINT2).astype(np.int8), [0, 0, 3, 0, 3, 3])


def test_floats_to_sub_byte_integers_truncate_in_range() -> None:
    # Out of range the spec leaves it undefined (the conformance cases follow ml_dtypes'
    # conversion there); in range every release truncates toward zero.
    x = _f([-8.0, -7.9, -1.5, -0.5, 0.5, 1.99, 7.9])
    np.testing.assert_array_equal(cast(x, TP.INT4).astype(np.int8), [-8, -7, -1, 0, 0, 1, 7])
    u = _f([0.0, 0.9, 3.5, 15.9])
    np.testing.assert_array_equal(cast(u, TP.UINT4).astype(np.int8), [0, 0, 3, 15])
    np.testing.assert_array_equal(cast(_f([-2.0, -1.5, 1.9]), TP.INT2).astype(np.int8), [-2, -1, 1])
    h = np.array([-7.5, 6.5], np.float16)
    np.testing.assert_array_equal(cast(h, TP.INT4).astype(np.int8), [-7, 6])


def test_bool_conversions() -> None:
    x = _f([0.0, -0.0, np.nan, 0.5, -2.0])
    np.testing.assert_array_equal(cast(x, TP.BOOL), [False, False, True, True, True])
    np.testing.assert_array_equal(cast(np.array([0, 36], np.int32), TP.BOOL), [False, True])
    b = np.array([True, False])
    np.testing.assert_array_equal(cast(b, TP.FLOAT16), [1.0, 0.0])
    np.testing.assert_array_equal(cast(b, TP.INT4).astype(np.int8), [1, 0])
    f8 = cast(b, TP.FLOAT8E4M3FN)
    assert f8.dtype == ml_dtypes.float8_e4m3fn and f8.astype(np.float32).tolist() == [1.0, 0.0]


def test_fixed_point_to_float_overflows_to_infinity() -> None:
    out = cast(np.array([70000, -70000], np.int32), TP.FLOAT16)
    assert np.isposinf(out[0]) and np.isneginf(out[1])


def test_same_type_cast_returns_the_input_unchanged() -> None:
    x = _f([1.0, 2.0])
    assert cast(x, TP.FLOAT) is x


# ---------------------------------------------------------------- float8 family
@pytest.mark.parametrize(
    ("to", "fmax", "unsat_overflow"),
    [
        (TP.FLOAT8E4M3FN, 448.0, "nan"),
        (TP.FLOAT8E4M3FNUZ, 240.0, "nan"),
        (TP.FLOAT8E5M2, 57344.0, "inf"),
        (TP.FLOAT8E5M2FNUZ, 57344.0, "nan"),
    ],
)
def test_float8_saturation_tables(to: int, fmax: float, unsat_overflow: str) -> None:
    x = _f([1e6, -1e6, np.inf, -np.inf, np.nan, 0.0, -0.0])
    sat = cast(x, to).astype(np.float32)
    np.testing.assert_array_equal(sat[:4], [fmax, -fmax, fmax, -fmax])
    assert np.isnan(sat[4]) and sat[5] == 0
    fnuz = to in (TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2FNUZ)
    assert np.signbit(sat[6]) != fnuz  # fnuz types have no negative zero
    raw = cast(x, to, saturate=0).astype(np.float32)
    if unsat_overflow == "inf":
        np.testing.assert_array_equal(raw[:4], [np.inf, -np.inf, np.inf, -np.inf])
    else:
        assert np.isnan(raw[:4]).all()


def test_double_to_narrow_floats_rounds_once() -> None:
    # Through float32 these would land on exact ties and round down to even.
    e4 = cast(np.array([1.0625 + 2.0**-40, -(1.0625 + 2.0**-40)]), TP.FLOAT8E4M3FN)
    np.testing.assert_array_equal(e4.astype(np.float32), [1.125, -1.125])
    bf = cast(np.array([1.00390625 + 2.0**-30]), TP.BFLOAT16)
    assert float(bf[0]) == 1.0078125
    big = cast(np.array([1e300]), TP.FLOAT8E5M2, saturate=0)
    assert np.isposinf(big.astype(np.float32)[0])


def test_float8_to_float_and_across_float8_types() -> None:
    x = np.array([0.5, -448.0, np.nan], dtype=ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(cast(x, TP.FLOAT)[:2], [0.5, -448.0])
    y = cast(x, TP.FLOAT8E5M2)
    assert y.dtype == ml_dtypes.float8_e5m2
    np.testing.assert_array_equal(y.astype(np.float32)[:2], [0.5, -448.0])
    assert np.isnan(y.astype(np.float32)[2])


@pytest.mark.parametrize(
    ("mode", "saturate", "expected"),
    [
        ("up", 1, [2.0, 2.0, 4.0, 2.0**-127, 2.0**127, 2.0**127, 2.0**-127]),
        ("down", 1, [1.0, 1.0, 2.0, 2.0**-127, 2.0**127, 2.0**127, 2.0**-127]),
        ("nearest", 1, [2.0, 1.0, 4.0, 2.0**-127, 2.0**127, 2.0**127, 2.0**-127]),
        ("nearest", 0, [2.0, 1.0, 4.0, np.nan, np.nan, np.nan, np.nan]),
    ],
)
def test_e8m0_round_modes_and_saturation(mode: str, saturate: int, expected: list[float]) -> None:
    x = _f([1.5, 1.4, 3.0, 0.0, np.inf, 2.0**127 * 1.9, 2.0**-140])
    out = cast(x, TP.FLOAT8E8M0, round_mode=mode, saturate=saturate)
    assert out.dtype == ml_dtypes.float8_e8m0fnu
    np.testing.assert_array_equal(out.astype(np.float64), expected)
    assert np.isnan(cast(_f([np.nan]), TP.FLOAT8E8M0).astype(np.float32)[0])
    with pytest.raises(ExecutionError):
        cast(x, TP.FLOAT8E8M0, round_mode="sideways")


def test_float4_saturates_and_float6_rounds() -> None:
    out = cast(_f([7.0, -100.0, np.inf, 0.75]), TP.FLOAT4E2M1).astype(np.float32)
    np.testing.assert_array_equal(out, [6.0, -6.0, 6.0, 1.0])  # 0.75: tie to even (1.0)
    f6 = cast(_f([1.3, 100.0]), 27)  # FLOAT6E2M3
    assert f6.dtype == ml_dtypes.float6_e2m3fn
    np.testing.assert_array_equal(f6.astype(np.float32), [1.25, 7.5])


def test_castlike_takes_target_type_and_opset1_string_to() -> None:
    x = _f([1.5, -2.5])
    like = run_one("CastLike", [x, np.array([], np.int8)], 15)
    assert like.dtype == np.int8 and like.tolist() == [1, -2]
    old = run_one("Cast", [x], 1, to="INT32")
    assert old.dtype == np.int32 and old.tolist() == [1, -2]
    with pytest.raises(ExecutionError):
        cast(x, 9999)


# ---------------------------------------------------------------- BitCast
def test_bitcast_reinterprets_bits() -> None:
    x = _f([1.0, -2.0])
    np.testing.assert_array_equal(run_one("BitCast", [x], 26, to=TP.INT32), x.view(np.int32))
    u4 = np.array([15, 8, 1], dtype=ml_dtypes.uint4)
    i4 = run_one("BitCast", [u4], 26, to=TP.INT4)
    assert i4.dtype == ml_dtypes.int4 and i4.astype(np.int8).tolist() == [-1, -8, 1]
    f4 = run_one("BitCast", [u4], 26, to=TP.FLOAT4E2M1)
    np.testing.assert_array_equal(f4.astype(np.float32), [-6.0, -0.0, 0.5])
    back = run_one("BitCast", [i4], 26, to=TP.UINT4)
    assert back.astype(np.uint8).tolist() == [15, 8, 1]
    b = run_one("BitCast", [np.array([0, 1, 2], np.uint8)], 26, to=TP.BOOL)
    np.testing.assert_array_equal(b, [False, True, True])


def test_bitcast_non_contiguous_and_scalar_inputs() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4).T  # a strided view
    out = run_one("BitCast", [x], 26, to=TP.UINT32)
    np.testing.assert_array_equal(out, np.ascontiguousarray(x).view(np.uint32))
    s = run_one("BitCast", [np.array(1.0, np.float64)], 26, to=TP.INT64)
    assert s.shape == () and int(s) == 0x3FF0000000000000


def test_bitcast_refuses_different_widths_and_strings() -> None:
    with pytest.raises(ExecutionError):
        run_one("BitCast", [_f([1.0])], 26, to=TP.INT64)
    with pytest.raises(ExecutionError):
        run_one("BitCast", [np.array(["a"], dtype=object)], 26, to=TP.INT64)


# ---------------------------------------------------------------- against onnxruntime
RNG = np.random.default_rng(7)
_VALUES = np.concatenate(
    [RNG.standard_normal(200) * 300, [0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, 464.0]]
).astype(np.float32)


@pytest.mark.parametrize(
    ("to", "saturate"), [(TP.FLOAT8E4M3FN, 1), (TP.FLOAT8E4M3FN, 0), (TP.FLOAT16, 1)]
)
def test_float_casts_match_onnxruntime(to: int, saturate: int) -> None:
    ours = cast(_VALUES, to, opset=19, saturate=saturate)
    theirs = run_ort("Cast", [_VALUES], 19, out_type=to, to=to, saturate=saturate)
    # onnxruntime hands float8 back as raw bytes: compare bit patterns, NaNs included.
    np.testing.assert_array_equal(
        ours.view(np.uint8 if ours.itemsize == 1 else np.uint16),
        theirs.view(np.uint8 if theirs.itemsize == 1 else np.uint16),
    )


def test_integer_and_string_casts_match_onnxruntime() -> None:
    ints = RNG.integers(-(2**40), 2**40, 100)
    for to in (TP.INT8, TP.UINT16, TP.INT32, TP.FLOAT, TP.BOOL):
        ours = cast(ints, to, opset=19)
        theirs = run_ort("Cast", [ints], 19, out_type=to, to=to)
        np.testing.assert_array_equal(ours, theirs)
    text = np.array(["1.5", "-INF", "nan", "1e3", "+inf"], dtype=object)
    ours = cast(text, TP.DOUBLE, opset=19)
    theirs = run_ort("Cast", [text], 19, out_type=TP.DOUBLE, to=TP.DOUBLE)
    np.testing.assert_array_equal(ours, theirs)
    # onnxruntime prints 8 significant digits; we print the shortest text that reads back
    # to the same float32, so compare as numbers: ours exactly, theirs to 8 digits.
    floats = _VALUES[:50]
    ours_text = cast(floats, TP.STRING, opset=19)
    theirs_text = run_ort("Cast", [floats], 19, out_type=TP.STRING, to=TP.STRING)
    np.testing.assert_array_equal(ours_text.astype(np.float32), floats)
    np.testing.assert_allclose(
        ours_text.astype(np.float64), theirs_text.astype(np.float64), rtol=1e-7
    )


# ---------------------------------------------------------------- every type pair
_ALL_TYPES = [
    TP.FLOAT,
    TP.UINT8,
    TP.INT8,
    TP.UINT16,
    TP.INT16,
    TP.INT32,
    TP.INT64,
    TP.STRING,
    TP.BOOL,
    TP.FLOAT16,
    TP.DOUBLE,
    TP.UINT32,
    TP.UINT64,
    TP.BFLOAT16,
    TP.FLOAT8E4M3FN,
    TP.FLOAT8E4M3FNUZ,
    TP.FLOAT8E5M2,
    TP.FLOAT8E5M2FNUZ,
    TP.UINT4,
    TP.INT4,
    TP.FLOAT4E2M1,
    TP.FLOAT8E8M0,
    25,
    26,
    27,
    28,  # UINT2, INT2, FLOAT6E2M3, FLOAT6E3M2
]
_CANDIDATES = [0.0, 1.0, 2.0, -1.0, 0.5, 3.0]


def _representable(value: float, to: int) -> bool:
    from onnxviz.runtime.kernels.cast import dtype_for

    dt = dtype_for(to)
    if dt == np.dtype(object):
        return value == int(value)  # integers print the same from every numeric type
    if dt == np.bool_:
        return value in (0.0, 1.0)
    if to == TP.FLOAT8E8M0:
        return value > 0 and float(np.log2(value)).is_integer()
    try:
        # A value out of the type's range is not representable, whatever the cast makes
        # of it (ml_dtypes 0.7 warns on -1.0 to uint4 and gives 0; 0.6 wrapped silently).
        with np.errstate(invalid="ignore"):
            return float(np.array(value).astype(dt).astype(np.float64)) == value
    except (ValueError, OverflowError):
        return False


@pytest.mark.parametrize("src", _ALL_TYPES)
def test_every_type_pair_keeps_values_both_types_hold(src: int) -> None:
    from onnxviz.runtime.kernels.cast import dtype_for

    for dst in _ALL_TYPES:
        values = [v for v in _CANDIDATES if _representable(v, src) and _representable(v, dst)]
        src_dt = dtype_for(src)
        if src_dt == np.dtype(object):
            x = np.array([str(int(v)) for v in values], dtype=object)
        else:
            x = np.array(values).astype(src_dt)
        out = cast(x, dst)
        assert out.dtype == dtype_for(dst), (src, dst)
        assert out.shape == x.shape
        got = [float(v) for v in out.tolist()] if out.dtype != object else [float(v) for v in out]
        assert got == values, (src, dst, got, values)
