"""onnxviz.check."""
