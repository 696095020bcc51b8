"""Should onnxviz compile its hot loops with a JIT (numba)?  The measurements behind
issue 21's answer, to run again when numba, numpy or the kernels change.

    pip install --no-deps --target /tmp/numbapkgs numba llvmlite   # aside, not a dependency
    PYTHONPATH=src:/tmp/numbapkgs python benchmarks/probe_jit.py [--start] [--families]

Prints, 1 thread, CPU time, medians of alternating rounds:

* the LSTM time loop (batch 4, hidden 256, 64 steps): nn_rnn's numpy loop, the numpy
  product with the gate math compiled, and the whole step compiled (its own product
  loop; a rational tanh, since a compiled libm tanh is scalar and slower than numpy's);
* the product of a QDQ conv (u8 x s8 -> int32, exact) compiled, against OpenBLAS's
  float32 GEMM of the same shape (the float path onnxviz runs now);
* ``--start``: in fresh processes, ``import numba``, then the first call with an empty
  cache (compiling) and with the cache filled (``cache=True``): what a JIT adds to a
  model's first run;
* ``--families``: bench_families' LSTM and LSTM+GRU rows, with the compiled loops in
  place of nn_rnn's and without.

The compiled loops take nn_rnn's loop arguments (the sigmoid gates' columns pre-scaled
by 0.5) and round differently (another tanh, another order of sums): they could serve
only unwatched runs, with a tolerance.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(tempfile.gettempdir(), "onnxviz-probe-jit"))

try:
    from numba import njit
except ImportError:
    njit = None

if njit is not None:
    # error_model="numpy": no ZeroDivisionError check, whose branch stops vectorisation.
    _JIT = {"cache": True, "nogil": True, "error_model": "numpy", "fastmath": {"contract"}}

    @njit(**_JIT)
    def _tanh(x: Any) -> Any:
        # A [13/6] rational approximation on [-9, 9] (tanh is +-1 in float32 beyond):
        # vectorises, unlike the scalar libm call a compiled np.tanh makes.
        x = min(max(x, np.float32(-9.0)), np.float32(9.0))
        x2 = x * x
        p = np.float32(-2.76076847742355e-16)
        p = p * x2 + np.float32(2.00018790482477e-13)
        p = p * x2 + np.float32(-8.60467152213735e-11)
        p = p * x2 + np.float32(5.12229709037114e-08)
        p = p * x2 + np.float32(1.48572235717979e-05)
        p = p * x2 + np.float32(6.37261928875436e-04)
        p = p * x2 + np.float32(4.89352455891786e-03)
        q = np.float32(1.19825839466702e-06)
        q = q * x2 + np.float32(1.18534705686654e-04)
        q = q * x2 + np.float32(2.26843463243900e-03)
        q = q * x2 + np.float32(4.89352518554385e-03)
        return p * x / q

    @njit(**_JIT)
    def _product(h: Any, rt: Any, out: Any) -> None:
        # out = h @ rt, rows of rt read once per call (k outermost).
        for b in range(h.shape[0]):
            out[b, :] = 0
        for k in range(h.shape[1]):
            rk = rt[k]
            for b in range(h.shape[0]):
                hk, ob = h[b, k], out[b]
                for j in range(out.shape[1]):
                    ob[j] += hk * rk[j]

    @njit(**_JIT)
    def _lstm_cell(gates: Any, proj_t: Any, c: Any, y_t: Any) -> None:
        hs = c.shape[1]
        half = np.float32(0.5)
        for b in range(c.shape[0]):
            g, p, cb, yb = gates[b], proj_t[b], c[b], y_t[b]
            for j in range(hs):
                i_g = half * _tanh(g[j] + p[j]) + half
                o_g = half * _tanh(g[hs + j] + p[hs + j]) + half
                f_g = half * _tanh(g[2 * hs + j] + p[2 * hs + j]) + half
                cn = f_g * cb[j] + i_g * _tanh(g[3 * hs + j] + p[3 * hs + j])
                cb[j] = cn
                yb[j] = o_g * _tanh(cn)

    @njit(**_JIT)
    def _lstm_loop(proj: Any, rt: Any, h0: Any, c0: Any, y: Any) -> Any:
        c, h = c0.copy(), h0.copy()
        gates = np.empty((proj.shape[1], proj.shape[2]), np.float32)
        for t in range(proj.shape[0]):
            _product(h, rt, gates)
            _lstm_cell(gates, proj[t], c, y[t])
            h[:] = y[t]
        return h, c

    @njit(**_JIT)
    def _gru_loop(
        proj: Any, r_zr: Any, r_h: Any, rb_zr: Any, rb_h: Any, h0: Any, y: Any, lbr: bool
    ) -> Any:
        hs = r_h.shape[0]
        half = np.float32(0.5)
        h = h0.copy()
        zr = np.empty((h.shape[0], 2 * hs), np.float32)
        ph = np.empty((h.shape[0], hs), np.float32)
        gated = np.empty((h.shape[0], hs), np.float32)
        for t in range(proj.shape[0]):
            _product(h, r_zr, zr)
            for b in range(h.shape[0]):
                for j in range(2 * hs):
                    zr[b, j] = half * _tanh(proj[t, b, j] + zr[b, j] + rb_zr[j]) + half
            if lbr:
                _product(h, r_h, ph)
                for b in range(h.shape[0]):
                    for j in range(hs):
                        ph[b, j] = proj[t, b, 2 * hs + j] + zr[b, hs + j] * (ph[b, j] + rb_h[j])
            else:
                for b in range(h.shape[0]):
                    for j in range(hs):
                        gated[b, j] = zr[b, hs + j] * h[b, j]
                _product(gated, r_h, ph)
                for b in range(h.shape[0]):
                    for j in range(hs):
                        ph[b, j] = proj[t, b, 2 * hs + j] + ph[b, j] + rb_h[j]
            for b in range(h.shape[0]):
                for j in range(hs):
                    z = zr[b, j]
                    v = (np.float32(1) - z) * _tanh(ph[b, j]) + z * h[b, j]
                    y[t, b, j] = v
                    h[b, j] = v
        return h

    @njit(**_JIT)
    def _int_gemm(w: Any, x: Any, out: Any) -> None:
        # out = w @ x for int8 w [M, K] and uint8 x [K, N], exact in int32.
        for m in range(w.shape[0]):
            o = out[m]
            o[:] = 0
            for k in range(w.shape[1]):
                wk, xk = np.int32(w[m, k]), x[k]
                for j in range(x.shape[1]):
                    o[j] += wk * np.int32(xk[j])


def _median_cpu(fns: dict[str, Callable[[], Any]], rounds: int, reps: int) -> dict[str, float]:
    """Seconds per call of each function: median over rounds that run them in turn."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for key, fn in fns.items():
            t0 = time.process_time()
            for _ in range(reps):
                fn()
            times[key].append((time.process_time() - t0) / reps)
    return {k: statistics.median(v) for k, v in times.items()}


def lstm_steps(rounds: int) -> None:
    from onnxviz.runtime.kernels import nn_rnn
    from onnxviz.runtime.kernels.blas import few_rows_matmul

    rng = np.random.default_rng(0)
    steps, batch, hs = 64, 4, 256
    rt = (rng.standard_normal((hs, 4 * hs)) * 0.05).astype(np.float32)
    rt[:, : 3 * hs] *= 0.5  # the loops' convention: sigmoid columns pre-scaled
    proj = rng.standard_normal((steps, batch, 4 * hs)).astype(np.float32)
    proj[:, :, : 3 * hs] *= 0.5
    zeros = np.zeros((batch, hs), np.float32)
    ys = {k: np.empty((steps, batch, hs), np.float32) for k in ("numpy", "cell", "step")}

    def cell() -> None:
        gates = np.empty((batch, 4 * hs), np.float32)
        c, h = zeros.copy(), zeros
        for t in range(steps):
            few_rows_matmul(h, rt, gates)
            _lstm_cell(gates, proj[t], c, ys["cell"][t])
            h = ys["cell"][t]

    got = _median_cpu(
        {
            "numpy": lambda: nn_rnn._lstm_steps(proj, rt, zeros, zeros, ys["numpy"]),
            "cell": cell,
            "step": lambda: _lstm_loop(proj, rt, zeros, zeros, ys["step"]),
        },
        rounds,
        20,
    )
    print(f"LSTM time loop, batch {batch}, hidden {hs}: us per step (max abs diff to numpy)")
    for key, title in (
        ("numpy", "numpy loop (nn_rnn)"),
        ("cell", "numpy product + compiled gate math"),
        ("step", "compiled step (own product loop)"),
    ):
        diff = float(np.abs(ys[key] - ys["numpy"]).max())
        print(f"  {title:40s} {got[key] / steps * 1e6:8.1f} us   ({diff:.2g})")
    gates = np.empty((batch, 4 * hs), np.float32)
    parts = _median_cpu(
        {
            "blas": lambda: few_rows_matmul(zeros + 1, rt, gates),
            "own": lambda: _product(zeros + 1, rt, gates),
        },
        rounds,
        200,
    )
    print(
        f"  the product alone: OpenBLAS {parts['blas'] * 1e6:.1f} us, "
        f"compiled loop {parts['own'] * 1e6:.1f} us"
    )


def int_gemm(rounds: int) -> None:
    rng = np.random.default_rng(1)
    print("QDQ conv product (M, K, N): u8 x s8 -> int32 compiled vs float32 OpenBLAS GEMM")
    for m, k, n in ((32, 288, 3136), (64, 576, 784), (128, 1152, 196), (256, 2304, 49)):
        w = rng.integers(-127, 128, (m, k), dtype=np.int8)
        x = rng.integers(0, 256, (k, n), dtype=np.uint8)
        out = np.empty((m, n), np.int32)
        wf, xf = w.astype(np.float32), x.astype(np.float32)
        fns = {
            "int": lambda w=w, x=x, out=out: _int_gemm(w, x, out),
            "f32": lambda wf=wf, xf=xf: wf @ xf,
        }
        got = _median_cpu(fns, rounds, 5)
        exact = np.array_equal(out, w.astype(np.int64) @ x.astype(np.int64))
        print(
            f"  {str((m, k, n)):18s} compiled int {got['int'] * 1e3:7.3f} ms, "
            f"sgemm {got['f32'] * 1e3:7.3f} ms (exact: {exact})"
        )


_START = """
import time, sys
t0 = time.perf_counter()
import numba
t1 = time.perf_counter()
sys.path.insert(0, {here!r})
import numpy as np, probe_jit as p
t2 = time.perf_counter()
a = np.zeros((4, 4, 32), np.float32); r = np.zeros((8, 32), np.float32)
h = np.zeros((4, 8), np.float32); y = np.zeros((4, 4, 8), np.float32)
p._lstm_loop(a, r, h, h, y)
p._gru_loop(a[:, :, :24], r[:, :16].copy(), r[:, :8].copy(), np.zeros(16, np.float32),
            np.zeros(8, np.float32), h, y, True)
t3 = time.perf_counter()
print(f"{{t1 - t0:.3f}} {{t3 - t2:.3f}}")
"""


def start_costs(runs: int) -> None:
    cache = tempfile.mkdtemp(prefix="onnxviz-probe-jit-")
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    code = _START.format(here=HERE)

    def once() -> tuple[float, float]:
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        imp, first = out.stdout.split()
        return float(imp), float(first)

    imp, first = once()
    print("start, fresh processes (seconds):")
    print(f"  empty cache: import numba {imp:.3f}, first LSTM + GRU calls (compiling) {first:.3f}")
    warm = [once() for _ in range(runs)]
    imp = statistics.median(w[0] for w in warm)
    first = statistics.median(w[1] for w in warm)
    print(
        f"  cache filled: import numba {imp:.3f}, first calls {first:.3f}: "
        f"{imp + first:.3f} added to a model's first run (median of {runs})"
    )
    size = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs
    )  # fmt: skip
    print(f"  cache on disk: {size / 1024:.0f} KB")


def families(rounds: int) -> None:
    sys.path.insert(0, HERE)
    import bench_families
    from onnxviz.runtime.kernels import nn_rnn

    numpy_loops = (nn_rnn._lstm_steps, nn_rnn._gru_steps)

    def rows(m: Any) -> Any:
        # nn_rnn's R^T is a view of a wider array (padded rows): compiled over the view
        # (layout "A") the product loop does not vectorise, over the wide array it does.
        wide = m.base
        if isinstance(wide, np.ndarray) and wide.flags.c_contiguous and wide.shape[0] == len(m):
            return wide
        return np.ascontiguousarray(m)

    def lstm(proj: Any, rt: Any, h: Any, c: Any, y: Any) -> Any:
        if proj.dtype != np.float32:
            return numpy_loops[0](proj, rt, h, c, y)
        h, c = np.ascontiguousarray(h), np.ascontiguousarray(c)
        return _lstm_loop(proj, rows(rt), h, c, y)

    def gru(proj: Any, r_zr: Any, r_h: Any, rb_zr: Any, rb_h: Any, h: Any, y: Any, lbr: bool):
        if proj.dtype != np.float32:
            return numpy_loops[1](proj, r_zr, r_h, rb_zr, rb_h, h, y, lbr)
        h = np.ascontiguousarray(h)
        return _gru_loop(proj, rows(r_zr), rows(r_h), rb_zr, rb_h, h, y, lbr)

    for title, loops in (("numpy loops", numpy_loops), ("compiled loops", (lstm, gru))):
        nn_rnn._lstm_steps, nn_rnn._gru_steps = loops
        print(f"-- {title}")
        bench_families.main(["--rounds", str(rounds), "--models", "lstm,lstm_gru"])
    nn_rnn._lstm_steps, nn_rnn._gru_steps = numpy_loops


def main(argv: list[str]) -> int:
    from threadpoolctl import threadpool_limits

    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--start", action="store_true", help="also time numba's start")
    p.add_argument("--families", action="store_true", help="also run the LSTM/GRU families")
    args = p.parse_args(argv)
    if njit is None:
        print("numba is not importable: see this script's docstring", file=sys.stderr)
        return 1
    import numba

    print(f"numba {numba.__version__}, numpy {np.__version__}; load {os.getloadavg()[0]:.1f}")
    with threadpool_limits(limits=1):
        lstm_steps(args.rounds)
        int_gemm(args.rounds)
        if args.families:
            families(args.rounds)
    if args.start:
        start_costs(3)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
