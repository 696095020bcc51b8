"""Conformance report: every ONNX backend node-test case and every light model run
through onnxviz's Session; prints passed / failed / unsupported by op.

    python tools/conformance_report.py               # summary by op + totals
    python tools/conformance_report.py -v            # also each non-passing case
    python tools/conformance_report.py --write-expected tests/runtime/expected_pass.txt
    python tools/conformance_report.py --no-light    # node cases only
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

from onnxviz.runtime.conformance import (
    LIGHT_MODELS,
    CaseResult,
    case_op,
    node_cases,
    run_light_model,
    run_node_case,
    simple_model_cases,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="list non-passing cases")
    parser.add_argument("--no-light", action="store_true", help="skip the light models")
    parser.add_argument("--op", action="append", help="only cases of this op (repeatable)")
    parser.add_argument("--write-expected", metavar="FILE", help="write passing case names")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    results: list[CaseResult] = []
    for case in node_cases():
        if args.op and case_op(case) not in args.op:
            continue
        results.append(run_node_case(case))
    node_seconds = time.perf_counter() - t0
    models: list[CaseResult] = []
    if not args.op:
        models = [run_node_case(case) for case in simple_model_cases()]
    light: list[CaseResult] = []
    if not args.no_light and not args.op:
        for name, rtol, atol in LIGHT_MODELS:
            light.append(run_light_model(name, rtol, atol))

    by_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in results:
        by_op[r.op][r.status] += 1
    statuses = ("pass", "fail", "unsupported", "error")
    print(f"{'op':32s} " + " ".join(f"{s:>11s}" for s in statuses))
    for op in sorted(by_op):
        row = by_op[op]
        print(f"{op:32s} " + " ".join(f"{row.get(s, 0):11d}" for s in statuses))
    totals = {s: sum(1 for r in results if r.status == s) for s in statuses}
    n = len(results)
    print()
    print(
        f"node cases: {n}, "
        + ", ".join(f"{s} {totals[s]}" for s in statuses)
        + f" ({100.0 * totals['pass'] / max(n, 1):.1f}% pass, {node_seconds:.1f} s)"
    )
    if models:
        model_pass = sum(1 for r in models if r.status == "pass")
        print(f"simple model cases: {len(models)}, pass {model_pass}")
    for r in light:
        print(f"light model {r.op:14s} {r.status}{': ' + r.detail if r.detail else ''}")
    if args.verbose:
        print()
        for r in results + models + light:
            if r.status != "pass":
                print(f"{r.status:11s} {r.name}: {r.detail}")
    if args.write_expected:
        names = sorted(r.name for r in results + models + light if r.status == "pass")
        with open(args.write_expected, "w", encoding="utf-8") as fh:
            fh.write(
                "# Conformance cases that pass through the Session (written by\n"
                "# tools/conformance_report.py --write-expected); a regression fails\n"
                "# tests/runtime/test_conformance.py.\n"
            )
            fh.write("\n".join(names) + "\n")
        print(f"wrote {len(names)} names to {args.write_expected}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
