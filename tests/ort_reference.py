"""onnxruntime as the tests' reference for numbers.

On x86-64 CPUs without VNNI (AVX2 only: Zen 1-3, Haswell to Coffee Lake) onnxruntime's
uint8 x int8 GEMMs multiply with vpmaddubsw, which saturates each pair of products at
int16: 255 * 127 * 2 = 64,770 comes out as 32,767.  Its quantized results there are not
the exact integer arithmetic the operators define (and ours compute).  The session
config entry ``session.x64quantprecision`` makes it use its exact kernels for constant
weights, the case of every quantized model here; on other CPUs it changes nothing.
"""

from __future__ import annotations

from typing import Any

# onnxruntime's kOrtSessionOptionsConfigX64QuantPrecision (session_options_config_keys.h).
X64_QUANT_PRECISION = "session.x64quantprecision"


def exact_options(ort: Any, threads: int | None = 1) -> Any:
    """SessionOptions whose integer GEMMs are exact on every x86-64 CPU, on
    ``threads`` intra-op threads (None: onnxruntime's default)."""
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.add_session_config_entry(X64_QUANT_PRECISION, "1")
    return options
