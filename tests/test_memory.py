"""Repeated prepared calls keep no memory: after 10 warm-up calls at n = 1e5, 100 more calls
grow the bytes the C allocator holds by less than a quarter of one result per call (no graph,
cache or compiled program kept per call).

Memory is measured two ways. The first is the bytes the C allocator has handed out and not taken
back (glibc's ``mallinfo2``; the arrays of NumPy, JAX, torch, TensorFlow and MLX all come from it
on the CPU): it sees a leak at once, and its bound is tied to what a call makes, not to the
process's size. A call that kept its own result (n float64 values, 800 kB) would add 80 MB over
the 100 calls; the bound is 20 MB, so a leak of more than 200 kB per call is seen whatever else
the worker holds (``test_a_leak_would_be_seen`` checks that). The second is the resident set size
(``VmRSS``), for memory mapped outside the allocator. It moves by tens of MB with no allocation at
all (pages allocated earlier, touched for the first time; an engine's pools), and it hides a leak
for as long as the allocator has freed pages to hand out again, so it only guards against a leak
of a whole result per call (80 MB). ``python bench/memory.py --section memory`` makes 10,000 calls
and ``docs/reliability.md`` reports its figures. The module reads ``/proc/self/status`` (Linux),
so it is skipped elsewhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, ENGINES, FAMILIES, as_family, backend_params, engine_name, evaluates_only

import di

ROOT = Path(__file__).resolve().parents[1]
STATUS = Path("/proc/self/status")

pytestmark = pytest.mark.skipif(not STATUS.exists(), reason="reads VmRSS from /proc/self/status (Linux)")

N = 100_000
WARMUP = 10
CALLS = 100
RESULT_BYTES = N * 8
LEAK_FRACTION = 0.25  # of one result per call: the smallest per-call leak the bound must see


_MALLINFO2_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2``: ten ``size_t`` counts, in this order."""

    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


def _mallinfo2() -> Any:
    """glibc's ``mallinfo2`` (2.33 and later), or None where the C library has none."""
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    return function


MALLINFO2 = _mallinfo2()


def rss_bytes() -> int:
    """Resident memory of this process, in bytes (``VmRSS``)."""
    for line in STATUS.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def allocated_bytes() -> int:
    """Bytes the C allocator has handed out and not taken back (0 without ``mallinfo2``)."""
    if MALLINFO2 is None:
        return 0
    info = MALLINFO2()
    return int(info.uordblks + info.hblkhd)  # the heap's chunks in use, and the mmap-ed ones


def held_bytes() -> tuple[int, int]:
    """This process's memory, measured both ways: (allocated, resident)."""
    gc.collect()
    return allocated_bytes(), rss_bytes()


def growth_bound(calls: int) -> int:
    """The most allocated memory ``calls`` calls may add: a quarter of one result per call."""
    return int(calls * RESULT_BYTES * LEAK_FRACTION)


def resident_bound(calls: int) -> int:
    """The most resident memory ``calls`` calls may add: one result per call (see the module)."""
    return calls * RESULT_BYTES


def assert_bounded_growth(before: tuple[int, int], after: tuple[int, int], calls: int, what: str) -> None:
    """Neither measure of memory grew by its bound or more (without ``mallinfo2``, the
    allocated measure reads 0 and the resident one alone is checked)."""
    allocated, resident = ((new - old) / 2**20 for old, new in zip(before, after))
    message = (
        f"{what} grew allocated memory by {allocated:+.1f} MB (bound: +{growth_bound(calls) / 2**20:.1f} MB, "
        f"a quarter of a result per call) and resident memory by {resident:+.1f} MB "
        f"(bound: +{resident_bound(calls) / 2**20:.1f} MB, a result per call)"
    )
    assert allocated < growth_bound(calls) / 2**20 and resident < resident_bound(calls) / 2**20, message


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


def _growth(thunks: list[Any], calls: int) -> tuple[tuple[int, int], tuple[int, int]]:
    for k in range(WARMUP):
        for thunk in thunks:
            thunk(k)
    before = held_bytes()
    for k in range(calls):
        for thunk in thunks:
            thunk(k)
    return before, held_bytes()


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
    backend = at_scale(backend)
    before, after = _growth(_thunks(backend, operator), CALLS)
    assert_bounded_growth(before, after, CALLS, f"{CALLS} prepared {operator} calls on {backend!r}")


# (conversions between families are the same whether the engine's programs are compiled or not)
@pytest.mark.parametrize("backend", backend_params([b for b in ENGINES if not evaluates_only(b)]))
@pytest.mark.parametrize("family_name", [name for name in FAMILIES if name != "numpy"])
def test_prepared_calls_on_other_families_keep_no_memory(backend: Any, family_name: str) -> None:
    """Conversions between families (zero-copy or not) keep nothing per call either."""
    backend = at_scale(backend)
    before, after = _growth(_thunks(backend, "gradient", family_name), CALLS)
    assert_bounded_growth(before, after, CALLS, f"{CALLS} calls on {backend!r} with {family_name} x")


@pytest.mark.skipif(MALLINFO2 is None, reason="the C library has no mallinfo2")
def test_a_leak_would_be_seen() -> None:
    """The measurement itself: keeping 30 % of a result per call (100 x 240 kB) is seen, even
    when the allocator has freed pages to hand out again (so resident memory barely moves)."""
    freed = [np.ones(N) for _ in range(200)]
    del freed
    before = held_bytes()
    kept = [np.full(N * 3 // 10, float(k)) for k in range(CALLS)]
    with pytest.raises(AssertionError, match="a quarter of a result per call"):
        assert_bounded_growth(before, held_bytes(), CALLS, "keeping results")
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
