"""Bits per element of each ONNX element type on the wire (raw_data), importing nothing.

check's worker process sizes small external tensors with it without importing numpy
(`check.prepare`); `model.dtypes` holds the same numbers with the numpy types, and a test
keeps the two equal.  0: STRING (sized by its string_data, not by bits).
"""

from __future__ import annotations

ELEMENT_BITS: dict[int, int] = {
    1: 32,  # FLOAT
    2: 8,  # UINT8
    3: 8,  # INT8
    4: 16,  # UINT16
    5: 16,  # INT16
    6: 32,  # INT32
    7: 64,  # INT64
    8: 0,  # STRING
    9: 8,  # BOOL
    10: 16,  # FLOAT16
    11: 64,  # DOUBLE
    12: 32,  # UINT32
    13: 64,  # UINT64
    14: 64,  # COMPLEX64
    15: 128,  # COMPLEX128
    16: 16,  # BFLOAT16
    17: 8,  # FLOAT8E4M3FN
    18: 8,  # FLOAT8E4M3FNUZ
    19: 8,  # FLOAT8E5M2
    20: 8,  # FLOAT8E5M2FNUZ
    21: 4,  # UINT4
    22: 4,  # INT4
    23: 4,  # FLOAT4E2M1
    24: 8,  # FLOAT8E8M0
    25: 2,  # UINT2
    26: 2,  # INT2
    27: 6,  # FLOAT6E2M3
    28: 6,  # FLOAT6E3M2
}
