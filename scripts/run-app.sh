#!/usr/bin/env bash
# Set up, then start onnxviz (on a bundled example model unless a model is given).
# On a box with no screen the window opens on a virtual one (Xvfb).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh app
if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then
    exec xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/onnxviz "$@"
fi
exec .venv/bin/onnxviz "$@"
