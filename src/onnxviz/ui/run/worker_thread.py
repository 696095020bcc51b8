"""Run one function on a daemon thread and hand its result (or its failure, as an
OnnxvizError the user reads as one sentence) to a callback: the run panel's run, its
compare with onnxruntime and the onnxruntime engine's run all work this way."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from onnxviz.errors import OnnxvizError

log = logging.getLogger(__name__)


def start_worker_thread(
    work: Callable[[], Any], deliver: Callable[[Any], None], *, name: str, failure: str
) -> threading.Thread:
    """Start ``work`` on a daemon thread named ``name``; ``deliver`` gets what it returns,
    or the OnnxvizError it raised, or any other exception as "<failure>: <type>: <text>"
    (with the traceback in the log).  ``deliver`` runs on that thread: emit a signal."""

    def body() -> None:
        result: Any
        try:
            result = work()
        except OnnxvizError as exc:
            result = exc
        except Exception as exc:  # one sentence for the user, details in the log
            log.exception("%s", failure)
            result = OnnxvizError(f"{failure}: {type(exc).__name__}: {exc}")
        deliver(result)

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread
