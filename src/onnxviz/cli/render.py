"""`onnxviz render MODEL -o OUT.{svg,png,pdf} [--graph PATH]`: draw a model headless."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to a .onnx model")
    parser.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="output file: .svg, .png or .pdf"
    )
    parser.add_argument(
        "--graph", metavar="PATH", help="graph to draw, e.g. 'main/body:Loop_3' (default: main)"
    )
    parser.add_argument("--theme", choices=("light", "dark"), default="light")
    parser.add_argument(
        "--scale", type=float, default=2.0, help="PNG pixels per scene unit (default 2)"
    )
    parser.add_argument(
        "--direction", choices=("TB", "LR"), default="TB", help="top-bottom or left-right"
    )
    parser.add_argument(
        "--expand",
        choices=("default", "all", "none"),
        default="default",
        help="name-scope groups and subgraph bodies: as the window opens them, all, or none",
    )
    parser.add_argument("--names", action="store_true", help="show node names")


def run(args: argparse.Namespace) -> int:
    try:
        from onnxviz.ui.render import render_model
    except ImportError as exc:
        print(f"onnxviz: rendering needs PySide6: {exc}", file=sys.stderr)
        return 2
    out = render_model(
        args.model,
        args.output,
        graph=args.graph,
        theme=args.theme,
        scale=args.scale,
        direction=args.direction,
        expand=args.expand,
        show_names=args.names,
    )
    print(f"{out.path}: {out.items} boxes, {out.edges} edges, {out.width:.0f}×{out.height:.0f}")
    return 0
