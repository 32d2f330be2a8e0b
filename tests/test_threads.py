"""One prep shared by 8 threads gives the same results as serial calls, on every backend.

A prep is immutable after preparation (docs: design notes, "Thread safety"), so sharing it
across threads must be safe: each thread makes its own calls (200 each; fewer on finite
differences, which evaluate ``f`` many times per call) on its own inputs, all threads
start together, and every result must be bitwise identical to the serial result for the
same input. The parallel speed-up and which engines release the GIL are measured by
``python bench/memory.py --section threads`` and reported in ``docs/reliability.md``; no
test here asserts anything about time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, FAMILIES, as_family, backend_params, compiles, engine_name, evaluates_only, to_numpy

import di

THREADS = 8


def calls_per_thread(backend: Any) -> int:
    """200, or 25 where a call costs milliseconds: finite differences (many evaluations of f),
    eager JAX (which traces f on every call) and eager TensorFlow (an op costs tens of
    microseconds; its jacobian is a reverse pass per output element)."""
    slow = evaluates_only(backend) or (engine_name(backend) in ("jax", "tensorflow") and not compiles(backend))
    return 25 if slow else 200


# Known di defect: torch.func forward mode (jvp, jacfwd) keeps its dual levels in global, not
# thread-local, state, so AutoTorch operators that use it fail when threads share a prep (or just
# run at once). Not strict: a race may, rarely, not show; remove the flag once di serialises them.
TORCH_FORWARD_MODE_THREADS_BUG = False


def _known(backend: Any, operator: str) -> list[Any]:
    if TORCH_FORWARD_MODE_THREADS_BUG and engine_name(backend) == "torch" and operator in ("jacobian", "hvp"):
        reason = "AutoTorch forward mode (torch.func.jvp/jacfwd) is not thread-safe: 'no level exists'"
        return [pytest.mark.xfail(reason=reason, strict=False)]
    return []


def weighted(x, a, c):
    """``sum(a * sin(x)) + c * sum(x**2)`` with a Constant vector ``a`` and a Constant float ``c``."""
    xp = di.array_namespace(x)
    return xp.sum(a * xp.sin(x)) + c * xp.sum(x * x)


def elementwise(x, a, c):
    xp = di.array_namespace(x)
    return a * xp.tanh(x) + c * x


def in_threads(work: Callable[[int, int], Any], threads: int, calls: int) -> list[list[Any]]:
    """``results[t][k] = work(t, k)`` computed by ``threads`` threads started together; any
    exception in a thread is raised here."""
    results: list[list[Any]] = [[None] * calls for _ in range(threads)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def run(t: int) -> None:
        try:
            barrier.wait()
            for k in range(calls):
                results[t][k] = work(t, k)
        except BaseException as err:
            errors.append(err)

    workers = [threading.Thread(target=run, args=(t,), name=f"di-test-{t}") for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert not any(worker.is_alive() for worker in workers), "a thread did not finish"
    if errors:
        raise errors[0]
    return results


def _inputs(n: int, threads: int, calls: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2.0, 2.0, size=(threads, calls, n))


def _assert_identical(threaded: list[list[Any]], serial: list[list[Any]], what: str) -> None:
    for t, (row, expected_row) in enumerate(zip(threaded, serial)):
        for k, (got, expected) in enumerate(zip(row, expected_row)):
            for part, (g, e) in enumerate(zip(got, expected)):
                np.testing.assert_array_equal(g, e, err_msg=f"{what}: thread {t}, call {k}, part {part}")


@pytest.mark.parametrize("backend", backend_params())
def test_one_gradient_prep_shared_by_8_threads(backend: Any) -> None:
    n = 64
    calls = calls_per_thread(backend)
    xs = _inputs(n, THREADS, calls)
    a = di.Constant(np.linspace(-1.0, 1.0, n))
    prep = di.prepare_gradient(weighted, backend, np.zeros(n), a, di.Constant(0.5))

    def work(t: int, k: int) -> tuple[np.ndarray, ...]:
        c = di.Constant(0.25 + 0.01 * t)  # a per-thread float constant: values are never shared state
        y, g = di.value_and_gradient(weighted, prep, backend, xs[t, k], a, c)
        return np.asarray(y), to_numpy(g)

    serial = [[work(t, k) for k in range(calls)] for t in range(THREADS)]
    threaded = in_threads(work, THREADS, calls)
    _assert_identical(threaded, serial, repr(backend))
    # And they are right.
    x, c = xs[3, 7], 0.28
    rtol = 1e-4 if isinstance(backend, di.AutoFiniteDiff) and backend.method == "forward" else 1e-6
    np.testing.assert_allclose(serial[3][7][1], a.value * np.cos(x) + 2 * c * x, rtol=rtol, atol=rtol)


@pytest.mark.parametrize(
    ("backend", "operator"),
    [
        pytest.param(b, op, id=f"{p.id}-{op}", marks=_known(b, op))
        for p, b in zip(backend_params(), BACKENDS)
        for op in ("jacobian", "hvp", "pullback")
    ],
)
def test_jacobian_hvp_and_pullback_preps_shared_by_8_threads(backend: Any, operator: str) -> None:
    n = 16
    calls = max(4, calls_per_thread(backend) // 4)
    xs = _inputs(n, THREADS, calls, seed=1)
    vs = _inputs(n, THREADS, calls, seed=2)
    a, c = di.Constant(np.linspace(0.5, 1.5, n)), di.Constant(0.3)
    zeros, ones = np.zeros(n), np.ones(n)
    if operator == "jacobian":
        prep = di.prepare_jacobian(elementwise, backend, zeros, a, c)
    elif operator == "hvp":
        prep = di.prepare_hvp(weighted, backend, zeros, (ones,), a, c)
    else:
        prep = di.prepare_pullback(elementwise, backend, zeros, (ones,), a, c)

    def work(t: int, k: int) -> tuple[np.ndarray, ...]:
        x, v = xs[t, k], vs[t, k]
        if operator == "jacobian":
            return (to_numpy(di.jacobian(elementwise, prep, backend, x, a, c)),)
        if operator == "hvp":
            return (to_numpy(di.hvp(weighted, prep, backend, x, (v,), a, c)[0]),)
        return (to_numpy(di.pullback(elementwise, prep, backend, x, (v,), a, c)[0]),)

    serial = [[work(t, k) for k in range(calls)] for t in range(THREADS)]
    threaded = in_threads(work, THREADS, calls)
    _assert_identical(threaded, serial, f"{operator} on {backend!r}")


@pytest.mark.parametrize("backend", backend_params())
@pytest.mark.parametrize("family_name", [name for name in FAMILIES if name != "numpy"])
def test_a_prep_for_another_family_shared_by_8_threads(backend: Any, family_name: str) -> None:
    """Results converted back to a torch or jax x's family are the same from threads (gradient, reverse mode)."""
    n = 32
    calls = max(4, calls_per_thread(backend) // 4)
    xs = _inputs(n, THREADS, calls, seed=3)
    a = di.Constant(as_family(np.linspace(-1.0, 1.0, n), family_name))
    c = di.Constant(0.5)
    prep = di.prepare_gradient(weighted, backend, as_family(np.zeros(n), family_name), a, c)
    inputs = [[as_family(xs[t, k], family_name) for k in range(calls)] for t in range(THREADS)]

    def work(t: int, k: int) -> tuple[np.ndarray, ...]:
        g = di.gradient(weighted, prep, backend, inputs[t][k], a, c)
        assert type(g) is type(inputs[t][k])
        return (to_numpy(g),)

    serial = [[work(t, k) for k in range(calls)] for t in range(THREADS)]
    threaded = in_threads(work, THREADS, calls)
    _assert_identical(threaded, serial, f"{backend!r} with {family_name} x")


def test_threads_do_not_see_each_others_mismatch_errors() -> None:
    """A thread using a prep wrongly gets its own error while the others keep getting results."""
    backend = next(b for b in BACKENDS if evaluates_only(b))
    n = 8
    a = di.Constant(np.ones(n))
    prep = di.prepare_gradient(weighted, backend, np.zeros(n), a, di.Constant(0.5))
    xs = _inputs(n, THREADS, 20, seed=4)

    def work(t: int, k: int) -> Any:
        if t % 2:
            try:
                di.gradient(weighted, prep, backend, np.zeros(n + 1), a, di.Constant(0.5))
            except di.PreparationMismatchError as err:
                return ("error", "(9,)" in str(err))
            return ("no error", False)
        return ("ok", to_numpy(di.gradient(weighted, prep, backend, xs[t, k], a, di.Constant(0.5))))

    results = in_threads(work, THREADS, 20)
    for t, row in enumerate(results):
        for k, (kind, value) in enumerate(row):
            if t % 2:
                assert kind == "error" and value, (t, k, kind)
            else:
                expected = np.cos(xs[t, k]) + xs[t, k]
                np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)
