"""Repeated prepared calls keep no memory: after 100 warm-up calls at n = 1e5, more calls
leave the resident set size within 5 % of where it was (no graph, cache or compiled
program kept per call).

The test makes 1,000 more calls (300 on eager JAX, which traces ``f`` on every call);
``python bench/memory.py --section memory`` makes the full 10,000 and
``docs/reliability.md`` reports its figures. Resident memory is read from
``/proc/self/status`` (Linux), so the module is skipped elsewhere.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, ENGINES, FAMILIES, as_family, backend_params, compiles, engine_name, evaluates_only

import di

ROOT = Path(__file__).resolve().parents[1]
STATUS = Path("/proc/self/status")

pytestmark = pytest.mark.skipif(not STATUS.exists(), reason="reads VmRSS from /proc/self/status (Linux)")

N = 100_000
WARMUP = 100
GROWTH = 0.05


def rss_bytes() -> int:
    """Resident memory of this process, in bytes (``VmRSS``)."""
    for line in STATUS.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def calls_after_warmup(backend: Any) -> int:
    if engine_name(backend) == "pytensor":
        return 300  # each call of Numba's compiled function at n = 1e5 takes milliseconds
    return 300 if engine_name(backend) == "jax" and not compiles(backend) else 1000  # eager JAX traces every call


def at_scale(backend: Any) -> Any:
    """The selector that runs n = 1e5: PyTensor's FAST_COMPILE mode, the matrices' (quick to
    compile), computes elementwise ops in Python loops (a second per call here), so its memory is
    measured on PyTensor's default mode, the one that runs at scale."""
    return di.AutoPyTensor() if engine_name(backend) == "pytensor" else backend


def f(x, c):
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x) * c


def g(x, c):
    xp = di.array_namespace(x)
    return xp.tanh(x) * c


def _thunks(backend: Any, operator: str, family_name: str = "numpy") -> list[Any]:
    """Calls taking the call number: prepared, on four x that take turns, values changing."""
    rng = np.random.default_rng(0)
    xs = [as_family(rng.uniform(-1.0, 1.0, N), family_name) for _ in range(4)]
    zeros, v = as_family(np.zeros(N), family_name), as_family(np.ones(N), family_name)
    c = di.Constant(0.5)
    if operator == "gradient":
        prep = di.prepare_gradient(f, backend, zeros, c)
        return [lambda k: di.value_and_gradient(f, prep, backend, xs[k % 4], c)]
    if operator == "hvp":
        prep = di.prepare_hvp(f, backend, zeros, (v,), c)
        return [lambda k: di.hvp(f, prep, backend, xs[k % 4], (v,), c)]
    if operator == "pushforward":
        prep = di.prepare_pushforward(g, backend, zeros, (v,), c)
        return [lambda k: di.pushforward(g, prep, backend, xs[k % 4], (v,), c)]
    prep = di.prepare_pullback(g, backend, zeros, (v,), c)
    return [lambda k: di.pullback(g, prep, backend, xs[k % 4], (v,), c)]


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Any:
    """Torch's intra-op threads spin for milliseconds when the machine's cores are busy (the test
    suite runs in parallel): one thread keeps these calls fast. Memory, not speed, is measured."""
    if not di.AutoTorch().is_installed:
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _growth(thunks: list[Any], calls: int) -> tuple[int, int]:
    for k in range(WARMUP):
        for thunk in thunks:
            thunk(k)
    gc.collect()
    before = rss_bytes()
    for k in range(calls):
        for thunk in thunks:
            thunk(k)
    gc.collect()
    return before, rss_bytes()


def _params() -> list[Any]:
    result = []
    for param, backend in zip(backend_params(), BACKENDS):
        if evaluates_only(backend):
            # A gradient at n = 1e5 costs 2e5 evaluations of f: finite differences run their cheap operators.
            operators = ["pushforward"]
        else:
            operators = ["gradient", "hvp", "pullback"]
        result += [pytest.param(backend, op, id=f"{param.id}-{op}") for op in operators]
    return result


@pytest.mark.parametrize(("backend", "operator"), _params())
def test_prepared_calls_keep_no_memory(backend: Any, operator: str) -> None:
    calls = calls_after_warmup(backend)
    if operator != "gradient":
        calls //= 2
    backend = at_scale(backend)
    before, after = _growth(_thunks(backend, operator), calls)
    assert after <= before * (1 + GROWTH), (
        f"{calls} prepared {operator} calls on {backend!r} grew resident memory from {before / 2**20:.0f} MB "
        f"to {after / 2**20:.0f} MB ({100 * (after - before) / before:+.1f} %)"
    )


# (conversions between families are the same whether the engine's programs are compiled or not)
@pytest.mark.parametrize("backend", backend_params([b for b in ENGINES if not evaluates_only(b)]))
@pytest.mark.parametrize("family_name", [name for name in FAMILIES if name != "numpy"])
def test_prepared_calls_on_other_families_keep_no_memory(backend: Any, family_name: str) -> None:
    """Conversions between families (zero-copy or not) keep nothing per call either."""
    calls = calls_after_warmup(backend) // 2
    backend = at_scale(backend)
    before, after = _growth(_thunks(backend, "gradient", family_name), calls)
    assert after <= before * (1 + GROWTH), (
        f"{calls} calls on {backend!r} with {family_name} x: {before / 2**20:.0f} MB -> {after / 2**20:.0f} MB"
    )


def test_a_leak_would_be_seen() -> None:
    """The measurement itself: keeping every result (1000 x 800 kB) grows memory well past 5 %."""
    kept = []
    before = rss_bytes()
    for k in range(1000):
        kept.append(np.full(N, float(k)))
    assert rss_bytes() > before * (1 + GROWTH)
    del kept


def test_the_benchmark_runs() -> None:
    """``bench/memory.py`` in a few seconds: one cheap backend, few calls, small n."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "memory.py"),
            "--backends",
            "finitediff",
            "--calls",
            "20",
            "--n",
            "1000",
            "--thread-calls",
            "16",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("| finitediff |")]
    assert len(lines) == 2, result.stdout
    memory, threads = (line.split(" | ") for line in lines)
    assert memory[1] == "pushforward" and memory[2].endswith("MB") and memory[5].endswith("%"), memory
    assert threads[1] == "16" and threads[4].endswith("x") and threads[5].rstrip(" |").endswith("%"), threads
