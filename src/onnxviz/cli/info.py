"""`onnxviz info MODEL [--json]`: a model's summary."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from onnxviz.model.document import Document
from onnxviz.model.summary import summarize
from onnxviz.model.text import jsonable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to a .onnx (or .onnxtxt) model")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")


def _human(info: dict[str, Any], path: str, problems: list[str]) -> str:
    opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in info["opset_import"].items())
    lines = [
        f"{path}",
        f"  ir_version      {info['ir_version']}",
        f"  opsets          {opsets or '(none)'}",
        f"  producer        {info['producer_name']} {info['producer_version']}".rstrip(),
        f"  graph           {info['graph_name'] or '(unnamed)'}",
        f"  nodes           {info['node_count']} in the main graph, "
        f"{info['node_count_total']} in all {info['subgraph_count'] + 1 + len(info['functions'])} graphs",
        f"  initializers    {info['initializer_count']}",
    ]
    init_inputs = set(info["initializer_inputs"])
    real = [i for i in info["inputs"] if i["name"] not in init_inputs]
    lines.append(
        f"  inputs          {len(real)}"
        + (f" (+{len(init_inputs)} initializers listed as inputs)" if init_inputs else "")
    )
    lines += [f"    {i['name']}: {i['type']}" for i in real]
    lines.append(f"  outputs         {len(info['outputs'])}")
    lines += [f"    {o['name']}: {o['type']}" for o in info["outputs"]]
    if info["functions"]:
        lines.append(f"  functions       {len(info['functions'])}")
        for f in info["functions"]:
            over = f":{f['overload']}" if f["overload"] else ""
            lines.append(f"    {f['domain']}::{f['name']}{over}")
    if info["external_data_files"]:
        lines.append("  external data   " + ", ".join(info["external_data_files"]))
    if info["metadata_props"]:
        lines.append("  metadata")
        lines += [f"    {k} = {v}" for k, v in info["metadata_props"].items()]
    lines.append("  operators")
    width = max((len(k) for k in info["op_types"]), default=0)
    lines += [f"    {k.ljust(width)}  {v}" for k, v in info["op_types"].items()]
    if problems:
        lines.append("  load problems")
        lines += [f"    {p}" for p in problems]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    doc = Document.open(args.model)
    info = summarize(doc.model)
    if args.json:
        info["load_diagnostics"] = [d.to_json() for d in doc.diagnostics]
        json.dump(jsonable(info), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_human(info, args.model, [str(d) for d in doc.diagnostics]))
    return 0
