"""Start the GUI (imports Qt lazily so the CLI subcommands never need it)."""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    try:
        from onnxviz.ui.app import run_app
    except ImportError as exc:
        print(f"onnxviz: the GUI cannot start: {exc}", file=sys.stderr)
        return 2
    return run_app(args.model, screenshot=args.screenshot)
