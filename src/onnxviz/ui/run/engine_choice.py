"""The run panel's engine choice: step in onnxviz, or run the whole model in onnxruntime.

`EngineChoice` is the combo ("Engine: onnxviz (step) / onnxruntime"; onnxruntime is
greyed out when the package is not installed).  `OrtRunner` runs a snapshot of the
Document in onnxruntime on a thread (`runtime.ort_engine`): the outputs, the
intermediates fetched in memory-bounded chunks and kept while they fit the panel's
memory cap, and the profile mapped onto our node addresses, so the value table, the
inspector, the profile table and the heat colouring show onnxruntime's run the way they
show ours.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

from onnxviz.runtime import ort_engine
from onnxviz.runtime.profile import Profiler
from onnxviz.runtime.values import nbytes
from onnxviz.ui import settings
from onnxviz.ui.run.worker_thread import start_worker_thread

ENGINES = (("onnxviz (step)", "onnxviz"), ("onnxruntime", "onnxruntime"))


class EngineChoice(QWidget):
    changed = Signal(str)  # "onnxviz" | "onnxruntime"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(QLabel("Engine:"))
        self.combo = QComboBox()
        for text, key in ENGINES:
            self.combo.addItem(text, key)
        if not ort_engine.available():
            item = self.combo.model().item(1)  # type: ignore[attr-defined]
            item.setEnabled(False)
            item.setToolTip("install the onnxruntime package to run models with it")
        self.combo.setToolTip(
            "onnxviz steps node by node (breakpoints, frames); onnxruntime runs the whole "
            "model at once, on a GPU when its providers are installed"
        )
        lay.addWidget(self.combo)
        lay.addStretch(1)
        saved = str(settings.settings().value("run/engine", "onnxviz"))
        if saved == "onnxruntime" and ort_engine.available():
            self.combo.setCurrentIndex(1)
        self.combo.currentIndexChanged.connect(self._changed)

    def engine(self) -> str:
        return str(self.combo.currentData())

    def set_engine(self, key: str) -> None:
        index = self.combo.findData(key)
        if index >= 0:
            self.combo.setCurrentIndex(index)

    def _changed(self, _index: int) -> None:
        settings.save_value("run/engine", self.engine())
        self.changed.emit(self.engine())


@dataclass
class OrtOutcome:
    """One onnxruntime run as the panel shows it."""

    outputs: dict[str, Any]
    values: dict[str, Any]  # kept intermediates and outputs, in graph order
    profiler: Profiler
    providers: list[str]
    seconds: float
    dropped: list[str] = field(default_factory=list)  # over the memory cap
    chunks: int = 0

    def status(self) -> str:
        text = (
            f"onnxruntime ({', '.join(self.providers)}): finished in {self.seconds * 1000:.1f} ms"
        )
        if self.dropped:
            text += f"; {len(self.dropped)} values over the memory cap not kept"
        return text


def run_onnxruntime(
    source: Any, feeds: dict[str, Any], memory_cap: int, chunk_bytes: int
) -> OrtOutcome:
    """The outputs and profile in one run, then every intermediate in chunks of at most
    ``chunk_bytes``, kept while the total stays under ``memory_cap``."""
    t0 = time.perf_counter()
    result = ort_engine.run(source, feeds, profile=True)
    seconds = time.perf_counter() - t0
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    total = sum(nbytes(v) for v in result.outputs.values())
    chunks = 0
    wanted = [n for n in ort_engine.main_values(source.model) if n not in result.outputs]
    if wanted:
        budget = max(min(chunk_bytes, memory_cap), 1)
        for _chunk, values in ort_engine.iter_intermediates(
            source, feeds, wanted, chunk_bytes=budget
        ):
            chunks += 1
            for name, value in values.items():
                size = nbytes(value)
                if total + size > memory_cap:
                    dropped.append(name)
                    continue
                kept[name] = value
                total += size
    kept.update(result.outputs)
    profiler = result.profile if result.profile is not None else Profiler()
    return OrtOutcome(result.outputs, kept, profiler, result.providers, seconds, dropped, chunks)


class OrtRunner(QObject):
    finished = Signal(object)  # OrtOutcome or OnnxvizError

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker_thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        return self.worker_thread is not None and self.worker_thread.is_alive()

    def start(self, doc: Any, feeds: dict[str, Any], memory_cap: int, chunk_bytes: int) -> bool:
        if self.busy:
            return False
        # A snapshot taken here, on the GUI thread: edits during the run do not race it.
        from onnx import ModelProto

        model = ModelProto()
        model.CopyFrom(doc.model)
        source = ort_engine.ModelInFolder(model, getattr(doc, "base_dir", None))

        self.worker_thread = start_worker_thread(
            lambda: run_onnxruntime(source, feeds, memory_cap, chunk_bytes),
            self.finished.emit,
            name="onnxviz-onnxruntime",
            failure="onnxruntime failed",
        )
        return True

    def wait(self, timeout_s: float = 60.0) -> bool:
        """Wait for the run, delivering its signal (tests, and closing the window)."""
        from PySide6.QtWidgets import QApplication

        end = time.monotonic() + timeout_s
        while self.busy and time.monotonic() < end:
            QApplication.processEvents()
            time.sleep(0.005)
        QApplication.processEvents()
        return not self.busy
