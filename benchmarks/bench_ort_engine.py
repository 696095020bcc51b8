"""onnxruntime as the second engine: memory of all-intermediates, chunked vs at once, and
run time of our interpreter vs the onnxruntime engine.

    .venv/bin/python benchmarks/bench_ort_engine.py [--values 32] [--mb 8] [--chunk-mb 32]

The model is a chain of ``--values`` elementwise nodes and MatMuls whose every value is
``--mb`` MB, so its intermediates sum to ``values * mb`` MB, far over the chunk budget.
Every measurement runs in a fresh subprocess so its peak RSS (ru_maxrss) is its own:

- "onnxruntime, all intermediates as outputs at once": the Polygraphy way (the peer);
- "ort_engine chunked": `ort_engine.iter_intermediates` with ``--chunk-mb``;
- "onnxruntime outputs only": the floor (the model and one run);
- "onnxviz run" vs "ort_engine run": outputs only, time of the run itself.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")

PRELUDE = textwrap.dedent(
    f"""
    import json, resource, sys, time, os
    sys.path.insert(0, {SRC!r})
    import numpy as np
    def done(**kw):
        kw["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(kw))
    from onnxviz.model.document import Document
    from onnxviz.runtime import ort_engine
    doc = Document.open(PATH)
    feeds = {{"x": np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)}}
    """
)

SNIPPETS = {
    "onnxruntime, all intermediates as outputs at once (peer)": """
names = ort_engine.main_values(doc.model)
t = time.perf_counter(); got = ort_engine.fetch_values(doc, feeds, names)
done(seconds=time.perf_counter() - t, values=len(got))
""",
    "ort_engine chunked": """
t = time.perf_counter(); n = 0; runs = 0
for chunk, values in ort_engine.iter_intermediates(doc, feeds, chunk_bytes=CHUNK):
    n += len(values); runs += 1
done(seconds=time.perf_counter() - t, values=n, runs=runs)
""",
    "onnxruntime outputs only (floor)": """
t = time.perf_counter(); r = ort_engine.run(doc, feeds)
done(seconds=time.perf_counter() - t)
""",
    "ort_engine run (outputs)": """
ort_engine.run(doc, feeds)  # warm
best = min(ort_engine.run(doc, feeds).seconds for _ in range(3))
done(seconds=best)
""",
    "onnxviz run (outputs)": """
from onnxviz.runtime.session import Session
s = Session(doc); s.run(feeds)
best = 1e9
for _ in range(3):
    t = time.perf_counter(); s.run(feeds); best = min(best, time.perf_counter() - t)
done(seconds=best)
""",
}


def write_model(path: str, values: int, mb: float) -> tuple[int, int]:
    """A chain: every 4th node a square MatMul, the others Add/Mul/Tanh; each value
    ``mb`` MB of float32 [rows, 512]."""
    cols = 512
    rows = max(int(mb * 2**20 / 4 / cols), 1)
    rng = np.random.default_rng(1)
    nodes, inits = [], []
    prev = "x"
    for i in range(values):
        out = f"v{i}"
        if i % 4 == 3:
            w = (rng.standard_normal((cols, cols)) / np.sqrt(cols)).astype(np.float32)
            inits.append(numpy_helper.from_array(w, f"W{i}"))
            nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [out]))
        else:
            op = ("Add", "Mul", "Tanh")[i % 4]
            ins = [prev] if op == "Tanh" else [prev, "c"]
            nodes.append(helper.make_node(op, ins, [out]))
        prev = out
    inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "c"))
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "chain",
        [vi("x", TensorProto.FLOAT, [rows, cols])],
        [vi(prev, TensorProto.FLOAT, [rows, cols])],
        initializer=inits,
        value_info=[vi(f"v{i}", TensorProto.FLOAT, [rows, cols]) for i in range(values - 1)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, path)
    return rows, cols


def measure(snippet: str, path: str, shape: tuple[int, int], chunk: int) -> dict[str, float]:
    code = PRELUDE.replace("PATH", repr(path)).replace("SHAPE", repr(shape)) + textwrap.dedent(
        snippet
    ).replace("CHUNK", str(chunk))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=int, default=32)
    ap.add_argument("--mb", type=float, default=8.0)
    ap.add_argument("--chunk-mb", type=float, default=32.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "chain.onnx")
        shape = write_model(path, args.values, args.mb)
        chunk = int(args.chunk_mb * 2**20)
        results = {label: measure(s, path, shape, chunk) for label, s in SNIPPETS.items()}
    total = args.values * args.mb
    if args.json:
        print(json.dumps({"intermediates_mb": total, "chunk_mb": args.chunk_mb, **results}))
        return
    print(
        f"{args.values} values of {args.mb:g} MB ({total:g} MB of intermediates), "
        f"chunk budget {args.chunk_mb:g} MB"
    )
    for label, r in results.items():
        if "error" in r:
            print(f"  {label:58s} error: {r['error']}")
            continue
        extra = f"  ({r['runs']} runs)" if "runs" in r else ""
        print(
            f"  {label:58s} {r['seconds'] * 1000:9.1f} ms  peak RSS {r['peak_rss_mb']:7.0f} MB{extra}"
        )


if __name__ == "__main__":
    main()
