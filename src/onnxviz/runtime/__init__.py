"""onnxviz.runtime."""
