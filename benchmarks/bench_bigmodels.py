"""LLM-scale benchmark: a 1 GiB single-file model and a 20 GB external-data Llama shape.

    .venv/bin/python benchmarks/bench_bigmodels.py [--gib 1.0] [--external-gb 20] [--skip-gui]

Both files are written into a temporary folder: the single file streams its weights
(no 1 GiB message in memory), the external one is a sparse data file (no disk used).
Every measurement runs in a fresh subprocess so peak RSS (ru_maxrss) belongs to that
operation alone; the peers (onnx.load, onnx.checker) run in the same session, and the
measurements alternate between peer and ours over ``--rounds`` rounds (best of each).
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
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(ROOT, "src")

PRELUDE = textwrap.dedent(
    f"""
    import json, resource, sys, time, os
    sys.path.insert(0, {SRC!r})
    def done(**kw):
        kw["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        kw["children_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(json.dumps(kw))
    """
)

SNIPPETS = {
    "onnx.load": """
import onnx
t = time.perf_counter(); m = onnx.load(PATH); done(seconds=time.perf_counter() - t)
""",
    "onnx.load (no external data)": """
import onnx
t = time.perf_counter(); m = onnx.load(PATH, load_external_data=False); done(seconds=time.perf_counter() - t)
""",
    "onnx.checker (path)": """
import onnx
t = time.perf_counter(); onnx.checker.check_model(PATH); done(seconds=time.perf_counter() - t)
""",
    "onnxviz open": """
from onnxviz.model.document import Document
t = time.perf_counter(); d = Document.open(PATH); done(seconds=time.perf_counter() - t)
""",
    "onnxviz open + index": """
from onnxviz.model.document import Document
t = time.perf_counter(); d = Document.open(PATH); d.scopes(); done(seconds=time.perf_counter() - t)
""",
    # The CLI's workers outlive it unreaped, so their RSS is measured here: the workers
    # are closed (killed and waited for) before the report.
    "onnxviz validate (workers' RSS)": """
from onnxviz.check import validate
from onnxviz.check.worker import CHECKER, SCHEMAS, WORKER
from onnxviz.model.document import Document
t = time.perf_counter(); d = Document.open(PATH); diags = validate(d, target=TARGET)
seconds = time.perf_counter() - t
for w in (WORKER, CHECKER, SCHEMAS):
    w.close()
done(seconds=seconds, errors=sum(x.severity.name == "ERROR" for x in diags))
""",
    "onnxviz save (edited, streamed)": """
from onnx import helper
from onnxviz.model.commands import SetAttribute
from onnxviz.model.document import Document
d = Document.open(PATH); d.execute(SetAttribute("main", 0, helper.make_attribute("note", "x")))
t = time.perf_counter(); d.save(PATH + ".saved.onnx"); done(seconds=time.perf_counter() - t)
os.unlink(PATH + ".saved.onnx")
""",
}

CLI = {
    "onnxviz info": ["info"],
    "onnxviz check": ["check"],
    "onnxviz check --target onnxruntime": ["check", "--target", "onnxruntime"],
}


_LAUNCHER = (
    "import subprocess, sys; "
    "r = subprocess.run([sys.executable, '-c', sys.argv[1]]); sys.exit(r.returncode)"
)


def measure(label: str, path: str) -> dict[str, float]:
    if label in CLI:
        code = PRELUDE + textwrap.dedent(
            f"""
            import subprocess
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "onnxviz", *{CLI[label]!r}, {path!r}],
                               capture_output=True, env=dict(os.environ, PYTHONPATH={SRC!r}))
            done(seconds=time.perf_counter() - t, exit=r.returncode, tail=r.stdout.decode()[-300:])
            """
        )
    elif label == "onnxviz --screenshot":
        code = PRELUDE + textwrap.dedent(
            f"""
            import subprocess
            t = time.perf_counter()
            env = dict(os.environ, PYTHONPATH={SRC!r}, QT_QPA_PLATFORM="offscreen")
            r = subprocess.run([sys.executable, "-m", "onnxviz", {path!r},
                                "--screenshot", {path + ".png"!r}], capture_output=True, env=env)
            done(seconds=time.perf_counter() - t, exit=r.returncode, tail=r.stderr.decode()[-300:])
            """
        )
    else:
        target = "onnxruntime" if "onnxruntime" in label else "onnx"
        code = PRELUDE + f"PATH = {path!r}\nTARGET = {target!r}\n" + SNIPPETS[label]
    # Linux records the launching process's peak RSS in the child it execs (ru_maxrss
    # survives exec), so a lean launcher starts the measured process, not this one (or
    # a test runner) with its hundreds of MB.  Bytecode is written and read as in an
    # installed package (a PYTHONDONTWRITEBYTECODE session would compile every module
    # of every run: a third of the floor).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, "-S", "-c", _LAUNCHER, code], capture_output=True, text=True, env=env
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?"}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # A CLI run: its own process is the child; count the larger of the two.
    result["peak_rss_mb"] = max(result["peak_rss_mb"], result.get("children_rss_mb", 0.0))
    return result


# -- model files ------------------------------------------------------------------------------
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def write_single_file(
    path: str, total_bytes: int, matmuls: int = 16, *, sparse: bool = False
) -> str:
    """``matmuls`` chained MatMuls whose square float32 weights total ``total_bytes``,
    embedded as raw_data; written field by field so the weights are never in memory.
    ``sparse``: the weights are holes in the file (zeros, no disk, no time to write)."""
    side = int((total_bytes / matmuls / 4) ** 0.5)
    nodes, weights = [], []
    prev = "x"
    for i in range(matmuls):
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"y{i}"], name=f"mm{i}"))
        weights.append(TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[side, side]))
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "single_file",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, side])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, side])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    graph_bytes = model.graph.SerializeToString()
    model.ClearField("graph")
    nbytes = side * side * 4
    framed = []
    for w in weights:
        head = w.SerializeToString() + b"\x4a" + _varint(nbytes)  # raw_data, field 9
        framed.append(b"\x2a" + _varint(len(head) + nbytes) + head)  # initializer, field 5
    graph_len = len(graph_bytes) + sum(len(f) + nbytes for f in framed)
    rng = np.random.default_rng(0)
    block = rng.standard_normal(side * side, dtype=np.float32).tobytes()
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
        fh.write(b"\x3a" + _varint(graph_len) + graph_bytes)  # graph, field 7
        for f in framed:
            fh.write(f)
            if sparse:
                fh.seek(nbytes, os.SEEK_CUR)
            else:
                fh.write(block)
        fh.truncate()
    return path


def write_llama_external(folder: str, total_gb: float, nodes_wanted: int = 5000) -> str:
    """A Llama-shaped decoder (norms, attention, SwiGLU MLP, residuals), 18 nodes a
    layer, with every weight in one sparse external data file of about ``total_gb``."""
    layers = max(1, nodes_wanted // 18)
    hidden = 1024
    ffn = max(64, int((total_gb * 1e9 / layers / 4 - 4 * hidden * hidden) / (3 * hidden)))
    data_name = "llama.onnx.data"
    offset = 0
    inits: list[TensorProto] = []

    def weight(name: str, dims: list[int], data_type: int = TensorProto.FLOAT) -> str:
        nonlocal offset
        t = TensorProto(name=name, data_type=data_type, dims=dims)
        n = int(np.prod(dims)) * 4
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(n))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset += (n + 4095) // 4096 * 4096
        inits.append(t)
        return name

    nodes = []
    x = "hidden_in"
    for i in range(layers):
        p = f"layers.{i}"

        def mk(op: str, ins: list[str], out: str, p: str = p, **attrs: object) -> str:
            nodes.append(helper.make_node(op, ins, [f"{p}/{out}"], name=f"{p}/{out}", **attrs))
            return f"{p}/{out}"

        n1 = mk("LayerNormalization", [x, weight(f"{p}.ln1", [hidden])], "ln1", axis=-1)
        q = mk("MatMul", [n1, weight(f"{p}.q", [hidden, hidden])], "q")
        k = mk("MatMul", [n1, weight(f"{p}.k", [hidden, hidden])], "k")
        v = mk("MatMul", [n1, weight(f"{p}.v", [hidden, hidden])], "v")
        kt = mk("Transpose", [k], "kt", perm=[0, 2, 1])
        s = mk("MatMul", [q, kt], "scores")
        a = mk("Softmax", [s], "probs", axis=-1)
        ctx = mk("MatMul", [a, v], "ctx")
        o = mk("MatMul", [ctx, weight(f"{p}.o", [hidden, hidden])], "o")
        r1 = mk("Add", [x, o], "res1")
        n2 = mk("LayerNormalization", [r1, weight(f"{p}.ln2", [hidden])], "ln2", axis=-1)
        g = mk("MatMul", [n2, weight(f"{p}.gate", [hidden, ffn])], "gate")
        sg = mk("Sigmoid", [g], "sig")
        silu = mk("Mul", [g, sg], "silu")
        u = mk("MatMul", [n2, weight(f"{p}.up", [hidden, ffn])], "up")
        gu = mk("Mul", [silu, u], "gu")
        d = mk("MatMul", [gu, weight(f"{p}.down", [ffn, hidden])], "down")
        x = mk("Add", [r1, d], "res2")
    graph = helper.make_graph(
        nodes,
        "llama_like",
        [helper.make_tensor_value_info("hidden_in", TensorProto.FLOAT, ["batch", "seq", hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "seq", hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with open(os.path.join(folder, data_name), "wb") as fh:
        fh.truncate(offset)  # sparse: the size is real, the disk blocks are not
    path = os.path.join(folder, "llama.onnx")
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
    return path


def report(title: str, path: str, labels: list[str], rounds: int) -> None:
    best: dict[str, dict[str, float]] = {}
    for _ in range(rounds):
        for label in labels:  # alternating: peer and ours in every round
            r = measure(label, path)
            if "error" in r:
                best.setdefault(label, r)
                continue
            if label not in best or "error" in best[label] or r["seconds"] < best[label]["seconds"]:
                best[label] = r
    print(title)
    for label in labels:
        r = best[label]
        if "error" in r:
            print(f"  {label:38s} failed: {r['error'][:150]}")
            continue
        extra = f"   exit {r['exit']}" if "exit" in r else ""
        print(
            f"  {label:38s} {r['seconds'] * 1000:9.1f} ms   peak RSS {r['peak_rss_mb']:8.1f} MB{extra}"
        )
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--external-gb", type=float, default=20.0)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-gui", action="store_true")
    parser.add_argument("--only", choices=["single", "external"], default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # The floor: what a one-node model costs (interpreter start, imports, workers).
        tiny = os.path.join(tmp, "tiny.onnx")
        write_single_file(tiny, 64, matmuls=1)
        report(
            "== floor: a one-node model",
            tiny,
            ["onnx.load", "onnxviz open", "onnxviz info", "onnxviz check"],
            args.rounds,
        )
        if args.only in (None, "single"):
            path = write_single_file(os.path.join(tmp, "single.onnx"), int(args.gib * 2**30))
            size = os.path.getsize(path) / 2**30
            report(
                f"== single file, {size:.2f} GiB, 16 MatMuls, weights embedded",
                path,
                [
                    "onnx.load",
                    "onnxviz open",
                    "onnxviz save (edited, streamed)",
                    "onnxviz info",
                    "onnx.checker (path)",
                    "onnxviz check",
                    "onnxviz validate (workers' RSS)",
                ],
                args.rounds,
            )
            os.unlink(path)
        if args.only in (None, "external"):
            path = write_llama_external(tmp, args.external_gb, args.nodes)
            onnx_model = onnx.load(path, load_external_data=False)
            data = os.path.getsize(os.path.join(tmp, "llama.onnx.data")) / 1e9
            labels = [
                "onnx.load (no external data)",
                "onnxviz open + index",
                "onnxviz info",
                "onnx.checker (path)",
                "onnxviz check",
                "onnxviz check --target onnxruntime",
                "onnxviz validate (workers' RSS)",
            ]
            if not args.skip_gui:
                labels.append("onnxviz --screenshot")
            report(
                f"== Llama-shaped, {len(onnx_model.graph.node)} nodes, {data:.1f} GB external (sparse)",
                path,
                labels,
                args.rounds,
            )


if __name__ == "__main__":
    main()
