"""The window's controllers: each takes the `DocumentSession` and follows its signals."""

from onnxviz.ui.controllers.background_work import BackgroundWork
from onnxviz.ui.controllers.diagnostics_controller import DiagnosticsController
from onnxviz.ui.controllers.file_controller import FileController
from onnxviz.ui.controllers.find_controller import FindController
from onnxviz.ui.controllers.inspector_controller import InspectorController
from onnxviz.ui.controllers.navigation_controller import Crumb, NavigationController
from onnxviz.ui.controllers.outline_controller import OutlineController
from onnxviz.ui.controllers.properties_controller import PropertiesController
from onnxviz.ui.controllers.surgery_controller import SurgeryController

__all__ = [
    "BackgroundWork",
    "Crumb",
    "DiagnosticsController",
    "FileController",
    "FindController",
    "InspectorController",
    "NavigationController",
    "OutlineController",
    "PropertiesController",
    "SurgeryController",
]
