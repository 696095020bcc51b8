"""Property-based tests draw the same examples on every run of the test command.

A fresh clone has no example database, so each CI run drew new examples: a generator
that can make a case its test does not expect turned CI red at random (a depthwise conv
case past 1024 output pixels did, once in many runs).  Derandomized, a failing example
fails on every run, on every machine.  ``HYPOTHESIS_EXPLORE=1`` draws new examples
(looking for such cases on purpose)."""

from __future__ import annotations

import os

from hypothesis import settings

# The onnx backend node cases, made once per library versions in build/ (gitignored)
# rather than by every test process: 13 s of one core each (conformance.node_cases).
os.environ.setdefault(
    "ONNXVIZ_CASE_CACHE",
    os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "case-cache"
    ),
)

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile("explore" if os.environ.get("HYPOTHESIS_EXPLORE") == "1" else "repeatable")
