"""Qt tests run offscreen, with settings kept in a temporary folder."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    from PySide6.QtCore import QSettings

    folder = tmp_path_factory.mktemp("settings")
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))
    yield


@pytest.fixture(autouse=True)
def _isolated_recovery_and_log(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a real crash snapshot of the user's must never be offered (or dropped) by a test,
    # nor the user's log file written
    if "ONNXVIZ_RECOVERY_DIR" not in os.environ:
        monkeypatch.setenv("ONNXVIZ_RECOVERY_DIR", str(tmp_path_factory.mktemp("recovery")))
    if "ONNXVIZ_LOG_DIR" not in os.environ:
        monkeypatch.setenv("ONNXVIZ_LOG_DIR", str(tmp_path_factory.mktemp("logs")))


@pytest.fixture
def window(qtbot):  # type: ignore[no-untyped-def]
    from onnxviz.ui.main_window import MainWindow
    from tests.ui.scripted_prompter import ScriptedPrompter

    w = MainWindow(prompter=ScriptedPrompter())
    w.resize(1200, 800)
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()
    from onnxviz.ui import collector

    collector.settle()  # an open the test did not wait out must not hold the next test's
