"""onnxviz.cli."""
