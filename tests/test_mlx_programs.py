"""MLX's programs in detail: the Jacobian's mode chosen at preparation (timed at
equal sizes, eagerly), the bases kept between calls, the compiled function called
with its tangents as arguments of their own, and a compiled prep shared by
threads (MLX traces once per thread; di locks only while a trace runs)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import di
from di.backends.registry import get_adapter

mx = pytest.importorskip("mlx.core")


pytestmark = pytest.mark.usefixtures("mlx_compiling")  # (compilation is off elsewhere in the suite)


EAGER, COMPILED = di.AutoMLX(), di.AutoMLX(compile=True)


def cubic(x: Any) -> Any:
    xp = di.array_namespace(x)
    return x * x * x - x * xp.sum(x * x) / x.shape[0]


def cubic_jacobian(x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    return np.diag(3 * x**2 - np.sum(x**2) / n) - 2 * np.outer(x, x) / n


def sines(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x)


@pytest.mark.parametrize("forward", [False, True])
def test_an_eager_square_jacobian_times_both_modes_and_says_which_it_chose(
    forward: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From MEASURED_MIN_SIZE elements (256; 8 here, to keep the test fast) an eager
    Jacobian of an f with as many outputs as inputs times reverse and forward mode at
    preparation (the verdict is given here: the test reads no clock) and keeps the
    faster, saying which in prep.info; a smaller x, a compiled prep, an f with aux and
    a non-square Jacobian are not timed, and name their mode and why. The results are
    the Jacobian either way."""
    from di.backends import choosing
    from di.engines.mlx import adapter

    timed: list[int] = []

    def verdict(default: Any, other: Any, at_most: float) -> tuple[bool, float]:
        timed.append(1)
        np.testing.assert_allclose(np.array(other()), np.array(default()), rtol=1e-12)  # (both modes, at x)
        return forward, 0.5 if forward else 1.5

    monkeypatch.setattr(choosing, "faster_of", verdict)
    monkeypatch.setattr(adapter, "MEASURED_MIN_SIZE", 8)
    x = np.random.default_rng(0).uniform(-1.0, 1.0, 8)
    prep = di.prepare_jacobian(cubic, EAGER, x)
    assert len(timed) == 1
    assert prep.info.program.startswith(adapter.JACOBIAN_SPELLINGS[forward])
    assert "timing both at preparation" in prep.info.program
    np.testing.assert_allclose(di.jacobian(cubic, prep, EAGER, x), cubic_jacobian(x), rtol=1e-12, atol=1e-14)
    y, jacobian = di.value_and_jacobian(cubic, prep, EAGER, x)
    np.testing.assert_allclose(jacobian, cubic_jacobian(x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(y, cubic(x), rtol=1e-14)
    timed.clear()
    untimed = {
        "small": di.prepare_jacobian(cubic, EAGER, x[:7]),
        "compiled": di.prepare_jacobian(cubic, COMPILED, x),
        "aux": di.prepare_jacobian(lambda x: (cubic(x), {"n": 1}), EAGER, x, has_aux=True),
        "wide": di.prepare_jacobian(lambda x: cubic(x)[:4], EAGER, x),
        "mode": di.prepare_jacobian(cubic, di.AutoMLX(mode="forward"), x),
    }
    assert not timed
    for name, prep in untimed.items():
        forward_mode = name == "mode"
        assert prep.info.program.startswith(adapter.JACOBIAN_SPELLINGS[forward_mode]), (name, prep.info)
    assert untimed["wide"].info.program.endswith("(x has 8 elements, f(x) 4)")


@pytest.mark.parametrize("backend", [EAGER, COMPILED], ids=["mlx", "mlx-compile"])
def test_jacobian_and_hessian_bases_are_made_once_at_preparation(
    backend: di.AbstractBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The identity matrices a Jacobian or Hessian program pushes or pulls are made
    at preparation and kept (a compiled trace reads them as constants): repeated calls
    make none, and a non-strict call at a new shape makes its own; a basis over
    CACHED_BASIS_MAX elements is not kept."""
    from di.engines.mlx import operators

    made: list[tuple[int, ...]] = []
    basis = operators._basis
    monkeypatch.setattr(operators, "_basis", lambda shape, dtype: made.append(tuple(shape)) or basis(shape, dtype))
    x = mx.array(np.linspace(-1.0, 1.0, 6), dtype=mx.float32)
    jacobian_prep = di.prepare_jacobian(cubic, backend, x, strict=False)
    hessian_prep = di.prepare_hessian(sines, backend, x)
    prepared = len(made)
    assert prepared >= 2
    for _ in range(3):
        np.testing.assert_allclose(
            np.array(di.jacobian(cubic, jacobian_prep, backend, x)), cubic_jacobian(np.array(x)), rtol=1e-5, atol=1e-6
        )
        hessian = np.array(di.hessian(sines, hessian_prep, backend, x))
        np.testing.assert_allclose(
            np.diag(hessian), 2 * np.cos(np.array(x)) - np.array(x) * np.sin(np.array(x)), rtol=1e-5
        )
    assert len(made) == prepared
    wider = mx.array(np.linspace(-1.0, 1.0, 5), dtype=mx.float32)
    np.testing.assert_allclose(
        np.array(di.jacobian(cubic, jacobian_prep, backend, wider)),
        cubic_jacobian(np.array(wider)),
        rtol=1e-5,
        atol=1e-6,
    )
    assert (5,) in made[prepared:]
    monkeypatch.setattr(operators, "CACHED_BASIS_MAX", 35)  # (a 6 x 6 basis is then too large to keep)
    made.clear()
    large = di.prepare_hessian(sines, backend, x)
    for _ in range(2):
        di.hessian(sines, large, backend, x)
    assert len(made) >= 2  # (at preparation, and again by the calls or the compiled trace)


def test_compiled_products_take_their_tangents_as_arguments_and_trace_once() -> None:
    """The compiled function of a pushforward, pullback or hvp takes each tangent
    as an argument of its own (fixed in number by the prep): one tangent or several,
    MLX or NumPy (non-strict), strict or not, each program traces once."""
    maker = get_adapter(COMPILED).maker
    x_np = np.linspace(-1.0, 1.0, 5)
    x, t, s = (mx.array(v, dtype=mx.float32) for v in (x_np, np.cos(x_np), np.sin(x_np)))
    jacobian = cubic_jacobian(x_np)
    for strict in (True, False):
        one = di.prepare_pushforward(cubic, COMPILED, x, (t,), strict=strict)
        two = di.prepare_pullback(cubic, COMPILED, x, (t, s), strict=strict)
        hvp = di.prepare_hvp(sines, COMPILED, x, (t,), strict=strict)
        di.pushforward(cubic, one, COMPILED, x, (t,))
        di.pullback(cubic, two, COMPILED, x, (t, s))
        di.hvp(sines, hvp, COMPILED, x, (t,))
        before = maker.traces
        for scale in (1.0, 2.0, 3.0):
            (product,) = di.pushforward(cubic, one, COMPILED, x, (scale * t,))
            np.testing.assert_allclose(np.array(product), jacobian @ (scale * np.cos(x_np)), rtol=1e-5, atol=1e-6)
            first, second = di.pullback(cubic, two, COMPILED, x, (scale * t, s))
            np.testing.assert_allclose(np.array(first), jacobian.T @ (scale * np.cos(x_np)), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(np.array(second), jacobian.T @ np.sin(x_np), rtol=1e-5, atol=1e-6)
            (curvature,) = di.hvp(sines, hvp, COMPILED, x, (scale * t,))
            hessian = np.diag(2 * np.cos(x_np) - x_np * np.sin(x_np))
            np.testing.assert_allclose(np.array(curvature), hessian @ (scale * np.cos(x_np)), rtol=1e-5, atol=1e-6)
        if not strict:  # (a NumPy tangent: converted, the same compiled function)
            (from_numpy,) = di.pushforward(cubic, one, COMPILED, x, (np.cos(x_np).astype(np.float32),))
            np.testing.assert_allclose(np.array(from_numpy), jacobian @ np.cos(x_np), rtol=1e-5, atol=1e-6)
        assert maker.traces == before


def test_a_compiled_prep_shared_by_threads_gives_the_serial_results() -> None:
    """Threads sharing a compiled prep: MLX keeps compiled functions per thread, so
    each thread traces f once (under di's lock, one trace at a time) and then calls
    the compiled function with no lock; every result equals the serial one."""
    maker = get_adapter(COMPILED).maker
    x_np = np.linspace(-1.0, 1.0, 16)
    x, t = mx.array(x_np, dtype=mx.float32), mx.array(np.cos(x_np), dtype=mx.float32)
    prep = di.prepare_pushforward(cubic, COMPILED, x, (t,))
    gradient_prep = di.prepare_gradient(sines, COMPILED, x)
    scales = [0.5 + 0.1 * k for k in range(8)]
    serial = [np.array(di.pushforward(cubic, prep, COMPILED, x, (k * t,))[0]) for k in scales]
    serial_gradients = [np.array(di.gradient(sines, gradient_prep, COMPILED, k * x)) for k in scales]
    before = maker.traces
    threads, failures = 4, []
    start = threading.Barrier(threads)

    def work() -> None:
        start.wait()
        try:
            for _ in range(20):
                for k, expected, expected_gradient in zip(scales, serial, serial_gradients):
                    np.testing.assert_array_equal(
                        np.array(di.pushforward(cubic, prep, COMPILED, x, (k * t,))[0]), expected
                    )
                    np.testing.assert_array_equal(
                        np.array(di.gradient(sines, gradient_prep, COMPILED, k * x)), expected_gradient
                    )
        except Exception as err:  # (reported by the main thread)
            failures.append(err)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not failures, failures[0]
    assert maker.traces - before <= 2 * threads  # (at most one trace per thread and program)


@pytest.mark.parametrize("mode", [None, "forward"], ids=["reverse", "forward"])
def test_a_plain_eager_jacobian_evaluates_f_once_per_call(mode: str | None) -> None:
    """The plain Jacobian evaluates f only inside its pullbacks (or pushforwards),
    which mx.vmap traces once: no evaluation of f(x) beside them (reverse mode takes
    f(x)'s shape and dtype from the call before, confirmed by the pullbacks). The
    value-and-Jacobian evaluates f(x) for its value."""
    calls: list[int] = []

    def counted(x: Any) -> Any:
        calls.append(1)
        return cubic(x)

    backend = di.AutoMLX(mode=mode)
    x_np = np.linspace(-1.0, 1.0, 6)
    x = mx.array(x_np, dtype=mx.float32)
    prep = di.prepare_jacobian(counted, backend, x)
    di.jacobian(counted, prep, backend, x)
    for scale in (0.5, 2.0):
        calls.clear()
        jacobian = di.jacobian(counted, prep, backend, scale * x)
        assert len(calls) == 1
        np.testing.assert_allclose(np.array(jacobian), cubic_jacobian(scale * x_np), rtol=1e-5, atol=1e-6)
    calls.clear()
    y, jacobian = di.value_and_jacobian(counted, prep, backend, x)
    assert len(calls) == 2
    np.testing.assert_allclose(np.array(y), cubic(x_np), rtol=1e-6)
    np.testing.assert_allclose(np.array(jacobian), cubic_jacobian(x_np), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", [None, "forward"], ids=["reverse", "forward"])
def test_a_plain_eager_jacobian_follows_an_output_of_another_shape_or_dtype(mode: str | None) -> None:
    """An f whose output changes shape or dtype from one call to the next (Python
    control flow, eagerly): each plain Jacobian is that of the call's f, in its
    output's dtype (a pullback of the previous call's shape is refused by MLX, one
    of its dtype is seen, and f(x) is then evaluated for them)."""
    state: dict[str, Any] = {"rows": 6, "dtype": None}

    def switching(x: Any) -> Any:
        y = cubic(x)[: state["rows"]]
        return y if state["dtype"] is None else y.astype(state["dtype"])

    backend = di.AutoMLX(mode=mode)
    x_np = np.linspace(-1.0, 1.0, 6)
    x = mx.array(x_np, dtype=mx.float32)
    prep = di.prepare_jacobian(switching, backend, x)
    for rows, dtype in [(6, None), (4, None), (4, None), (6, mx.float16), (6, None), (1, mx.float16), (6, None)]:
        state["rows"], state["dtype"] = rows, dtype
        jacobian = di.jacobian(switching, prep, backend, x)
        assert jacobian.shape == (rows, 6)
        assert jacobian.dtype == (dtype or mx.float32)
        tolerance = 1e-2 if dtype is not None else 1e-5
        np.testing.assert_allclose(
            np.array(jacobian.astype(mx.float32)), cubic_jacobian(x_np)[:rows], rtol=tolerance, atol=tolerance
        )
