#!/usr/bin/env bash
# Set up, then run every check headless: lint, format, layer contracts, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export QT_QPA_PLATFORM=offscreen
# Let Python keep compiled modules (an environment may forbid it): otherwise every pytest
# process, and every CLI or worker process a test starts, compiles onnxviz and rewrites
# the test modules' asserts from source again, 5 s and more a process.
unset PYTHONDONTWRITEBYTECODE
echo "== ruff (lint)";   .venv/bin/ruff check src tests benchmarks
echo "== ruff (format)"; .venv/bin/ruff format --check src tests benchmarks
echo "== import-linter"; .venv/bin/lint-imports
# The whole run (no arguments) types the code beside the numeric reruns below: mypy is
# one core's 30 s from a fresh clone, and those tests time nothing (the main run's UI
# tests do); its report follows the first rerun, and a failure fails the command there.
if [ "$#" -ne 0 ]; then echo "== mypy"; .venv/bin/mypy; fi
echo "== pytest"
.venv/bin/python -m pytest -n 2 -q -p no:cacheprovider "$@"
# OpenBLAS picks its kernels by CPU, and so do our compiled kernels (ONNXVIZ_NATIVE: the
# level they run at): the runtime's numeric tests run again as on the CPUs other than
# this one, both picked alike, whatever this machine is: an AVX2 CPU (Haswell's kernels,
# most CPUs without AVX-512, Zen too; our AVX2 level) and an AVX one (Sandybridge's; our
# plain C level, which no AVX2 means); on an AVX-512 CPU (flags Linux shows only when the
# OS saves those registers) SkylakeX's too, which OpenBLAS picks there by itself but an
# environment with OPENBLAS_CORETYPE set would never test.
if [ "$#" -eq 0 ]; then
    cores="Haswell:avx2 Sandybridge:generic"
    flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
    if [ -n "$flags" ] && (for f in avx512f avx512cd avx512bw avx512dq avx512vl; do
        [[ " $flags " == *" $f "* ]] || exit 1; done); then
        cores="$cores SkylakeX:auto"
    fi
    mkdir -p build
    .venv/bin/mypy >build/mypy.log 2>&1 &
    typing=$!
    report_types() {
        [ -n "$typing" ] || return 0
        echo "== mypy"
        status=0
        wait "$typing" || status=$?
        cat build/mypy.log
        [ "$status" -eq 0 ] || exit "$status"
        typing=""
    }
    # The kernels each OpenBLAS library (numpy's, scipy's) runs, by the names it gives
    # them: a core that picks the ones the main run had (on Zen, Haswell's) would run the
    # same numeric tests on the same code again, 100 s and more of a CI run.
    blas_cores() {
        .venv/bin/python -c "import numpy, scipy.linalg, threadpoolctl
print(' '.join(sorted(i['filepath'].rsplit('/', 1)[-1] + '=' + str(i.get('architecture'))
    for i in threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas')))"
    }
    # The level our kernels run at for ONNXVIZ_NATIVE=$1 here (at most the CPU's).
    native_level() {
        ONNXVIZ_NATIVE=$1 .venv/bin/python -c "from onnxviz.runtime import native
print(native.level())"
    }
    main_cores=$(blas_cores)
    main_level=$(native_level auto)
    for pair in $cores; do
        core=${pair%%:*}
        level=${pair##*:}
        if [ "$(OPENBLAS_CORETYPE=$core blas_cores)" = "$main_cores" ] &&
            [ "$(native_level "$level")" = "$main_level" ]; then
            echo "== pytest -m numeric (OPENBLAS_CORETYPE=$core, ONNXVIZ_NATIVE=$level): the main run's kernels ($main_cores, level $main_level), tested there"
            continue
        fi
        echo "== pytest -m numeric (OPENBLAS_CORETYPE=$core, ONNXVIZ_NATIVE=$level)"
        OPENBLAS_CORETYPE=$core ONNXVIZ_NATIVE=$level .venv/bin/python -m pytest -n 2 -q \
            -p no:cacheprovider -m numeric tests/runtime
        report_types
    done
    # The compiled kernels (onnxviz.runtime.native) are proven against their numpy twins
    # at every level in the run above; this run keeps the numpy paths proven end to end,
    # as on a machine where the kernels were not built.
    echo "== pytest -m numeric (ONNXVIZ_NATIVE=off)"
    ONNXVIZ_NATIVE=off .venv/bin/python -m pytest -n 2 -q -p no:cacheprovider \
        -m numeric tests/runtime
    report_types
fi
