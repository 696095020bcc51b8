#!/usr/bin/env bash
# Set up, then run every check headless: lint, format, layer contracts, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export QT_QPA_PLATFORM=offscreen
echo "== ruff (lint)";   .venv/bin/ruff check src tests benchmarks
echo "== ruff (format)"; .venv/bin/ruff format --check src tests benchmarks
echo "== import-linter"; .venv/bin/lint-imports
echo "== mypy";          .venv/bin/mypy
echo "== pytest"
.venv/bin/python -m pytest -n 2 -q -p no:cacheprovider "$@"
# OpenBLAS picks its kernels by CPU: the runtime's numeric tests run again on the AVX2
# kernels (Haswell: most CPUs without AVX-512, Zen too) and the AVX ones (Sandybridge),
# whatever this machine is.
if [ "$#" -eq 0 ]; then
    for core in Haswell Sandybridge; do
        echo "== pytest -m numeric (OPENBLAS_CORETYPE=$core)"
        OPENBLAS_CORETYPE=$core .venv/bin/python -m pytest -n 2 -q -p no:cacheprovider \
            -m numeric tests/runtime
    done
fi
