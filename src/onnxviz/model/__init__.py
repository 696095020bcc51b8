"""onnxviz.model."""
