"""onnxviz.layout."""
