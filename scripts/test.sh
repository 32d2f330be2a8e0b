#!/usr/bin/env bash
# Set up (scripts/setup.sh), then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff" && .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "== mypy" && .venv/bin/mypy
echo "== pytest" && .venv/bin/python -m pytest -n 2 --dist loadfile "$@"
