"""Auxiliary outputs (``has_aux=True``): one evaluation of ``f``, JAX's return
layout, the caller's array family, and clear errors.

The agreement of every operator with analytic references on every backend is
checked by the ``aux`` scenarios of ``di.testing`` (tests/test_testing.py runs
the default scenarios on every backend); this module checks what they cannot:
how many times ``f`` runs (calls on eager engines, traces and compilations on
compiled ones), the errors, ``out=``, contexts and wrappers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import (
    BACKENDS,
    ENGINES,
    backend_id,
    backend_params,
    can_write_cache,
    compiles,
    engine_name,
    evaluates_only,
)
from helpers import CompileCounter

import di

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
pytest.importorskip("autograd")

X = np.array([0.5, -1.0, 2.0])
T = (np.array([1.0, 0.5, -0.25]),)


class Counting:
    """``f`` returning ``(y, aux)`` (or ``y``) that counts its calls; a vector or
    scalar output, ``aux`` with an array, a string, an int and ``None``."""

    def __init__(self, scalar: bool, has_aux: bool) -> None:
        self.calls = 0
        self.scalar = scalar
        self.has_aux = has_aux

    def __call__(self, x: Any) -> Any:
        self.calls += 1
        xp = di.array_namespace(x)
        y = xp.sum(xp.sin(x) * x) if self.scalar else xp.sin(x) * x
        if not self.has_aux:
            return y
        return y, {"norm2": xp.sum(x * x), "label": "metrics", "size": 3, "none": None}


# operator -> (scalar output, prepare, plain, value_and, tangents)
OPERATORS: dict[str, tuple[bool, Callable[..., Any], Callable[..., Any], Callable[..., Any], bool]] = {
    "gradient": (True, di.prepare_gradient, di.gradient, di.value_and_gradient, False),
    "jacobian": (False, di.prepare_jacobian, di.jacobian, di.value_and_jacobian, False),
    "pushforward": (False, di.prepare_pushforward, di.pushforward, di.value_and_pushforward, True),
    "pullback": (False, di.prepare_pullback, di.pullback, di.value_and_pullback, True),
}


def calls_per_operator_call(backend: Any, operator: str, has_aux: bool) -> tuple[int, int]:
    """Calls of f made by one prepared plain call and one prepared combined call."""
    scalar, prepare, plain, value_and, takes_tangents = OPERATORS[operator]
    f = Counting(scalar, has_aux)
    tangents = (T,) if takes_tangents else ()
    options = {"has_aux": True} if has_aux else {}
    prep = prepare(f, backend, np.zeros(3), *tangents, **options)
    f.calls = 0
    plain(f, prep, backend, X, *tangents, **options)
    after_plain = f.calls
    value_and(f, prep, backend, X, *tangents, **options)
    return after_plain, f.calls - after_plain


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
@pytest.mark.parametrize("operator", sorted(OPERATORS))
def test_aux_adds_no_evaluation_of_f_on_eager_engines(backend: Any, operator: str) -> None:
    with_aux = calls_per_operator_call(backend, operator, has_aux=True)
    without = calls_per_operator_call(backend, operator, has_aux=False)
    if evaluates_only(backend):
        # central differences need no f(x): a plain call that does not evaluate f at x
        # evaluates it there once for aux (the documented cost of aux on finite differences)
        assert with_aux[0] - without[0] in (0, 1)
        assert with_aux[1] == without[1]
    else:
        assert with_aux == without


@pytest.mark.parametrize("backend", [b for b in ENGINES if not evaluates_only(b)], ids=backend_id)
def test_the_plain_gradient_evaluates_f_once(backend: Any) -> None:
    # a compiled default selector (PyTensor's) applies f once, when each program compiles:
    # the plain one at preparation, the combined one at its first call
    expected = (0, 1) if compiles(backend) else (1, 1)
    assert calls_per_operator_call(backend, "gradient", has_aux=True) == expected


def test_jax_jit_aux_comes_from_the_compiled_program_without_retracing() -> None:
    backend = di.AutoJAX(jit=True)
    f = Counting(True, True)
    prep = di.prepare_gradient(f, backend, np.zeros(3), has_aux=True)
    assert f.calls == 1  # traced once, at preparation
    for scale in (1.0, 2.0, -3.0):
        g, aux = di.gradient(f, prep, backend, scale * X, has_aux=True)
        np.testing.assert_allclose(aux["norm2"], np.sum((scale * X) ** 2))  # this call's values, not stale ones
        np.testing.assert_allclose(g, np.sin(scale * X) + scale * X * np.cos(scale * X))
        assert (aux["label"], aux["size"], aux["none"]) == ("metrics", 3, None)
        assert isinstance(aux["norm2"], np.ndarray)  # numpy in, numpy out
    (y, aux), g = di.value_and_gradient(f, prep, backend, X, has_aux=True)
    assert f.calls == 2  # value_and_gradient's program, traced by its first call
    np.testing.assert_allclose(y, np.sum(np.sin(X) * X))
    np.testing.assert_allclose(aux["norm2"], np.sum(X * X))


def test_jax_jit_aux_of_jax_input_is_a_concrete_jax_array() -> None:
    backend = di.AutoJAX(jit=True)
    f = Counting(True, True)
    x = jax.numpy.asarray(X, dtype=jax.numpy.float32)
    _, aux = di.gradient(f, backend, x, has_aux=True)
    assert isinstance(aux["norm2"], jax.Array) and not isinstance(aux["norm2"], jax.core.Tracer)
    assert aux["norm2"].dtype == jax.numpy.float32


def test_jax_jit_strings_of_aux_follow_the_static_context() -> None:
    def f(x: Any, mode: str) -> Any:
        return (x * x).sum(), {"mode": mode, "first": x[0]}

    backend = di.AutoJAX(jit=True)
    prep = di.prepare_gradient(f, backend, np.zeros(3), di.Constant("a"), has_aux=True)
    for mode in ("a", "b", "a"):
        _, aux = di.gradient(f, prep, backend, X, di.Constant(mode), has_aux=True)
        assert aux["mode"] == mode
        np.testing.assert_allclose(aux["first"], X[0])


def with_metrics(x: Any) -> Any:
    """``Counting`` without the counter: a Python side effect in f makes dynamo
    recompile natively too, so compiled torch is checked by counting compilations."""
    xp = di.array_namespace(x)
    return xp.sin(x) * x, {"norm2": xp.sum(x * x), "label": "metrics", "size": 3, "none": None}


def scalar_with_metrics(x: Any) -> Any:
    y, aux = with_metrics(x)
    return di.array_namespace(x).sum(y), aux


@pytest.mark.parametrize("operator", ["gradient", "pullback", "jacobian"])
def test_torch_compile_aux_is_an_output_of_the_compiled_program(operator: str) -> None:
    counter = CompileCounter()
    backend = di.AutoTorch(compile=True, compile_options={"backend": counter})
    scalar, prepare, plain, _, takes_tangents = OPERATORS[operator]
    f = scalar_with_metrics if scalar else with_metrics
    tangents = (tuple(torch.tensor(t) for t in T),) if takes_tangents else ()
    prep = prepare(f, backend, torch.zeros(3, dtype=torch.float64), *tangents, has_aux=True)
    compiled = counter.count
    for scale in (1.0, 2.0):
        x = torch.tensor(scale * X)
        _, aux = plain(f, prep, backend, x, *tangents, has_aux=True)
        torch.testing.assert_close(aux["norm2"], (x * x).sum())  # this call's values
        assert not aux["norm2"].requires_grad
        assert (aux["label"], aux["size"], aux["none"]) == ("metrics", 3, None)
    assert counter.count == compiled  # no recompilation per call: aux left the program it ran


def test_torch_eager_aux_is_detached() -> None:
    def f(x: Any) -> Any:
        return (x * x).sum(), {"scaled": 2 * x, "note": "n"}

    x = torch.tensor(X)
    (_, aux), g = di.value_and_gradient(f, di.AutoTorch(), x, has_aux=True)
    assert not aux["scaled"].requires_grad and aux["scaled"].grad_fn is None
    torch.testing.assert_close(aux["scaled"], 2 * x)
    torch.testing.assert_close(g, 2 * x)


def test_aux_keeps_the_order_of_f_dicts() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * x), {"zeta": x[0], "alpha": "a", "mid": None}

    for backend in BACKENDS:
        _, aux = di.gradient(f, backend, X, has_aux=True)
        assert list(aux) == ["zeta", "alpha", "mid"], backend


def test_a_call_with_another_has_aux_is_a_mismatch_with_its_own_row() -> None:
    f = Counting(True, True)
    backend = di.AutoFiniteDiff()
    prep = di.prepare_gradient(f, backend, np.zeros(3), has_aux=True)
    with pytest.raises(di.PreparationMismatchError) as raised:
        di.gradient(f, prep, backend, X)
    lines = str(raised.value).splitlines()
    assert any(line.split()[:2] == ["has_aux", "differs"] and "prepared True" in line for line in lines)
    plain_prep = di.prepare_gradient(Counting(True, False), backend, np.zeros(3), strict=False)
    with pytest.raises(di.PreparationMismatchError, match="has_aux"):
        di.gradient(Counting(True, False), plain_prep, backend, X, has_aux=True)  # checked even when not strict


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_f_that_returns_no_pair_under_has_aux_is_refused_naming_what_came_back(backend: Any) -> None:
    with pytest.raises(di.InvalidOutputError, match=r"pair \(y, aux\).*an array of shape \(\)"):
        di.gradient(lambda x: di.array_namespace(x).sum(x * x), backend, X, has_aux=True)
    with pytest.raises(di.InvalidOutputError, match="a tuple of 3 elements"):
        di.jacobian(lambda x: (x, x, x), backend, X, has_aux=True)


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
def test_a_pair_without_has_aux_keeps_the_output_error_and_says_to_pass_it(backend: Any) -> None:
    with pytest.raises(di.InvalidOutputError, match="pass has_aux=True"):
        di.gradient(Counting(True, True), backend, X)


def test_out_receives_the_result_and_aux_is_returned_beside_it() -> None:
    out = np.full(3, 7.0)
    g, aux = di.gradient(Counting(True, True), di.AutoAutograd(), X, out=out, has_aux=True)
    assert g is out
    np.testing.assert_allclose(out, np.sin(X) + X * np.cos(X))
    np.testing.assert_allclose(aux["norm2"], np.sum(X * X))
    (_, aux), g = di.value_and_gradient(Counting(True, True), di.AutoTorch(), X, out=out, has_aux=True)
    assert g is out and aux["label"] == "metrics"


def test_out_is_untouched_when_f_does_not_return_a_pair() -> None:
    out = np.full(3, 7.0)
    with pytest.raises(di.InvalidOutputError):
        di.gradient(lambda x: (x * x).sum(), di.AutoTorch(), X, out=out, has_aux=True)
    np.testing.assert_array_equal(out, np.full(3, 7.0))


@pytest.mark.parametrize("backend", [b for b in ENGINES if can_write_cache(b)], ids=backend_id)
def test_aux_with_a_cache_and_a_constant(backend: Any) -> None:
    def f(x: Any, buf: Any, w: Any) -> Any:
        buf[...] = x * x
        return (w * buf).sum(), {"buffer_sum": buf.sum() * 1.0}

    w = np.array([1.0, 2.0, 3.0])
    g, aux = di.gradient(f, backend, X, di.Cache(np.zeros(3)), di.Constant(w), has_aux=True)
    np.testing.assert_allclose(g, 2 * w * X, rtol=1e-6)
    np.testing.assert_allclose(aux["buffer_sum"], np.sum(X * X))


def test_finite_difference_aux_comes_from_the_unperturbed_point() -> None:
    def f(x: Any) -> Any:
        return (x * x).sum(), {"x": x}  # aux aliases the point, which is perturbed in place

    for backend in (di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")):
        _, aux = di.gradient(f, backend, X, has_aux=True)
        np.testing.assert_array_equal(aux["x"], X)
        (_, aux), _ = di.value_and_jacobian(lambda x: (x * 2, {"x": x}), backend, X, has_aux=True)
        np.testing.assert_array_equal(aux["x"], X)


def test_second_order_first_order_operators_pass_aux_to_the_inner_backend() -> None:
    backend = di.SecondOrder(di.AutoFiniteDiff(), di.AutoTorch())
    g, aux = di.gradient(Counting(True, True), backend, X, has_aux=True)
    np.testing.assert_allclose(g, np.sin(X) + X * np.cos(X))
    np.testing.assert_allclose(aux["norm2"], np.sum(X * X))
    assert isinstance(aux["norm2"], np.ndarray)  # the caller's family, through both engines


def test_pytree_x_with_aux_on_a_flattening_engine() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x["a"])
        return xp.sum(x["a"] * x["a"]) * x["b"], ("tag", x["b"] * 2)

    x = {"a": X, "b": np.array(1.5)}
    for backend in ENGINES:
        g, aux = di.gradient(f, backend, x, has_aux=True)
        np.testing.assert_allclose(g["a"], 2 * X * 1.5, rtol=1e-6)
        assert aux[0] == "tag"
        np.testing.assert_allclose(aux[1], 3.0)


def test_auto_fastest_plans_with_aux_and_compares_the_results_alone() -> None:
    backend = di.AutoFastest(candidates=[di.AutoAutograd(), di.AutoFiniteDiff()], budget_s=0.05)
    f = Counting(True, True)
    prep = di.prepare_gradient(f, backend, X, has_aux=True)
    assert "has_aux" in str(prep.plan)
    assert {row.status for row in prep.plan.rows} <= {"chosen", "slower"}
    g, aux = di.gradient(f, prep, backend, X, has_aux=True)
    np.testing.assert_allclose(g, np.sin(X) + X * np.cos(X), rtol=1e-6)
    assert aux["label"] == "metrics"


def test_auto_sparse_passes_aux_to_the_dense_backend_and_refuses_it_for_sparse_jacobians() -> None:
    backend = di.AutoSparse(di.AutoAutograd())
    g, aux = di.gradient(Counting(True, True), backend, X, has_aux=True)
    np.testing.assert_allclose(g, np.sin(X) + X * np.cos(X))
    np.testing.assert_allclose(aux["norm2"], np.sum(X * X))
    with pytest.raises(di.UnsupportedOperatorError, match="has_aux"):
        di.prepare_jacobian(Counting(False, True), backend, X, has_aux=True)


def _aux_of_x(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x), {"double": 2.0 * x, "x": x, "note": "n"}


@pytest.mark.parametrize(
    "backend",
    [di.AutoTorch(), di.AutoTorch(create_graph=False), di.AutoTorch(compile=True)],
    ids=["eager", "create_graph=False", "compile"],
)
def test_torch_aux_carries_the_callers_graph_exactly_when_the_call_keeps_it(backend: Any) -> None:
    """A call that keeps the caller's graph (x requires grad, create_graph left on,
    grad mode on) returns a differentiable aux, like its value; any other call
    returns it detached. An aux leaf that is x comes back as a copy either way."""
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    prep = di.prepare_gradient(_aux_of_x, backend, x.detach(), has_aux=True)
    g, aux = di.gradient(_aux_of_x, prep, backend, x, has_aux=True)
    torch.testing.assert_close(g.detach(), 2.0 * x.detach())
    assert aux["note"] == "n"
    assert aux["x"] is not x and aux["x"].data_ptr() != x.data_ptr()
    torch.testing.assert_close(aux["x"].detach(), x.detach())
    if backend.create_graph:
        assert aux["double"].requires_grad and aux["x"].requires_grad
        (aux["double"].sum() + aux["x"].sum()).backward()
        torch.testing.assert_close(x.grad, torch.full((3,), 3.0, dtype=torch.float64))
    else:
        assert not aux["double"].requires_grad and not aux["x"].requires_grad
    if not backend.compile:  # (a compiled f guards on the grad mode: no_grad compiles again)
        with torch.no_grad():
            _, aux = di.gradient(_aux_of_x, prep, backend, x, has_aux=True)
        assert not aux["double"].requires_grad and not aux["x"].requires_grad
    _, aux = di.gradient(_aux_of_x, prep, backend, x.detach(), has_aux=True)
    assert not aux["double"].requires_grad and not aux["x"].requires_grad


NUMPY_TRACES = {"pytensor"}
"""The engines whose traced values NumPy's functions compute with (no capability declares it)."""


@pytest.mark.parametrize("backend", [b for b in ENGINES if not evaluates_only(b)], ids=backend_id)
@pytest.mark.parametrize("has_aux", [False, True])
def test_numpy_called_on_a_traced_value_is_named(backend: Any, has_aux: bool) -> None:
    """np.asarray (or a NumPy function) on the traced x: every engine says f called
    NumPy on a value it traces, with or without aux. PyTensor's variables go through
    NumPy (np.sin calls their own sin, np.asarray wraps one variable): it traces them."""

    def f(x: Any) -> Any:
        y = np.sin(np.asarray(x)) if has_aux else np.asarray(x) * 2.0
        return (y, {"n": 1}) if has_aux else y

    if engine_name(backend) in NUMPY_TRACES:
        jacobian = di.jacobian(f, backend, X, has_aux=has_aux)
        expected = np.diag(np.cos(X)) if has_aux else 2.0 * np.eye(X.size)
        np.testing.assert_allclose(jacobian[0] if has_aux else jacobian, expected, rtol=1e-12)
        return
    with pytest.raises(di.InvalidOutputError, match="f called NumPy on a value"):
        di.jacobian(f, backend, X, has_aux=has_aux)


@pytest.mark.parametrize("backend", backend_params())
def test_aux_arrays_keep_the_dtype_f_computes_them_in_at_a_float32_x(backend: Any) -> None:
    """An aux echoing a float32 x, or computed from it, came back float64 from
    AutoFiniteDiff (f is evaluated at a float64 copy of x), float32 from every other
    backend (aux.md: leaves come back with the dtype f computed them in)."""
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    ty = (np.ones(3, dtype=np.float32),)

    def scalar(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * x), {"x": x, "double": 2 * x, "label": "seen"}

    def vector(x: Any) -> Any:
        return x * x, scalar(x)[1]

    calls = {
        "gradient": lambda: di.gradient(scalar, backend, x, has_aux=True)[1],
        "value_and_gradient": lambda: di.value_and_gradient(scalar, backend, x, has_aux=True)[0][1],
        "jacobian": lambda: di.jacobian(vector, backend, x, has_aux=True)[1],
        "value_and_jacobian": lambda: di.value_and_jacobian(vector, backend, x, has_aux=True)[0][1],
        "pushforward": lambda: di.pushforward(vector, backend, x, ty, has_aux=True)[1],
        "pullback": lambda: di.pullback(vector, backend, x, ty, has_aux=True)[1],
    }
    for name, call in calls.items():
        aux = call()
        assert aux["label"] == "seen", name
        for key, expected in (("x", x), ("double", 2 * x)):
            assert isinstance(aux[key], np.ndarray) and aux[key].dtype == np.float32, (name, key, aux[key].dtype)
            np.testing.assert_array_equal(aux[key], expected, err_msg=f"{name} {key}")
        assert not np.shares_memory(aux["x"], x), name


def test_aux_of_the_callers_family_is_returned_as_f_built_it_and_anything_else_is_converted() -> None:
    # a flat dict of the caller's arrays is recognised by their classes after the first
    # call; the classes of containers are never taken for arrays
    from di.backends.aux import aux_converter

    to_caller = aux_converter("numpy", "numpy")
    plain = {"loss": np.ones(2), "parts": [np.ones(1)]}
    assert to_caller(plain) is plain
    assert to_caller(plain) is plain
    scalar = to_caller({"loss": np.float64(0.5)})
    assert scalar["loss"].__class__ is np.ndarray and scalar["loss"] == 0.5
    nested = to_caller({"loss": np.ones(2), "parts": [np.float64(2.0)]})
    assert nested["parts"][0].__class__ is np.ndarray and nested["parts"][0] == 2.0
    inner = to_caller({"loss": np.ones(2), "more": {"n": np.float32(3.0)}})
    assert inner["more"]["n"].__class__ is np.ndarray and inner["more"]["n"].dtype == np.float32


def test_torch_aux_at_a_pytree_x_is_detached_and_never_an_input() -> None:
    def f(p: Any, batch: Any) -> Any:
        loss = (p["w"] ** 2).sum() + (p["b"] * batch).sum()
        return loss, {"loss": 2 * loss, "w": p["w"], "w_view": p["w"][:1], "n": 3}

    params = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.5, 0.25])}
    batch = di.Constant(torch.tensor([3.0, 4.0]))
    prep = di.prepare_gradient(f, di.AutoTorch(), params, batch, has_aux=True)
    for _ in range(2):
        (y, aux), g = di.value_and_gradient(f, prep, di.AutoTorch(), params, batch, has_aux=True)
        torch.testing.assert_close(aux["loss"], 2 * y)
        assert not aux["loss"].requires_grad and aux["loss"].grad_fn is None
        for key in ("w", "w_view"):  # x's own memory comes back as a copy, detached
            assert not aux[key].requires_grad
            assert aux[key].untyped_storage().data_ptr() != params["w"].untyped_storage().data_ptr()
        assert aux["n"] == 3
        torch.testing.assert_close(g["w"], 2 * params["w"])
        torch.testing.assert_close(g["b"], batch.value)


def test_jax_jit_pytree_aux_prep_shared_by_threads_at_its_first_combined_call_traces_once() -> None:
    import threading

    traces = [0]

    def f(p: Any) -> Any:
        traces[0] += 1
        xp = di.array_namespace(p["w"])
        loss = xp.sum(p["w"] ** 2) + xp.sum(p["b"])
        return loss, {"loss": loss}

    backend = di.AutoJAX(jit=True)
    params = {"w": jax.numpy.arange(3.0), "b": jax.numpy.ones(2)}
    prep = di.prepare_gradient(f, backend, params, has_aux=True)  # the plain program, compiled now
    before = traces[0]
    barrier, results = threading.Barrier(8), []

    def work() -> None:
        barrier.wait()
        results.append(di.value_and_gradient(f, prep, backend, params, has_aux=True))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert traces[0] - before == 1  # the combined program, traced and compiled once
    assert len(results) == 8
    for (y, aux), g in results:
        np.testing.assert_allclose(y, 7.0)
        np.testing.assert_allclose(aux["loss"], 7.0)
        np.testing.assert_allclose(g["w"], [0.0, 2.0, 4.0])
        np.testing.assert_allclose(g["b"], [1.0, 1.0])
