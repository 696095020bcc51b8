"""TensorProto <-> numpy.  PLACEHOLDER: replaced by the full codec (issue 2, item 4)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper


def to_array(tensor: TensorProto, base_dir: str | None = None) -> np.ndarray:
    return numpy_helper.to_array(tensor, base_dir or "")


def from_array(array: Any, name: str = "") -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)
