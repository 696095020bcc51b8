"""Start the GUI (imports Qt lazily so the CLI subcommands never need it)."""

from __future__ import annotations

import argparse
import contextlib
import sys


def _start_early() -> None:
    """Work that overlaps Qt's start-up: the check workers (each imports onnx for a few
    hundred ms before the opened model's first check can use it) start now, and the
    Qt-free modules the window needs are imported before PySide6 is, because once it is
    loaded PySide6 inspects every module imported after it (its __feature__ support)."""
    from onnxviz.check.worker import CHECKER, WORKER

    for worker in (WORKER, CHECKER):
        with contextlib.suppress(OSError):  # reported when a request is sent
            worker.start()
    import onnxviz.check.validator
    import onnxviz.layout.compute
    import onnxviz.model.document
    import onnxviz.present.presenter  # noqa: F401


def run(args: argparse.Namespace) -> int:
    _start_early()
    try:
        from onnxviz.ui.app import run_app
    except ImportError as exc:
        print(f"onnxviz: the GUI cannot start: {exc}", file=sys.stderr)
        return 2
    return run_app(args.model, screenshot=args.screenshot)
