"""onnxviz.present."""
