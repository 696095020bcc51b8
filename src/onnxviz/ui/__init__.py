"""onnxviz.ui."""
