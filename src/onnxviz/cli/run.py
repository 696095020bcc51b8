"""`onnxviz run`: not implemented yet (see the open issues)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to a .onnx model")


def run(args: argparse.Namespace) -> int:
    print("onnxviz: 'run' is not available in this build yet", file=sys.stderr)
    return 2
