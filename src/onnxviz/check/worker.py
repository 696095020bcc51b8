"""Long-lived helper processes that run onnx's C++ code (shape inference, the checker)
on user models.

onnx's C++ inference dereferences missing input types in some operators (for example
LabelEncoder in onnx 1.23), which kills the whole process, and its checker is the same
kind of code.  Neither ever runs in the app's process: the parent sends a request (the
prepared model bytes), the worker answers.  For inference: the inferred model bytes
without tensor data and the strict-mode failure text; for the checker: its message, or
None when it accepts the model.  If the worker dies, the parent reports the crash and
starts a new worker next time.  Two workers (`WORKER` infers, `CHECKER` checks) let both
run while the parent runs its own rules.  A worker does not import the onnx package: it
loads onnx's compiled module and protobuf classes alone (`onnx_native`) and prepares
models with `prepare`, so it is ready in a third of the time (onnx's Python API is used
when that cannot be done, and for the text parser).

Protocol on stdin/stdout: 8-byte little-endian length, then a pickle; a request is
(kind, model bytes, the model's folder) with kind "infer" (a prepared copy),
"prepare+infer" (the model as it is: the worker prepares its copy), "check", or
"parse" (the bytes are ONNX text format; the answer is the parsed model's bytes or
onnx.parser's complaint), "type-texts" (model bytes, or the path of an unedited model
file the worker reads itself; the answer is the inferred types as text per graph path,
plain data the app's canvas takes without parsing or converting anything: see
`inference.type_texts_here`), or "onnxruntime-schemas" (no model: onnxruntime's operator
schemas, `onnxruntime_ops`), or "validate" (instead of bytes: the path, identity and
check target of an unedited model file; the answer is our own Validator's diagnostics
for it: `check.file_validation`).
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

_HEADER = struct.Struct("<Q")

# The niceness workers run at, passed to them in this variable (and by them to theirs).
NICE_ENV = "ONNXVIZ_WORKER_NICE"
_worker_nice = 0


def run_workers_below(nice: int) -> None:
    """Start workers at niceness ``nice`` from now on.  The window does: on a 2-core
    machine a big model's inference, checker and validation are three busy processes,
    and at the same priority they took the UI thread's core from it for 100 ms and more.
    The CLI does not: there the workers' answers are what the user waits for."""
    global _worker_nice
    _worker_nice = nice


def _lower_own_priority() -> None:
    try:
        wanted = int(os.environ.get(NICE_ENV, "0"))
        if wanted > os.getpriority(os.PRIO_PROCESS, 0):
            os.setpriority(os.PRIO_PROCESS, 0, wanted)
    except (AttributeError, OSError, ValueError):  # no such call here, or not allowed
        pass


def _read(stream: IO[bytes]) -> Any:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError
    return pickle.loads(body)


def _write(stream: IO[bytes], obj: Any) -> None:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def serve() -> None:
    import faulthandler

    from onnxviz.check import onnx_native

    faulthandler.disable()  # a crash here is expected and reported by the parent
    _lower_own_priority()
    engine = _Engine(onnx_native.load() or _ThroughPackage())
    home = os.getcwd()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            blob = _read(stdin)
        except EOFError:
            return
        kind, data, base_dir = blob
        if kind == "parse":
            _write(stdout, _parse(data))
            continue
        if kind == "onnxruntime-schemas":
            from onnxviz.check.onnxruntime_ops import read_onnxruntime_schemas

            _write(stdout, ("schemas", read_onnxruntime_schemas()))
            continue
        if kind == "type-texts":
            from onnxviz.check.inference import texts_in_chunks, type_texts_here

            _write(stdout, ("texts", texts_in_chunks(type_texts_here(data, base_dir))))
            continue
        if kind in ("validate", "validate-model"):
            from onnxviz.check.file_validation import answer_here

            _write(stdout, ("validated", answer_here(kind, data)))
            continue
        if kind == "check":
            # The checker opens external data files relative to the current directory:
            # this process's, so it may be the model's own folder.
            os.chdir(base_dir or home)
            _write(stdout, engine.check(data))
            continue
        _write(stdout, engine.infer(data, kind == "prepare+infer", base_dir))


class _ThroughPackage:
    """The same calls through onnx's Python API: when onnx's folder is laid out otherwise,
    or its compiled functions take other arguments (another onnx version)."""

    def __init__(self) -> None:
        import onnx
        import onnx.checker
        import onnx.shape_inference

        self.model_class = onnx.ModelProto
        self._onnx = onnx

    def infer(self, data: bytes, check_type: bool, strict: bool, data_prop: bool) -> bytes:
        model = self._onnx.shape_inference.infer_shapes(data, check_type, strict, data_prop)
        return model.SerializeToString()  # type: ignore[no-any-return]

    def check(self, data: bytes) -> None:
        self._onnx.checker.check_model(data, full_check=False)


class _Engine:
    """onnx's compiled inference and checker on serialized bytes, as onnx.shape_inference
    and onnx.checker call them (`check.onnx_native`), or through onnx's Python API."""

    def __init__(self, native: Any) -> None:
        self.native = native

    def _call(self, what: str, *args: Any) -> Any:
        try:
            return getattr(self.native, what)(*args)
        except TypeError:  # pybind11's "incompatible function arguments": another onnx
            if isinstance(self.native, _ThroughPackage):
                raise
            self.native = _ThroughPackage()
            return getattr(self.native, what)(*args)

    def check(self, data: bytes) -> tuple[str, str | None]:
        """("verdict", None) when onnx's checker accepts the model, else ("verdict", its
        message); a tuple, so the parent tells it from a crash report (a plain str)."""
        try:
            self._call("check", data)
        except Exception as exc:
            return "verdict", str(exc).strip() or type(exc).__name__
        return "verdict", None

    def infer(self, data: bytes, prepare: bool, base_dir: str | None) -> tuple[bytes, str | None]:
        """(inferred model bytes without tensor data, strict-mode failure text or None).
        ``prepare``: the bytes are the model as it is, prepared here against its folder
        ``base_dir`` (else a copy the parent prepared)."""
        from onnxviz.check.prepare import all_graphs, drop_tensor_data, prepare_graphs

        if prepare:
            model = self.native.model_class()
            model.ParseFromString(data)
            prepare_graphs(model, base_dir, list(all_graphs(model)))
            data = model.SerializeToString()
        failure = None
        try:
            out = self._call("infer", data, True, True, True)
        except Exception as exc:
            failure = str(exc)
            try:
                out = self._call("infer", data, False, False, True)
            except Exception:
                out = data
        inferred = self.native.model_class()
        inferred.ParseFromString(out)
        drop_tensor_data(inferred)
        return inferred.SerializeToString(), failure


def _parse(text: bytes) -> tuple[str, bytes | str]:
    """("parsed", model bytes) or ("refused", onnx.parser's first line of complaint)."""
    from onnx import parser

    try:
        model = parser.parse_model(text.decode("utf-8"))
    except Exception as exc:
        lines = str(exc).strip().splitlines()
        return "refused", lines[0] if lines else type(exc).__name__
    return "parsed", model.SerializeToString()


class InferenceWorker:
    """The parent's handle; one per process, used under a lock."""

    def __init__(
        self, command: list[str] | None = None, what: str = "onnx.shape_inference"
    ) -> None:
        self.what = what  # what runs there, for the crash sentence
        self._command = command or [
            sys.executable,
            "-c",
            "from onnxviz.check.worker import serve; serve()",
        ]
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, NICE_ENV: str(_worker_nice)} if _worker_nice else None
        return subprocess.Popen(
            self._command,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def infer(self, model_bytes: bytes) -> tuple[bytes, str | None] | str:
        """(inferred model bytes, failure text) or a description of the crash."""
        return self.begin(model_bytes)()  # type: ignore[no-any-return]

    def begin(
        self,
        model_bytes: bytes | tuple[Any, ...],
        kind: str = "infer",
        base_dir: str | None = None,
    ) -> Callable[[], Any]:
        """Send a model and return the function that waits for its answer, so the caller
        can work meanwhile (the worker runs on another core).  The worker is held until
        the answer has been read."""
        self._lock.acquire()
        try:
            proc = self.start()
        except OSError:
            self._lock.release()
            return lambda: f"the {self.what} worker could not start"
        # The request is written from a thread: the pipe holds 64 KiB, so a big model
        # would keep this thread waiting until the worker reads it all (for a new worker,
        # until it has imported onnx), time the caller can spend on its own rules.
        sent: list[bool] = []

        def send() -> None:
            try:
                assert proc.stdin is not None
                _write(proc.stdin, (kind, model_bytes, base_dir))
                sent.append(True)
            except (BrokenPipeError, OSError):
                pass

        writer = threading.Thread(target=send, name="onnxviz-worker-send", daemon=True)
        writer.start()
        answered = False

        def finish() -> Any:
            nonlocal answered
            if answered:
                raise RuntimeError("the answer was already read")
            answered = True
            try:
                writer.join()
                if not sent:
                    return self._failed(proc)
                assert proc.stdout is not None
                return _read(proc.stdout)
            except (EOFError, BrokenPipeError, OSError):
                return self._failed(proc)
            finally:
                self._lock.release()

        return finish

    def start(self) -> subprocess.Popen[bytes]:
        """The worker process, started if it is not running (callers may start it early,
        so that its start-up overlaps their own work)."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            proc = self._proc = self._start()
        return proc

    def _failed(self, proc: subprocess.Popen[bytes]) -> str:
        code = proc.wait()
        self._proc = None
        if code < 0:
            return f"{self.what} crashed (signal {-code})"
        return f"{self.what} stopped its worker process (exit status {code})"

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._proc.kill()
                self._proc.wait()
                self._proc = None


WORKER = InferenceWorker()
CHECKER = InferenceWorker(what="onnx.checker")
# Validates unedited big files away from the app's GIL (`check.file_validation`).
VALIDATOR = InferenceWorker(what="the validator")
# Started only for the onnxruntime target: onnxruntime's schema registry is native code too.
SCHEMAS = InferenceWorker(what="onnxruntime's schema registry")
