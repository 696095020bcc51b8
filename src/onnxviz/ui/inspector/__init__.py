"""The tensor inspector: a dock (inspector_dock.py) around a widget that shows one
runtime value in detail (tensor_inspector.py: histogram, heatmap, channels, table)."""

from onnxviz.ui.inspector.inspector_dock import InspectorDock
from onnxviz.ui.inspector.tensor_inspector import TensorInspector

__all__ = ["InspectorDock", "TensorInspector"]
