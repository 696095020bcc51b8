"""`onnxviz` command line (docs/architecture.md §9).

Subcommands live in their own modules (`onnxviz.cli.<name>`), each exposing
``add_arguments(parser)`` and ``run(args) -> int``.  Errors reach the user as one
sentence on stderr with exit code 2 (unless ``--debug``), never as a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Sequence

from onnxviz import __version__
from onnxviz.errors import OnnxvizError

SUBCOMMANDS = {
    "info": "print a model's summary (ir_version, opsets, I/O, op histogram)",
    "check": "validate a model against the ONNX IR spec and operator schemas",
    "run": "run a model in the bundled interpreter",
    "render": "draw a model's graph to SVG, PNG or PDF",
    "diff": "compare two models: structure, attributes, weights and numbers",
}


def _build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The subcommands' parser; with ``only``, the arguments of that subcommand alone
    (each module is imported to add its own: `run` imports the runtime, which `check`
    and `info` do not need)."""
    parser = argparse.ArgumentParser(
        prog="onnxviz",
        description="Explore, edit, validate and debug ONNX models.",
    )
    parser.add_argument("--version", action="version", version=f"onnxviz {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("--debug", action="store_true", help="show tracebacks on errors")
        if only is None or name == only:
            importlib.import_module(f"onnxviz.cli.{name}").add_arguments(sp)
    return parser


def _gui_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnxviz",
        description="Open the onnxviz GUI. Subcommands: " + ", ".join(SUBCOMMANDS),
    )
    parser.add_argument("model", nargs="?", help="model to open (default: a bundled example)")
    parser.add_argument(
        "--screenshot", metavar="OUT.png", help="render the window to a PNG and exit"
    )
    parser.add_argument("--version", action="version", version=f"onnxviz {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    return parser


def _closed_pipe() -> int:
    """The reader of our output went away (``onnxviz run --json | head``): a normal end
    for a Unix tool, so exit quietly, as the shell's SIGPIPE would end a C tool.  stdout
    points at /dev/null from here on, so the interpreter's own flush at exit cannot
    fail again and print a traceback."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (tests capture it): nothing to redirect
        pass
    return 0


def _fail(message: str) -> int:
    print(f"onnxviz: {message}", file=sys.stderr)
    return 2


def _hand_over_text_parser() -> None:
    """Text-format models parse in the checker's worker (model.hooks.TEXT_PARSER):
    importing `onnxviz.check` hands the parser over (and costs no onnx import)."""
    import onnxviz.check  # noqa: F401


def _start_workers_early(first: str | None, args: list[str]) -> None:
    """`onnxviz check` waits for onnx's inference and checker in two worker processes
    (and, for the onnxruntime target, for onnxruntime's schemas in a third); most of
    their time is start-up.  Started now, before this process imports onnx and builds
    its parser, they start up while it does."""
    if first != "check":
        return
    from onnxviz.check.worker import CHECKER, WORKER

    for worker in (WORKER, CHECKER):
        with contextlib.suppress(OSError):  # reported when a request is sent
            worker.start()
    pairs = zip(args, [*args[1:], ""], strict=True)
    if "--target=onnxruntime" in args or ("--target", "onnxruntime") in pairs:
        from onnxviz.check.onnxruntime_ops import ask_early

        ask_early()


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    is_subcommand = first in SUBCOMMANDS
    _start_workers_early(first, args_list)
    if not is_subcommand and any(a in ("-h", "--help") for a in args_list) and first is None:
        _build_parser().print_help()
        return 0
    parser = _build_parser(first) if is_subcommand else _gui_parser()
    args = parser.parse_args(args_list)
    debug = bool(getattr(args, "debug", False))
    _hand_over_text_parser()
    try:
        if is_subcommand:
            module = importlib.import_module(f"onnxviz.cli.{args.command}")
            return int(module.run(args))
        from onnxviz.cli import gui

        return int(gui.run(args))
    except BrokenPipeError:
        return _closed_pipe()
    except OnnxvizError as exc:
        if debug:
            raise
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("interrupted")
    except Exception as exc:
        if debug:
            raise
        return _fail(f"internal error: {type(exc).__name__}: {exc} (run with --debug for details)")
