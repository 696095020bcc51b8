"""Foundation benchmark: opening models, indexing, renaming, undoing.

    .venv/bin/python benchmarks/bench_foundation.py [--gb 1.0] [--nodes 100000]

Each measurement runs in a fresh subprocess so peak RSS (ru_maxrss) belongs to that
operation alone; onnx.load is measured in the same run as the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PRELUDE = textwrap.dedent(
    f"""
    import json, resource, sys, time
    sys.path.insert(0, {ROOT!r})
    def done(**kw):
        kw["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(kw))
    """
)

SNIPPETS = {
    "onnx.load (with data)": """
import onnx
t = time.perf_counter(); m = onnx.load(PATH); done(seconds=time.perf_counter() - t)
""",
    "onnx.load (no data)": """
import onnx
t = time.perf_counter(); m = onnx.load(PATH, load_external_data=False); done(seconds=time.perf_counter() - t)
""",
    "onnxviz open": """
from onnxviz.model.document import Document
t = time.perf_counter(); d = Document.open(PATH); done(seconds=time.perf_counter() - t)
""",
    "onnxviz open + index + rename + undo": """
from onnxviz.model.document import Document
t = time.perf_counter(); d = Document.open(PATH); t_open = time.perf_counter() - t
t = time.perf_counter(); c = time.process_time(); d.scopes(); t_index = time.perf_counter() - t; cpu_index = time.process_time() - c
name = d.model.graph.node[len(d.model.graph.node) // 2].output[0]
t = time.perf_counter(); d.rename_value(name, "renamed_value"); t_rename = time.perf_counter() - t
t = time.perf_counter(); d.undo(); t_undo = time.perf_counter() - t
d._scopes = None
t = time.perf_counter(); d.scopes(); t_rebuild = time.perf_counter() - t
done(seconds=t_open, index=t_index, cpu_index=cpu_index, rename=t_rename, undo=t_undo, rebuild=t_rebuild)
""",
}


def measure(snippet: str, path: str) -> dict[str, float]:
    code = PRELUDE + f"PATH = {path!r}\n" + SNIPPETS[snippet]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, default=100_000)
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from benchmarks.models import transformer_like, write_big_external

    with tempfile.TemporaryDirectory() as tmp:
        big = write_big_external(os.path.join(tmp, "big"), int(args.gb * (1 << 30)))
        print(
            f"== {args.gb:.1f} GB external data ({os.path.getsize(big.replace('.onnx', '.data')) / 2**30:.2f} GiB)"
        )
        peer = measure("onnx.load (with data)", big)
        peer_nodata = measure("onnx.load (no data)", big)
        ours = measure("onnxviz open", big)
        for label, r in (
            ("onnx.load", peer),
            ("onnx.load(load_external_data=False)", peer_nodata),
            ("onnxviz open", ours),
        ):
            print(
                f"  {label:38s} {r['seconds'] * 1000:9.1f} ms   peak RSS {r['peak_rss_mb']:7.1f} MB"
            )
        print(
            f"  ratio onnx.load / onnxviz: time {peer['seconds'] / ours['seconds']:.1f}x, RSS {peer['peak_rss_mb'] / ours['peak_rss_mb']:.1f}x"
        )

        path = os.path.join(tmp, "transformer.onnx")
        model = transformer_like(args.nodes)
        with open(path, "wb") as fh:
            fh.write(model.SerializeToString())
        print(
            f"== {len(model.graph.node)}-node transformer-like model ({os.path.getsize(path) / 1e6:.1f} MB)"
        )
        del model
        peer = measure("onnx.load (no data)", path)
        ours = measure("onnxviz open + index + rename + undo", path)
        print(
            f"  onnx.load                              {peer['seconds'] * 1000:9.1f} ms   peak RSS {peer['peak_rss_mb']:7.1f} MB"
        )
        print(
            f"  onnxviz open                           {ours['seconds'] * 1000:9.1f} ms   peak RSS {ours['peak_rss_mb']:7.1f} MB (after all steps)"
        )
        print(
            f"  full index build                       {ours['index'] * 1000:9.1f} ms   (CPU {ours['cpu_index'] * 1000:.1f} ms; rebuild {ours['rebuild'] * 1000:.1f} ms)"
        )
        print(f"  rename one value                       {ours['rename'] * 1000:9.1f} ms")
        print(f"  undo the rename                        {ours['undo'] * 1000:9.1f} ms")
        print(f"  ratio open / onnx.load: {ours['seconds'] / peer['seconds']:.2f}x")


if __name__ == "__main__":
    main()
