#!/usr/bin/env bash
# Set up onnxviz in ./.venv on Debian: system libraries Qt needs, then the package.
#   scripts/setup.sh app    what the GUI needs (Qt libraries for a real window too)
#   scripts/setup.sh test   what the test suite needs (headless Qt, test tools; no exporter:
#                           the tests read the models committed in tests/data/)
#   scripts/setup.sh exporters  the test tools plus torch, scikit-learn and skl2onnx, to
#                           regenerate those models (scripts/make_test_models.py) and run the
#                           benchmarks that export at run time
#   scripts/setup.sh genai  a separate benchmark-time environment, ./.venv-genai, for
#                           onnxruntime-genai's model builder (benchmarks/family_models.py's
#                           llama*_int4 rows run it there): its builder imports a transformers
#                           (5.2 or newer) that optimum-onnx, in ./.venv, does not allow.
#                           Neither is a dependency of onnxviz.
# Installs missing Debian packages when run as root (or with sudo); otherwise prints
# the exact apt-get line to run and stops.
set -euo pipefail
mode="${1:-app}"
cd "$(dirname "$0")/.."

# Qt (PySide6 from PyPI) loads these at run time; a fresh Debian lacks several.
# fonts-dejavu-core: without any font, Qt draws every glyph as a box.
offscreen_pkgs="libgl1 libegl1 libglib2.0-0 libfontconfig1 libfreetype6 libxkbcommon0 libdbus-1-3 libx11-6 fonts-dejavu-core"
window_pkgs="libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-render-util0 libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0"
pkgs="$offscreen_pkgs"
# genai: a venv for a model builder alone (no Qt, no compiled kernels).
if [ "$mode" = genai ]; then pkgs=""; fi
# Debian's python3 needs python3-venv for `-m venv`; another Python (pyenv, ...) has it.
"${PYTHON:-python3}" -c "import ensurepip, venv" 2>/dev/null || pkgs="python3-venv $pkgs"
# The compiled kernels (optional; without them the numpy paths run) need a C compiler
# and the Python headers.
if [ "$mode" != genai ]; then
    command -v cc >/dev/null 2>&1 || pkgs="$pkgs gcc libc6-dev"
    "${PYTHON:-python3}" -c "import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" 2>/dev/null || pkgs="$pkgs python3-dev"
fi
if [ "$mode" = app ]; then
    pkgs="$pkgs $window_pkgs"
    # No screen (a headless box): run the window on a virtual one.
    if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then pkgs="$pkgs xvfb xauth"; fi
fi

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "onnxviz setup: not a Debian system; install the equivalents of:$missing" >&2
        exit 1
    fi
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"; else
        echo "onnxviz setup: missing system packages. Run as root:" >&2
        echo "  apt-get update && apt-get install -y$missing" >&2
        exit 1
    fi
    echo "onnxviz setup: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

PY="${PYTHON:-python3}"
if [ "$mode" = genai ]; then
    if [ ! -x .venv-genai/bin/python ]; then
        "$PY" -m venv .venv-genai
    fi
    .venv-genai/bin/python -m pip install -q --upgrade pip
    # transformers 5.2.0 is the oldest whose names onnxruntime-genai 0.18's builder imports
    # (Qwen3_5ForConditionalGeneration); torch as in `exporters` (the local CPU build).
    .venv-genai/bin/python -m pip install -q "onnxruntime-genai==0.18.0" \
        "transformers>=5.2.0,<6" "torch==2.13.0" onnx onnx-ir onnxruntime tqdm
    exit 0
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if [ "$mode" = test ]; then
    .venv/bin/python -m pip install -q -e ".[test]"
elif [ "$mode" = exporters ]; then
    .venv/bin/python -m pip install -q -e ".[test,exporters]"
    # 2.13.0 is pinned: on this project's machines pip takes a local CPU build of it (no
    # download); from the public index ask for the CPU wheels
    # (--index-url https://download.pytorch.org/whl/cpu), not the CUDA build.
    .venv/bin/python -m pip install -q "torch==2.13.0"
else
    .venv/bin/python -m pip install -q -e ".[ort]"
fi
