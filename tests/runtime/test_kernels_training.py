"""ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum): ONNX node cases and
several tensors updated by one node.  Gradient is listed as unsupported by the engine
(runtime/unsupported.py): it needs automatic differentiation."""

from __future__ import annotations

import numpy as np
import pytest

from onnxviz.errors import ExecutionError
from tests.runtime.datakernels_helpers import TRAINING_OPS, case_params, judge_case, run_ours

KNOWN_FAILURES: dict[str, str] = {}


@pytest.mark.parametrize("case", case_params(TRAINING_OPS, KNOWN_FAILURES))
def test_node_case(case: object) -> None:
    judge_case(case)


_TRAINING = "ai.onnx.preview.training"


def test_optimizers_update_several_tensors_independently() -> None:
    r, t = np.array(0.1, np.float32), np.array(3, np.int64)
    x1, x2 = np.ones(3, np.float32), np.full((2, 2), 2.0, np.float32)
    g1, g2 = np.full(3, 0.5, np.float32), np.full((2, 2), -1.0, np.float32)
    s1, s2 = np.zeros(3, np.float32), np.ones((2, 2), np.float32)
    both = run_ours("Adagrad", [r, t, x1, x2, g1, g2, s1, s2], 1, n_outputs=4, domain=_TRAINING)
    one = run_ours("Adagrad", [r, t, x2, g2, s2], 1, n_outputs=2, domain=_TRAINING)
    np.testing.assert_array_equal(both[1], one[0])
    np.testing.assert_array_equal(both[3], one[1])
    # X_new = X - r * G / (sqrt(H + G^2) + eps) with r = R / (1 + T * decay) = 0.1
    np.testing.assert_allclose(both[0], 1 - 0.1 * 0.5 / (0.5 + 1e-6), rtol=1e-6)
    mom = run_ours(
        "Momentum",
        [r, t, x1, g1, s1],
        1,
        n_outputs=2,
        domain=_TRAINING,
        alpha=0.9,
        beta=0.5,
        mode="nesterov",
        norm_coefficient=0.0,
    )
    np.testing.assert_allclose(mom[1], 0.25)  # V = 0.9 * 0 + 0.5 * 0.5
    np.testing.assert_allclose(mom[0], 1 - 0.1 * (0.5 + 0.9 * 0.25))
    adam = run_ours(
        "Adam", [r, t, x1, x2, g1, g2, s1, s2, s1, s2], 1, n_outputs=6, domain=_TRAINING
    )
    assert [a.shape for a in adam] == [(3,), (2, 2)] * 3
    with pytest.raises(ExecutionError):
        run_ours("Adam", [r, t, x1, g1, s1], 1, n_outputs=3, domain=_TRAINING)
