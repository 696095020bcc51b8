"""Write the onnxslim before/after pairs the diff tests read (tests/model/test_diff_slim.py).

    python tests/data/diff/make_slim_pairs.py [SITE_DIR]

onnxslim is not a dependency of onnxviz: install it anywhere (``pip install --target
SITE_DIR onnxslim``) and pass that folder; it is appended to sys.path, after the
project's own packages.  Written: ``cnn_before.onnx``/``cnn_after.onnx`` (Conv +
BatchNormalization blocks, an Identity) and ``tf_before.onnx``/``tf_after.onnx`` (the
benchmarks' transformer-like model, 300 nodes), next to this script.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def main() -> None:
    if len(sys.argv) > 1:
        sys.path.append(sys.argv[1])
    sys.path.insert(0, ROOT)
    import onnx
    import onnxslim
    from benchmarks.models import transformer_like
    from tests.model import diff_corpus as C

    for name, model in (("cnn", C.cnn(True, blocks=3)), ("tf", transformer_like(300))):
        slim = onnxslim.slim(C.copy(model))
        onnx.save(model, os.path.join(HERE, f"{name}_before.onnx"))
        onnx.save(slim, os.path.join(HERE, f"{name}_after.onnx"))
        print(
            name,
            len(model.graph.node),
            "->",
            len(slim.graph.node),
            "onnxslim",
            onnxslim.__version__,
        )


if __name__ == "__main__":
    main()
