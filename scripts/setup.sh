#!/usr/bin/env bash
# Create .venv (if missing) and install di with every engine and the dev tools.
# torch is pinned in requirements-dev.txt to the CPU wheel; see DEVELOPING notes in README.
#
# The install runs through uv (pip installs it into the venv first): it downloads and unpacks
# in parallel, about 20 s from an empty venv where pip takes about 90 s, with the same versions.
# uv reads none of pip's configuration, so pip's wheel folders (the CPU build of torch lies in
# one) and constraints are passed on. Where uv cannot run or install, pip does the install.
#
# Both compile every installed module to bytecode (uv only when asked: --compile-bytecode). Where
# PYTHONDONTWRITEBYTECODE is set, as on these machines, Python never writes a .pyc of its own, so
# without them every process of the suite compiled each engine from source at its import (all
# seven engines: about 31 s against 11 s).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi

pip_setting() {
    .venv/bin/python -m pip config get "global.$1" 2>/dev/null || true
}

install_with_uv() {
    .venv/bin/python -m pip install -q uv || return 1
    local options=() links constraint
    for links in ${PIP_FIND_LINKS:-} $(pip_setting find-links); do
        if [ -d "$links" ]; then options+=(--find-links "$links"); fi
    done
    constraint=$(pip_setting constraint)
    if [ -n "$constraint" ] && [ -f "$constraint" ]; then options+=(--constraint "$constraint"); fi
    .venv/bin/python -m uv pip install --quiet --python .venv/bin/python --compile-bytecode "${options[@]}" \
        -r requirements-dev.txt &&
        .venv/bin/python -m uv pip install --quiet --python .venv/bin/python --no-deps -e .
}

install_with_pip() {
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -r requirements-dev.txt
    .venv/bin/python -m pip install -q --no-deps -e .
}

if ! install_with_uv; then
    echo "setup: uv could not install; installing with pip" >&2
    install_with_pip
fi
# di's own modules too (a few seconds; git ignores __pycache__)
.venv/bin/python -m compileall -q di bench >/dev/null
