#!/usr/bin/env bash
# Set up (scripts/setup.sh), then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff" && .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "== mypy" && .venv/bin/mypy
# two test workers on two cores: BLAS thread pools that spin-wait would starve each other
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
echo "== pytest" && .venv/bin/python -m pytest -n 2 --dist loadfile "$@"
