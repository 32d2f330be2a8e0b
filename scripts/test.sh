#!/usr/bin/env bash
# Set up (scripts/setup.sh), then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff" && .venv/bin/ruff check . && .venv/bin/ruff format --check .
# mypy runs beside pytest (about 40 s of one core from a cold cache); its report follows pytest's
mypy_report=$(mktemp)
.venv/bin/mypy >"$mypy_report" 2>&1 &
mypy_pid=$!
# two test workers on two cores: BLAS thread pools that spin-wait would starve each other
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
pytest_status=0
echo "== pytest" && .venv/bin/python -m pytest -n 2 --dist loadfile "$@" || pytest_status=$?
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
echo "== mypy" && cat "$mypy_report" && rm -f "$mypy_report"
exit $((pytest_status != 0 ? pytest_status : mypy_status))
