"""The run panel: step through a model on the canvas (see `run_panel.RunPanel`)."""

from onnxviz.ui.run.run_panel import RunPanel, heat_colour

__all__ = ["RunPanel", "heat_colour"]
