"""Runs reuse their freed arrays' pages (runtime/heap.py): once a Session exists, a
cycle of large arrays made, written and freed, as a run's intermediates are, faults no
new pages in on its next turns; without the thresholds glibc gave the pages back."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's (mallopt)"
)

_CYCLES = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    if sys.argv[1] == "session":
        from onnx import TensorProto, helper
        from onnxviz.runtime.session import Session
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        )
        Session(helper.make_model(graph))

    def cycle():
        # three 16 MB intermediates, written, then freed: 48 MB of free heap top, more
        # than glibc's own trim threshold after it raised its mmap threshold to 16 MB
        arrays = [np.ones(4 << 20, np.float32) for _ in range(3)]
        del arrays

    cycle()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        cycle()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
    """
)


def _faults_per_cycle(mode: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _CYCLES, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return float(done.stdout.strip().splitlines()[-1])


def test_after_a_session_is_made_freed_arrays_are_reused_without_page_faults() -> None:
    # Without a Session the same cycle faults its pages in again every turn (the test
    # can fail: the thresholds are what keeps them).
    assert _faults_per_cycle("plain") > 1000
    assert _faults_per_cycle("session") < 50
