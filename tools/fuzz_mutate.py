"""Byte-mutation fuzzer for the command line: mutated copies of valid models go through
`onnxviz info --json`, `check --json`, `run --random-inputs --json` and `render`, and every
run must end as the CLI promises (exit 0, 1 or 2 with a sentence or JSON, no traceback, no
"internal error", no signal, within the time limit).

    python tools/fuzz_mutate.py [MODEL ...] [--count 20000] [--seed 1] [--jobs 2]
                                [--out fuzz-findings] [--verbs info,check,run,render]

Mutations: bit flips, cut and duplicated byte runs, overlong varints, corrupted length
prefixes, random bytes.  Each mutant runs in a worker process of a pool (a fresh
interpreter state per process, not per mutant, for speed; a crash or hang kills only that
worker, which is replaced).  Every finding is kept as ``<out>/<verb>-<digest>.onnx`` with a
``.txt`` saying what happened; tests/cli/test_fuzz_findings.py replays the committed ones.
Without MODEL arguments the bundled examples and the exporter corpus are used.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, TimeoutError, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = [
    *sorted((ROOT / "resources" / "examples").glob("*.onnx")),
    *sorted((ROOT / "tests" / "data" / "exporters").glob("*.onnx")),
]
VERB_ARGS = {
    "info": ["--json"],
    "check": ["--json"],
    "run": ["--random-inputs", "--json"],
    "render": ["-o", "{tmp}/out.svg"],
}


# -- mutations ------------------------------------------------------------------------------
def _bit_flips(data: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)


def _cut(data: bytearray, rng: random.Random) -> None:
    i = rng.randrange(len(data))
    del data[i : i + rng.randint(1, 64)]


def _duplicate(data: bytearray, rng: random.Random) -> None:
    i = rng.randrange(len(data))
    run = data[i : i + rng.randint(1, 64)]
    j = rng.randrange(len(data))
    data[j:j] = run


def _overlong_varint(data: bytearray, rng: random.Random) -> None:
    """A byte with the continuation bit clear becomes a run of continuation bytes: a
    varint of 11+ bytes, or one that runs into the next field."""
    i = rng.randrange(len(data))
    data[i : i + 1] = bytes([data[i] | 0x80]) + b"\x80" * rng.randint(1, 10) + b"\x00"


def _length_prefix(data: bytearray, rng: random.Random) -> None:
    """A length-delimited field (wire type 2) gets another length."""
    starts = [i for i in range(len(data) - 1) if data[i] & 7 == 2 and data[i] >> 3 in range(1, 32)]
    if not starts:
        return _bit_flips(data, rng)
    i = rng.choice(starts) + 1
    data[i] = rng.choice([0, 1, 0x7F, data[i] + 1, max(data[i] - 1, 0), 0xFF]) & 0xFF
    return None


def _random_bytes(data: bytearray, rng: random.Random) -> None:
    i = rng.randrange(len(data))
    data[i : i + 4] = bytes(rng.randrange(256) for _ in range(4))


MUTATIONS = [_bit_flips, _cut, _duplicate, _overlong_varint, _length_prefix, _random_bytes]


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if out:
            rng.choice(MUTATIONS)(out, rng)
    return bytes(out)


# -- running ----------------------------------------------------------------------------------
def _run_one(verb: str, blob: bytes, timeout: float) -> tuple[str, int, str]:
    """In a pool worker: run the verb in this process; (outcome, exit code, detail)."""
    import signal

    from onnxviz.cli.main import main

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mutant.onnx")
        with open(path, "wb") as fh:
            fh.write(blob)
        args = [verb, path, *(a.format(tmp=tmp) for a in VERB_ARGS[verb])]
        out, err = io.StringIO(), io.StringIO()

        def alarm(_signum: int, _frame: object) -> None:
            raise TimeoutError(f"no answer in {timeout:.0f} s")

        signal.signal(signal.SIGALRM, alarm)
        signal.alarm(int(timeout))
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(args)
        except TimeoutError as exc:
            return "hang", -1, str(exc)
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
        except BaseException as exc:  # escaped main(): a traceback for a user
            return "exception", -1, f"{type(exc).__name__}: {exc}"
        finally:
            signal.alarm(0)
    text = err.getvalue()
    if code not in (0, 1, 2):
        return "exit", code, text[-500:]
    if "Traceback" in text or "internal error" in text:
        return "internal error", code, text.strip()[-500:]
    if code == 2 and not text.strip():
        return "silent failure", code, ""
    return "ok", code, ""


def _confirm(verb: str, blob: bytes, timeout: float) -> tuple[str, int, str]:
    """The verb on the mutant in a fresh interpreter: a signal or a hang shows here."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mutant.onnx")
        with open(path, "wb") as fh:
            fh.write(blob)
        cmd = [
            sys.executable,
            "-m",
            "onnxviz",
            verb,
            path,
            *(a.format(tmp=tmp) for a in VERB_ARGS[verb]),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return "hang", -1, f"no answer in {timeout:.0f} s"
    text = done.stderr.decode("utf-8", "replace")
    if done.returncode < 0:
        return "crash", done.returncode, f"signal {-done.returncode}"
    if done.returncode not in (0, 1, 2):
        return "exit", done.returncode, text[-500:]
    if "Traceback" in text or "internal error" in text:
        return "internal error", done.returncode, text.strip()[-500:]
    return "ok", done.returncode, ""


def _init_worker() -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import warnings

    warnings.simplefilter("ignore")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="seed models (default: examples + corpus)")
    parser.add_argument("--count", type=int, default=2000, help="mutants in all")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--out", default="fuzz-findings")
    parser.add_argument("--verbs", default="info,check,run,render")
    parser.add_argument("--max-seed-bytes", type=int, default=400_000)
    args = parser.parse_args(argv)
    seeds = [Path(p) for p in args.models] or DEFAULT_MODELS
    seeds = [p for p in seeds if p.stat().st_size <= args.max_seed_bytes]
    verbs = args.verbs.split(",")
    rng = random.Random(args.seed)
    blobs = {p: p.read_bytes() for p in seeds}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    outcomes: Counter[str] = Counter()
    findings: Counter[str] = Counter()
    start = time.time()
    jobs: list[tuple[str, bytes, str]] = []
    for _ in range(args.count):
        seed = rng.choice(seeds)
        jobs.append((rng.choice(verbs), mutate(blobs[seed], rng), seed.name))
    ctx = multiprocessing.get_context("fork")
    pending = list(reversed(jobs))
    while pending:
        batch, pending = pending[-200:], pending[:-200]
        with ProcessPoolExecutor(args.jobs, mp_context=ctx, initializer=_init_worker) as pool:
            futures = {pool.submit(_run_one, v, b, args.timeout): (v, b, s) for v, b, s in batch}
            try:
                for fut in as_completed(futures, timeout=args.timeout * 4 + 60):
                    verb, blob, seed_name = futures[fut]
                    try:
                        outcome, code, detail = fut.result()
                    except BrokenProcessPool:
                        # One worker died and took the pool's other tasks with it: each
                        # is run again alone, in a fresh process, to see which it was.
                        outcome, code, detail = _confirm(verb, blob, args.timeout)
                    outcomes[outcome] += 1
                    if outcome != "ok":
                        digest = hashlib.sha1(blob).hexdigest()[:12]
                        name = f"{verb}-{digest}"
                        (out / f"{name}.onnx").write_bytes(blob)
                        (out / f"{name}.txt").write_text(
                            f"verb: {verb}\nseed: {seed_name}\noutcome: {outcome}\n"
                            f"exit: {code}\n{detail}\n",
                            encoding="utf-8",
                        )
                        findings[
                            f"{outcome}: {detail.splitlines()[-1][:120] if detail else ''}"
                        ] += 1
            except TimeoutError:
                outcomes["hang"] += sum(1 for f in futures if not f.done())
        done = sum(outcomes.values())
        print(f"{done} mutants, {time.time() - start:.0f} s: {dict(outcomes)}", flush=True)
    for what, n in findings.most_common():
        print(f"{n:5d}  {what}")
    return 0 if not findings else 1


if __name__ == "__main__":
    sys.exit(main())
