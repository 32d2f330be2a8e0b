#!/usr/bin/env bash
# Create .venv (if missing) and install di with every engine and the dev tools.
# torch is pinned in requirements-dev.txt to the CPU wheel; see DEVELOPING notes in README.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt
.venv/bin/python -m pip install -q --no-deps -e .
