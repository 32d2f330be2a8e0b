"""The one contract every backend keeps, checked on each from one parametrisation.

* A one-element output (shape ``(1,)``, ``(1, 1)``) is a scalar for gradient, hvp
  and hessian; the combined forms return the value as a 0-d array.
* An engine that traces ``f`` refuses an output it did not compute from ``x``
  (``float()``, ``.item()``, a detached scalar, a bare Python float) with
  :class:`di.InvalidOutputError`, never zeros; a constant computed from ``x`` has
  zero derivatives; finite differences, which only evaluate ``f``, take floats.
* Every array leaf of ``aux`` comes back in the caller's family, never a NumPy scalar.
* Results are arrays the caller owns: writable, and not the prep's own memory.
* float32 and float64 preps of one ``f`` alternate freely (JAX scopes x64 per call).
* A compiled program that keeps recompiling warns before it reaches the limit.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, backend_params, engine_name, evaluates_only, refuses_float
from transform_cases import applier

import di
from di.backends.registry import get_adapter
from di.families import get_family
from di.testing import approximates

TRACING = [b for b in BACKENDS if not evaluates_only(b)]
X = np.array([0.5, 1.0, 2.0])
V = np.array([1.0, -1.0, 0.5])


def _family_values(name: str, x: np.ndarray) -> Any:
    if name == "torch":
        torch = pytest.importorskip("torch")
        return torch.from_numpy(x.copy())
    return x.copy()


def _numpy(value: Any) -> np.ndarray:
    return value.detach().numpy() if hasattr(value, "detach") else np.asarray(value)


# --- one-element outputs are scalars ---------------------------------------------------------------


def one_element(shape: tuple[int, ...]) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.reshape(xp.sum(x**2), shape)

    return f


@pytest.mark.parametrize("shape", [(1,), (1, 1)], ids=["1", "1x1"])
@pytest.mark.parametrize("backend", backend_params(BACKENDS))
def test_a_one_element_output_is_a_scalar(backend: Any, shape: tuple[int, ...]) -> None:
    f = one_element(shape)
    np.testing.assert_allclose(di.gradient(f, backend, X), 2 * X, rtol=1e-6)
    y, g = di.value_and_gradient(f, backend, X)
    assert np.shape(y) == () and float(y) == pytest.approx(float(np.sum(X**2)))
    np.testing.assert_allclose(g, 2 * X, rtol=1e-6)
    (hv,) = di.hvp(f, backend, X, (V,))
    np.testing.assert_allclose(hv, 2 * V, rtol=1e-5)
    y, g, h = di.value_gradient_and_hessian(f, backend, X)
    assert np.shape(y) == ()
    np.testing.assert_allclose(h, 2 * np.eye(3), atol=1e-5)


@pytest.mark.parametrize("family", ["numpy", "torch"])
@pytest.mark.parametrize("backend", backend_params(BACKENDS))
def test_the_value_of_value_and_gradient_is_a_0d_array_of_the_callers_family(backend: Any, family: str) -> None:
    x = _family_values(family, X)
    for f in (one_element(()), one_element((1,))):
        y, _ = di.value_and_gradient(f, backend, x)
        assert type(y) is type(x) and tuple(y.shape) == ()
        assert float(y) == pytest.approx(float(np.sum(X**2)))


def test_two_elements_are_still_refused() -> None:
    for backend in BACKENDS:
        with pytest.raises(di.InvalidOutputError, match=r"real scalar.*\(2,\)"):
            di.gradient(lambda x: x[:2] * 1.0, backend, X)


# --- outputs the engine did not compute from x -------------------------------------------------------


def with_float(x: Any) -> Any:
    return float(di.array_namespace(x).sum(x**2))


def with_item(x: Any) -> Any:
    return di.array_namespace(x).sum(x**2).item()


def python_constant(x: Any) -> Any:
    return 1.5


def constant_from_x(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x) * 0 + 1.5


def _detach(backend: Any) -> Callable[[Any], Any]:
    """The engine's own way of cutting a value off its trace."""
    if isinstance(backend, di.AutoJAX):
        return importlib.import_module("jax").lax.stop_gradient
    if isinstance(backend, di.AutoTorch):
        return lambda y: y.detach()
    if isinstance(backend, di.AutoTensorFlow):
        return importlib.import_module("tensorflow").stop_gradient
    if isinstance(backend, di.AutoMLX):
        return importlib.import_module("mlx.core").stop_gradient
    if isinstance(backend, di.AutoPyTensor):
        return importlib.import_module("pytensor.gradient").disconnected_grad
    return importlib.import_module("autograd.tracer").getval


UNTRACED = {"float()": with_float, ".item()": with_item, "Python float": python_constant}


@pytest.mark.parametrize("kind", sorted(UNTRACED))
@pytest.mark.parametrize("backend", backend_params(TRACING))
def test_a_tracing_engine_refuses_what_it_did_not_compute_from_x(backend: Any, kind: str) -> None:
    f = UNTRACED[kind]
    for call in (
        lambda: di.gradient(f, backend, X),
        lambda: di.value_and_gradient(f, backend, X),
        lambda: di.hessian(f, backend, X),
        lambda: di.hvp(f, backend, X, (V,)),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch warns about float() on a tensor requiring grad
            with pytest.raises(di.InvalidOutputError) as info:
                call()
        message = str(info.value)
        assert "float()" in message and ".item()" in message, message
        assert "xp.sum(x) * 0 + c" in message, message


# MLX's arrays do not record whether they were computed from x: a stop_gradient'ed output is
# an array like any other (MLX's own grad gives zeros for it).
@pytest.mark.parametrize("backend", backend_params([b for b in TRACING if engine_name(b) != "mlx"]))
def test_a_detached_scalar_is_refused(backend: Any) -> None:
    detach = _detach(backend)

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return detach(xp.sum(x**2))

    for operator in (di.gradient, di.hessian):
        with pytest.raises(di.InvalidOutputError, match="not computed from x"):
            operator(f, backend, X)


# Eager torch lets float() through: an output that also depends on x directly then misses
# the float's share of the derivative, which no check can see (compiled.md says so).
@pytest.mark.parametrize("backend", backend_params([b for b in TRACING if refuses_float(b)]))
def test_float_inside_a_jacobian_is_refused(backend: Any) -> None:
    def f(x: Any) -> Any:
        return x * float(di.array_namespace(x).sum(x**2))

    with pytest.raises(di.InvalidOutputError, match=r"float\(\)"):
        di.jacobian(f, backend, X)


def constant_vector_from_x(x: Any) -> Any:
    # its tangents do not depend on x's: a batched jacobian gets an unbatched zero output
    xp = di.array_namespace(x)
    return xp.ones_like(x) * 1.5


@pytest.mark.parametrize("backend", backend_params(BACKENDS))
def test_a_constant_computed_from_x_has_zero_derivatives(backend: Any) -> None:
    np.testing.assert_array_equal(di.gradient(constant_from_x, backend, X), np.zeros(3))
    np.testing.assert_array_equal(di.hessian(constant_from_x, backend, X), np.zeros((3, 3)))
    y, g = di.value_and_gradient(constant_from_x, backend, X)
    assert float(y) == 1.5 and not g.any()
    # ones_like is untraced there: refused as cut off (test_engine_refusals, test_torch_graph)
    if isinstance(backend, (di.AutoAutograd, di.AutoTorch)):
        with pytest.raises(di.InvalidOutputError, match="not computed from x"):
            di.jacobian(constant_vector_from_x, backend, X)
        return
    np.testing.assert_array_equal(di.jacobian(constant_vector_from_x, backend, X), np.zeros((3, 3)))
    y, jac = di.value_and_jacobian(constant_vector_from_x, backend, X)
    np.testing.assert_array_equal(y, np.full(3, 1.5))
    np.testing.assert_array_equal(jac, np.zeros((3, 3)))


def test_finite_differences_take_python_floats() -> None:
    backend = di.AutoFiniteDiff()
    np.testing.assert_allclose(di.gradient(with_float, backend, X), 2 * X, rtol=1e-7)
    np.testing.assert_array_equal(di.gradient(python_constant, backend, X), np.zeros(3))
    np.testing.assert_array_equal(di.hessian(python_constant, backend, X), np.zeros((3, 3)))


def _computing_in(dtype_name: str, power: int) -> Callable[[Any], Any]:
    """``sum(x**power)`` (``x**power`` when ``power`` is negative: ``-power``)
    computed and returned in a coarser float than x's."""

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        y = xp.astype(x, getattr(xp, dtype_name)) ** abs(power)
        return xp.sum(y) if power > 0 else y

    return f


@pytest.mark.parametrize(("dtype_name", "rtol"), [("float32", 2e-3), ("float16", 3e-2)])
@pytest.mark.parametrize("method", ["central", "forward"])
def test_finite_difference_steps_follow_the_precision_of_f(dtype_name: str, rtol: float, method: str) -> None:
    """An f computing in float32 or float16 gets steps for its precision: float64's
    steps differenced away float32's digits (gradient of sum(x**2) at [1, 2, 3]:
    [2.05, 4.02, 5.99]; in float16, zeros), prepared calls and unprepared alike."""
    backend = di.AutoFiniteDiff(method=method)
    rtol *= 1 if method == "central" else 3  # forward differences: first-order accurate
    x = np.array([1.0, 2.0, 3.0])
    square_sum, squares = _computing_in(dtype_name, 2), _computing_in(dtype_name, -2)
    cube = _computing_in(dtype_name, 3)
    prep = di.prepare_gradient(square_sum, backend, x)
    for g in (di.gradient(square_sum, backend, x), di.gradient(square_sum, prep, backend, x)):
        np.testing.assert_allclose(g, 2 * x, rtol=rtol)
    np.testing.assert_allclose(di.jacobian(squares, backend, x), np.diag(2 * x), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(di.pushforward(squares, backend, x, (np.ones(3),))[0], 2 * x, rtol=rtol)
    np.testing.assert_allclose(di.derivative(cube, backend, np.array(1.5)), 3 * 1.5**2, rtol=rtol)
    if method == "central" and dtype_name == "float32":  # second order from first-order differences: float32 only
        np.testing.assert_allclose(di.hessian(square_sum, backend, x), 2 * np.eye(3), atol=1e-2)
        np.testing.assert_allclose(di.hvp(square_sum, backend, x, (np.ones(3),))[0], 2 * np.ones(3), rtol=1e-2)
        np.testing.assert_allclose(di.second_derivative(cube, backend, np.array(1.5)), 6 * 1.5, rtol=1e-2)


def _exp_in(x: Any, precision: str) -> Any:
    xp = di.array_namespace(x)
    y = xp.sum(xp.exp(x))
    return xp.astype(y, xp.float32) if precision == "single" else y


def test_finite_difference_steps_follow_each_calls_precision() -> None:
    """A call's steps follow its own f's output, whatever the calls before it: one
    float32 call left a prep's steps at float32's for good (the hessian of a float64
    f went from 1.3e-7 to 1.8e-4 off), and the steps a prep learned in one thread
    were another thread's."""
    backend, x = di.AutoFiniteDiff(), np.array([0.5, 1.0])
    double, single = di.Constant("double"), di.Constant("single")
    cases = [
        (di.prepare_hessian, di.hessian, lambda r: np.diag(r), ()),
        (di.prepare_hvp, di.hvp, lambda r: r[0], ((np.array([1.0, 1.0]),),)),
        (di.prepare_gradient, di.gradient, lambda r: r, ()),
    ]
    for prepare, operator, read, tangents in cases:
        prep = prepare(_exp_in, backend, x, *tangents, double)
        fresh = read(operator(_exp_in, backend, x, *tangents, double))
        operator(_exp_in, prep, backend, x, *tangents, single)
        after = read(operator(_exp_in, prep, backend, x, *tangents, double))
        np.testing.assert_array_equal(after, fresh)
        np.testing.assert_allclose(after, np.exp(x), rtol=1e-6)
        np.testing.assert_allclose(read(operator(_exp_in, prep, backend, x, *tangents, single)), np.exp(x), rtol=1e-2)

    prep = di.prepare_gradient(_exp_in, backend, x, double)
    results: dict[str, Any] = {}

    def run(precision: str) -> None:
        for _ in range(200):
            results[precision] = di.gradient(_exp_in, prep, backend, x, di.Constant(precision))
            if precision == "double":
                np.testing.assert_allclose(results[precision], np.exp(x), rtol=1e-9)

    threads = [threading.Thread(target=run, args=(p,)) for p in ("double", "single")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    np.testing.assert_allclose(results["double"], np.exp(x), rtol=1e-9)


def test_finite_difference_steps_along_a_tangent_follow_the_coordinates_it_moves() -> None:
    """A pushforward or hvp along one coordinate takes that coordinate's step, as the
    jacobian and hessian do: the step followed the largest |x_i| of all, so at x =
    [1e4, 1] the hvp of sum(sin) along e_2 read -0.6475 (exact -0.8415) and at [1e6, 1]
    -0.0030, the pushforward -0.0201 (exact 0.5403)."""

    def sines(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x))

    def each_sine(x: Any) -> Any:
        return di.array_namespace(x).sin(x)

    second = di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff())
    for x in (np.array([1e4, 1.0]), np.array([1e6, 1.0])):
        along = (np.array([0.0, 1.0]),)
        exact_hvp, exact_tangent = np.array([0.0, -np.sin(1.0)]), np.array([0.0, np.cos(1.0)])
        for backend, rtol in ((di.AutoFiniteDiff(), 1e-6), (second, 1e-4)):
            np.testing.assert_allclose(di.hvp(sines, backend, x, along)[0], exact_hvp, rtol=rtol, atol=1e-6)
        np.testing.assert_allclose(di.pushforward(sines, di.AutoFiniteDiff(), x, along)[0], np.cos(1.0), rtol=1e-8)
        np.testing.assert_allclose(
            di.pushforward(each_sine, di.AutoFiniteDiff(), x, along)[0], exact_tangent, rtol=1e-8, atol=1e-8
        )
    # a tangent moving both coordinates gets both derivatives, with the large one's
    # step (the step the jacobian takes for it; one step serves both, a compromise)
    x, both = np.array([1e4, 1.0]), (np.array([1.0, 1.0]),)
    expected = np.cos(x[0]) + np.cos(x[1])
    np.testing.assert_allclose(di.pushforward(sines, di.AutoFiniteDiff(), x, both)[0], expected, rtol=5e-3)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_finite_difference_pushforward_is_the_central_difference_along_the_tangent(dtype: str) -> None:
    """The pushforward is ``(f(x + h t) - f(x - h t)) / 2h`` to the last bit, with the step
    of :func:`directional_step`; f sees only the two moved points (read-only, never x
    itself), and a zero tangent still asks f for its output's shape at a point it cannot write."""
    from di.engines.finitediff.steps import directional_step, relative_step

    seen: list[Any] = []

    def cubes(x: Any) -> Any:
        seen.append(x)
        return x**3 + di.array_namespace(x).sum(x)

    x = np.array([0.5, -2.0, 3.0, 1e3], dtype=dtype)
    t = np.array([1.0, 0.5, -0.25, 2.0], dtype=dtype)
    backend = di.AutoFiniteDiff()
    prep = di.prepare_pushforward(cubes, backend, x, (t,))
    seen.clear()
    (product,) = di.pushforward(cubes, prep, backend, x, (t,))
    point, tangent = x.astype(np.float64), t.astype(np.float64)
    scale = float(np.abs(tangent).max())
    h = directional_step(relative_step(backend), point, tangent, scale)
    expected = ((cubes(point + h * tangent) - cubes(point - h * tangent)) / (2 * h)).astype(dtype)
    assert product.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(product, expected)
    assert len(seen) == 4 and all(not moved.flags.writeable and moved is not x for moved in seen[:2])

    def writes(x: Any) -> Any:
        x[0] = 5.0
        return x * 2.0

    with pytest.raises(di.InvalidInputError, match=r"f wrote into x in place"):
        di.pushforward(writes, backend, x, (np.zeros_like(t),))
    np.testing.assert_array_equal(x, np.array([0.5, -2.0, 3.0, 1e3], dtype=dtype))


# --- aux ------------------------------------------------------------------------------------------------


def with_aux(x: Any) -> Any:
    xp = di.array_namespace(x)
    y = xp.sum(x**2)
    return y, {"loss": y, "mean": xp.mean(x), "double": 2 * x, "steps": 3, "note": "ok", "scale": 1.5}


@pytest.mark.parametrize("family", ["numpy", "torch"])
@pytest.mark.parametrize("backend", backend_params(BACKENDS))
def test_aux_arrays_come_back_in_the_callers_family(backend: Any, family: str) -> None:
    x = _family_values(family, X)
    _, plain_aux = di.gradient(with_aux, backend, x, has_aux=True)
    (_, combined_aux), _ = di.value_and_gradient(with_aux, backend, x, has_aux=True)
    for aux in (plain_aux, combined_aux):
        for key in ("loss", "mean", "double"):
            assert type(aux[key]) is type(x), (key, type(aux[key]))
        assert tuple(aux["loss"].shape) == () and float(aux["loss"]) == pytest.approx(float(np.sum(X**2)))
        np.testing.assert_allclose(_numpy(aux["double"]), 2 * X)
        assert (aux["steps"], aux["note"], aux["scale"]) == (3, "ok", 1.5)


# --- results belong to the caller ------------------------------------------------------------------------


def cube_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**3)


def sin_times(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sin(x) * x


def curve(t: Any) -> Any:
    xp = di.array_namespace(t)
    return xp.stack([xp.sin(t), t**2])


T = np.array(0.7)
OPERATORS: dict[str, tuple[Any, ...]] = {
    "gradient": (di.prepare_gradient, di.gradient, di.value_and_gradient, cube_sum, X, ()),
    "jacobian": (di.prepare_jacobian, di.jacobian, di.value_and_jacobian, sin_times, X, ()),
    "pushforward": (di.prepare_pushforward, di.pushforward, di.value_and_pushforward, sin_times, X, ((V,),)),
    "pullback": (di.prepare_pullback, di.pullback, di.value_and_pullback, sin_times, X, ((V,),)),
    "derivative": (di.prepare_derivative, di.derivative, di.value_and_derivative, curve, T, ()),
    "hvp": (di.prepare_hvp, di.hvp, di.gradient_and_hvp, cube_sum, X, ((V,),)),
    "hessian": (di.prepare_hessian, di.hessian, di.value_gradient_and_hessian, cube_sum, X, ()),
    "second_derivative": (
        di.prepare_second_derivative,
        di.second_derivative,
        di.value_derivative_and_second_derivative,
        curve,
        T,
        (),
    ),
    "pullback_same_point": (di.prepare_pullback_same_point, di.pullback, di.value_and_pullback, sin_times, X, ((V,),)),
    "hvp_same_point": (di.prepare_hvp_same_point, di.hvp, di.gradient_and_hvp, cube_sum, X, ((V,),)),
}


def _arrays(result: Any) -> Iterator[Any]:
    if isinstance(result, tuple):
        for item in result:
            yield from _arrays(item)
    else:
        yield result


@pytest.mark.parametrize("operator", sorted(OPERATORS))
@pytest.mark.parametrize("backend", backend_params(BACKENDS))
def test_results_are_writable_arrays_the_caller_owns(backend: Any, operator: str) -> None:
    prepare, plain, combined, f, x, extra = OPERATORS[operator]
    prep = prepare(f, backend, x, *extra)
    for call in (plain, combined):
        first = call(f, prep, backend, x, *extra)
        expected = [np.array(a, copy=True) for a in _arrays(first)]
        for array in _arrays(first):
            assert isinstance(array, np.ndarray), type(array)
            array *= 0.5  # the caller's own array: writable
        again = call(f, prep, backend, x, *extra)
        for array, reference in zip(_arrays(again), expected):
            np.testing.assert_array_equal(array, reference)  # the prep's memory was not handed out


# --- float32 and float64 preps of one f ---------------------------------------------------------------------

INDICES = np.array([0, 2, 4, 1, 3])
WEIGHTS = np.array([1 / 3, 1 / 7, 1 / 9, 1 / 11, 1 / 13])
PICKED_WEIGHTS = WEIGHTS[INDICES]


def gathered(x: Any) -> Any:
    """NumPy constants f closes over (int64 indices, float64 weights): JAX cached them
    in the dtype of whichever x64 scope met them first."""
    xp = di.array_namespace(x)
    return xp.sum(x[INDICES] ** 2 * xp.asarray(PICKED_WEIGHTS))


def gathered_vector(x: Any) -> Any:
    xp = di.array_namespace(x)
    return x[INDICES] ** 2 * xp.asarray(PICKED_WEIGHTS, dtype=x.dtype)  # an output of x's dtype


ALTERNATING = {
    "gradient": (di.prepare_gradient, di.gradient, gathered, lambda x: 2 * x * WEIGHTS),
    "jacobian": (di.prepare_jacobian, di.jacobian, gathered_vector, lambda x: np.diag(2 * x * WEIGHTS)[INDICES]),
    "hessian": (di.prepare_hessian, di.hessian, gathered, lambda x: np.diag(2 * WEIGHTS)),
}


# (MLX arrays take no NumPy index arrays: x[INDICES] is refused by MLX itself)
@pytest.mark.parametrize("operator", sorted(ALTERNATING))
@pytest.mark.parametrize("backend", backend_params([b for b in BACKENDS if engine_name(b) != "mlx"]))
def test_float32_and_float64_preps_alternate(backend: Any, operator: str, capfd: pytest.CaptureFixture[str]) -> None:
    prepare, call, f, expected = ALTERNATING[operator]
    x64 = np.linspace(-1.0, 1.0, 5)
    preps: dict[Any, Any] = {}
    for dtype in (np.float64, np.float32, np.float64, np.float32):
        x = x64.astype(dtype)
        if dtype not in preps:
            preps[dtype] = prepare(f, backend, x)
        result = call(f, preps[dtype], backend, x)
        assert result.dtype == dtype
        tolerance = 1e-5 if dtype == np.float32 or approximates(backend) else 1e-12
        np.testing.assert_allclose(result, expected(x64), rtol=tolerance, atol=tolerance)
    assert "ExecutePrepareWithOomRetries" not in capfd.readouterr().err  # XLA's log of a failed run


# --- compiled programs that keep recompiling ----------------------------------------------------------------

CALLS = {"n": 0}


def counting(x: Any, c: Any) -> Any:
    """Bumps a module-level counter: dynamo guards on it and recompiles at each call."""
    CALLS["n"] += 1
    xp = di.array_namespace(x)
    return xp.sum(x**2) * c


@pytest.mark.parametrize("static", [False, True], ids=["traced", "static"])
def test_a_recompiling_program_warns_before_the_limit(static: bool) -> None:
    torch = pytest.importorskip("torch")
    backend = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
    limit = torch._dynamo.config.recompile_limit
    x = torch.ones(3)
    prep = di.prepare_gradient(counting, backend, x, di.Constant(1.0, static=static))
    warned_at = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(di.RecompileLimitError):
            for call in range(1, 2 * limit):
                c = 1.0 + call
                torch.testing.assert_close(
                    di.gradient(counting, prep, backend, x, di.Constant(c, static=static)), 2 * c * x
                )
                if warned_at is None and any(w.category is di.RecompileWarning for w in caught):
                    warned_at = call
    assert warned_at is not None and warned_at < limit, warned_at
    assert any(str(limit) in str(w.message) for w in caught if w.category is di.RecompileWarning)


# --- what the record declares -----------------------------------------------------------------------------------


def _run_inside(transform: str, backend: Any) -> Any:
    """An unprepared gradient inside one of the engine's transforms or modes, and
    the analytic gradient through the same transform (``tests/transform_cases.py``
    applies each one; ``tests/test_transforms_*.py`` run every operator there)."""
    composition = next(c for c in get_adapter(backend).capabilities.compositions if c.transform == transform)
    apply = applier(transform, fullgraph=composition.status("unprepared") == "yes")
    engine = transform.split(".")[0]
    x = {
        "jax": lambda: importlib.import_module("jax.numpy").asarray(X),
        "torch": lambda: _family_values("torch", X),
        "mx": lambda: get_family("mlx").from_numpy(X),
    }
    point = x.get(engine, lambda: X.copy())()
    return apply(lambda x: di.gradient(cube_sum, backend, x), point), apply(lambda x: 3 * x**2, point)


@pytest.mark.parametrize("backend", backend_params([b for b in BACKENDS if get_adapter(b).capabilities.transforms]))
def test_the_declared_transforms_run_a_di_call(backend: Any) -> None:
    for transform in get_adapter(backend).capabilities.transforms:
        result, expected = _run_inside(transform, backend)
        np.testing.assert_allclose(_numpy(result), _numpy(expected), rtol=1e-6, err_msg=transform)
