"""Model diff benchmark (issue #20).

    .venv/bin/python benchmarks/bench_diff.py [--nodes 100000] [--gb 1.0] [--rounds 3]
        [--only structural|weights] [--profile]

1. Two transformer-like models of ``--nodes`` nodes that differ in 1% of their nodes
   (Identity nodes inserted, attributes edited), every name in one of them shuffled and
   its nodes re-sorted: the structural diff's time and peak memory, against opening
   both models (the peer, measured in the same run, rounds alternating).
2. Two ``--gb`` models with external data, 1/16 of their tensors changed: the weight
   diff's time and the memory it adds to opening both.

``--profile``: one more structural diff under cProfile, its top functions by own time
printed (where the time goes, for whoever speeds it up next).

Each measurement runs in a fresh subprocess so its peak RSS (ru_maxrss) is its own.
Times are wall clock and CPU (process time): on a loaded machine the CPU time is the
one that says what the code costs.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import onnx
from onnx import helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from benchmarks.models import transformer_like, write_big_external  # noqa: E402

PRELUDE = textwrap.dedent(
    f"""
    import json, resource, sys, time
    sys.path.insert(0, {ROOT!r})
    from onnxviz.model.document import Document
    def done(**kw):
        kw["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(kw))
    """
)

OPEN_BOTH = """
c = time.process_time(); t = time.perf_counter(); a = Document.open(A); b = Document.open(B)
done(seconds=time.perf_counter() - t, cpu=time.process_time() - c)
"""

DIFF = """
from onnxviz.model.diff import diff
a = Document.open(A); b = Document.open(B)
c = time.process_time(); t = time.perf_counter(); d = diff(a, b); s = time.perf_counter() - t
done(seconds=s, cpu=time.process_time() - c, counts=d.counts())
"""


PROFILE = """
import cProfile, pstats
from onnxviz.model.diff import diff
a = Document.open(A); b = Document.open(B)
prof = cProfile.Profile(); prof.enable(); diff(a, b); prof.disable()
pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
done()
"""


def measure(snippet: str, a: str, b: str) -> dict:
    code = PRELUDE + f"A = {a!r}\nB = {b!r}\n" + snippet
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _shuffle_names_and_order(model: onnx.ModelProto, seed: int) -> None:
    """Rename every value and node, then re-sort the nodes in a random topological
    order (O(n log n): a heap keyed by random priorities)."""
    rnd = random.Random(seed)
    g = model.graph
    names: dict[str, str] = {}

    def new(old: str) -> str:
        if old and old not in names:
            names[old] = f"t{rnd.getrandbits(40):x}_{len(names)}"
        return names.get(old, old)

    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = new(vi.name)
    for t in g.initializer:
        t.name = new(t.name)
    nodes = list(g.node)
    for n in nodes:
        n.name = f"n{rnd.getrandbits(40):x}"
        n.input[:] = [new(x) for x in n.input]
        n.output[:] = [new(x) for x in n.output]
    made = {o: i for i, n in enumerate(nodes) for o in n.output}
    users: list[list[int]] = [[] for _ in nodes]
    pending = [0] * len(nodes)
    for i, n in enumerate(nodes):
        deps = {made[x] for x in n.input if x in made}
        pending[i] = len(deps)
        for d in deps:
            users[d].append(i)
    heap = [(rnd.random(), i) for i in range(len(nodes)) if pending[i] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(heap, (rnd.random(), u))
    copies = [nodes[i] for i in order]
    new_nodes = []
    for n in copies:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        new_nodes.append(c)
    del g.node[:]
    g.node.extend(new_nodes)


def _plant_changes(model: onnx.ModelProto, fraction: float, seed: int) -> int:
    """Insert an Identity after ``fraction``/2 of the nodes and edit an attribute (or
    swap Add for Sub) on as many others; returns how many nodes were touched."""
    rnd = random.Random(seed)
    g = model.graph
    n = len(g.node)
    picks = rnd.sample(range(n), max(2, int(n * fraction)))
    inserted = []
    for k, i in enumerate(picks):
        node = g.node[i]
        if k % 2 == 0 and node.output:
            out = node.output[0]
            fresh = out + "__pre_identity"
            node.output[0] = fresh
            inserted.append(helper.make_node("Identity", [fresh], [out], name=f"planted_{k}"))
        elif node.attribute:
            a = node.attribute[0]
            if a.type == onnx.AttributeProto.INT:
                a.i += 1
            elif a.type == onnx.AttributeProto.FLOAT:
                a.f += 0.5
            else:
                node.doc_string = "planted"
        elif node.op_type == "Add":
            node.op_type = "Sub"
    g.node.extend(inserted)
    return len(picks)


def profile(a: str, b: str) -> None:
    code = PRELUDE + f"A = {a!r}\nB = {b!r}\n" + PROFILE
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    print(out.stderr)


def structural(nodes: int, rounds: int, folder: str, with_profile: bool = False) -> None:
    a_model = transformer_like(nodes)
    b_model = onnx.ModelProto()
    b_model.CopyFrom(a_model)
    touched = _plant_changes(b_model, 0.01, 1)
    _shuffle_names_and_order(b_model, 2)
    a, b = os.path.join(folder, "a.onnx"), os.path.join(folder, "b.onnx")
    onnx.save(a_model, a)
    onnx.save(b_model, b)
    print(f"structural: {len(a_model.graph.node)} nodes, {touched} touched, names shuffled")
    peer, ours = [], []
    for _ in range(rounds):
        peer.append(measure(OPEN_BOTH, a, b))
        ours.append(measure(DIFF, a, b))
    open_s = min(p["seconds"] for p in peer)
    open_mb = min(p["peak_rss_mb"] for p in peer)
    diff_s = min(o["seconds"] for o in ours)
    diff_mb = min(o["peak_rss_mb"] for o in ours)
    open_cpu = min(p["cpu"] for p in peer)
    diff_cpu = min(o["cpu"] for o in ours)
    print(f"  counts            {ours[-1]['counts']}")
    print(f"  open both (peer)  {open_s:.2f} s ({open_cpu:.2f} s CPU), peak {open_mb:.0f} MB")
    print(
        f"  diff              {diff_s:.2f} s ({diff_cpu:.2f} s CPU; target < 3 s), "
        f"ratio to opening {diff_s / open_s:.2f}x"
    )
    print(
        f"  peak with diff    {diff_mb:.0f} MB = {diff_mb / open_mb:.2f}x opening both (target < 1.5x)"
    )
    if with_profile:
        profile(a, b)


def _perturb_external(folder: str, every: int) -> None:
    """Change one tensor in ``every`` of the big model's data file (in place)."""
    model = onnx.load(os.path.join(folder, "big.onnx"), load_external_data=False)
    with open(os.path.join(folder, "big.data"), "r+b") as fh:
        for i, t in enumerate(model.graph.initializer):
            if i % every:
                continue
            info = {e.key: e.value for e in t.external_data}
            fh.seek(int(info["offset"]) + 4 * 1000)
            fh.write(np.full(4096, 7.5, np.float32).tobytes())


WEIGHTS = """
from onnxviz.model.diff import diff
a = Document.open(A); b = Document.open(B)
import resource
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter(); d = diff(a, b); s = time.perf_counter() - t
done(seconds=s, before_mb=before, changed=d.counts()["weights_changed"], compared=d.counts()["weights_compared"])
"""

NUMPY_PEER = """
import numpy as np, os
# the peer: what a plain script does, both data files mapped and compared by numpy
t = time.perf_counter()
fa = np.memmap(os.path.join(os.path.dirname(A), "big.data"), np.float32, "r")
fb = np.memmap(os.path.join(os.path.dirname(B), "big.data"), np.float32, "r")
step = 1 << 22
n = 0
for s in range(0, fa.size, step):
    n += int(np.count_nonzero(fa[s:s + step] != fb[s:s + step]))
done(seconds=time.perf_counter() - t, changed=n)
"""


def weights(gb: float, rounds: int, folder: str) -> None:
    fa, fb = os.path.join(folder, "ea"), os.path.join(folder, "eb")
    a = write_big_external(fa, int(gb * (1 << 30)))
    b = write_big_external(fb, int(gb * (1 << 30)))
    _perturb_external(fb, 16)
    print(f"weights: two {gb:.1f} GB external-data models, 1 tensor in 16 changed")
    ours, peer = [], []
    for _ in range(rounds):
        peer.append(measure(NUMPY_PEER, a, b))
        ours.append(measure(WEIGHTS, a, b))
    best = min(ours, key=lambda o: o["seconds"])
    peer_s = min(p["seconds"] for p in peer)
    peer_mb = min(p["peak_rss_mb"] for p in peer)
    extra = min(o["peak_rss_mb"] - o["before_mb"] for o in ours)
    print(
        f"  weight diff       {best['seconds']:.2f} s (target < 5 s), {best['changed']} of {best['compared']} differ"
    )
    print(f"  extra memory      {extra:.0f} MB over opening both (target < 300 MB)")
    print(
        f"  numpy memmap peer {peer_s:.2f} s, peak {peer_mb:.0f} MB; ratio {best['seconds'] / peer_s:.2f}x"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--gb", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", choices=("structural", "weights"))
    p.add_argument("--profile", action="store_true", help="profile one structural diff")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.only != "weights":
            structural(args.nodes, args.rounds, folder, args.profile)
        if args.only != "structural":
            weights(args.gb, args.rounds, folder)


if __name__ == "__main__":
    main()
