"""``DifferentiateWith`` apart from one outer engine: concrete calls, outer autograd,
outer ``di`` (every backend differentiating a function that calls ``g``), contexts,
and the errors of calls ``g`` cannot serve."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from extension_support import restored_registries
from mixing_support import DATA, INPUTS, PARAMS, Recorder, X, close, counting_preps, layer, layer_mean, loss, wave

import di
from di.backends.selectors import available_backends

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_JAX = importlib.util.find_spec("jax") is not None


def inner_backends() -> list[di.AbstractBackend]:
    return [*([di.AutoTorch()] if HAS_TORCH else []), *([di.AutoJAX()] if HAS_JAX else []), di.AutoFiniteDiff()]


# --- on concrete values, g is f ------------------------------------------------------------


@pytest.mark.parametrize("inner", inner_backends(), ids=lambda b: type(b).__name__)
def test_on_numpy_values_g_is_f_run_by_its_engine(inner: di.AbstractBackend) -> None:
    f = Recorder(loss)
    g = di.DifferentiateWith(f, inner, di.Constant(DATA))
    value = g(X)
    assert isinstance(value, (np.ndarray, np.generic)) and value.dtype == np.float64
    close(value, loss(X, DATA), 1e-12)
    close(g(X, DATA * 2), loss(X, DATA * 2), 1e-12)
    assert f.libraries == {get_library(inner)}
    close(di.DifferentiateWith(wave, inner)(1.5), wave(np.asarray(1.5)), 1e-12)


def get_library(backend: di.AbstractBackend) -> str:
    return {"AutoTorch": "torch", "AutoJAX": "jax"}.get(type(backend).__name__, "numpy")


def test_called_by_its_own_engine_g_is_f_differentiated_natively() -> None:
    torch = pytest.importorskip("torch")
    f = Recorder(wave)
    g = di.DifferentiateWith(f, di.AutoTorch())
    x = torch.tensor(X, requires_grad=True)
    out = g(x)
    assert out.grad_fn is not None and type(out.grad_fn).__name__ != "BackwardCFunction"  # torch's own graph
    close(torch.func.jacrev(g)(torch.tensor(X)), torch.func.jacrev(wave)(torch.tensor(X)), 1e-12)


# --- outer autograd ---------------------------------------------------------------------------


@pytest.mark.parametrize("inner", [b for b in inner_backends() if not isinstance(b, di.AutoFiniteDiff)], ids=repr)
def test_inside_autograd(inner: di.AbstractBackend) -> None:
    autograd = pytest.importorskip("autograd")
    f = Recorder(loss)
    g = di.DifferentiateWith(f, inner, di.Constant(DATA))
    close(autograd.grad(g)(X), autograd.grad(loss)(X, DATA), 1e-10)
    w = di.DifferentiateWith(wave, inner)
    close(autograd.jacobian(w)(X), autograd.jacobian(wave)(X), 1e-10)
    close(autograd.make_jvp(w)(X)(DATA)[1], autograd.make_jvp(wave)(X)(DATA)[1], 1e-10)
    mean = di.DifferentiateWith(layer_mean, inner, di.Constant(INPUTS))
    close(autograd.grad(mean)(PARAMS), autograd.grad(layer_mean)(PARAMS, INPUTS), 1e-10)
    tree = di.DifferentiateWith(layer, inner, di.Constant(INPUTS))
    close(autograd.grad(lambda p: tree(p)["mean"])(PARAMS), autograd.grad(layer_mean)(PARAMS, INPUTS), 1e-10)
    assert "autograd" not in f.libraries
    with pytest.raises(di.UnsupportedOperatorError, match="inside autograd"):
        autograd.hessian(g)(X)
    with pytest.raises(di.InvalidInputError, match="context 1"):
        autograd.grad(g, 1)(X, DATA)


# --- outer di: every backend differentiating a function that calls g -------------------------


OUTER = [b for b in available_backends() if not isinstance(b, (di.AutoFastest, di.SecondOrder, di.AutoSparse))]


@pytest.mark.parametrize("outer", OUTER, ids=repr)
def test_every_di_backend_differentiates_a_function_calling_g(outer: di.AbstractBackend) -> None:
    def calls_g(x: Any, data: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(g(x, data) * 2.0 + xp.sin(x))

    g = di.DifferentiateWith(loss, di.AutoFiniteDiff(), di.Constant(DATA))

    def native(x: Any, data: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(loss(x, data) * 2.0 + xp.sin(x))

    expected = di.gradient(native, di.AutoFiniteDiff(), X, di.Constant(DATA))
    close(di.gradient(calls_g, outer, X, di.Constant(DATA)), expected, 1e-6, 1e-8)
    w = di.DifferentiateWith(wave, di.AutoFiniteDiff())
    close(di.jacobian(w, outer, X), di.jacobian(wave, di.AutoFiniteDiff(), X), 1e-6, 1e-8)


def test_finite_differences_over_g_give_second_derivatives_that_autodiff_refuses() -> None:
    g = di.DifferentiateWith(loss, di.AutoTorch() if HAS_TORCH else di.AutoFiniteDiff(), di.Constant(DATA))
    expected = di.hessian(loss, di.AutoFiniteDiff(), X, di.Constant(DATA))
    close(di.hessian(g, di.AutoFiniteDiff(), X), expected, 1e-4, 1e-6)
    if HAS_JAX:
        with pytest.raises(di.UnsupportedOperatorError, match="second derivative"):
            di.hessian(g, di.AutoJAX(), X)


# --- contexts ------------------------------------------------------------------------------


def test_new_context_values_at_each_call_and_contexts_without_declaration() -> None:
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff())
    for scale in (1.0, 2.0, 3.0):
        close(g(X, DATA * scale), loss(X, DATA * scale), 1e-12)
        close(
            di.gradient(g, di.AutoFiniteDiff(), X, di.Constant(DATA * scale)),
            di.gradient(loss, di.AutoFiniteDiff(), X, di.Constant(DATA * scale)),
            1e-6,
        )
    scaled = di.DifferentiateWith(lambda x, s: wave(x) * s, di.AutoFiniteDiff(), di.Constant(2.0))
    close(scaled(X), wave(X) * 2.0, 1e-12)
    close(scaled(X, 3.0), wave(X) * 3.0, 1e-12)


def test_a_cache_context_reaches_the_inner_backend() -> None:
    def buffered(x: Any, buffer: Any) -> Any:
        buffer[:] = x * 2.0
        return (buffer**2).sum()

    g = di.DifferentiateWith(buffered, di.AutoFiniteDiff(), di.Cache(np.zeros(4)))
    close(di.gradient(g, di.AutoJAX() if HAS_JAX else di.AutoFiniteDiff(), X), 8.0 * X, 1e-6)


def test_float32_inputs_keep_float32() -> None:
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff(), di.Constant(DATA.astype(np.float32)))
    assert g(X.astype(np.float32)).dtype == np.float32
    if HAS_TORCH:
        import torch

        x = torch.tensor(X, dtype=torch.float32, requires_grad=True)
        g(x).backward()
        assert x.grad is not None and x.grad.dtype == torch.float32


# --- errors ----------------------------------------------------------------------------------


def test_construction_checks_its_arguments() -> None:
    with pytest.raises(di.InvalidInputError, match="callable"):
        di.DifferentiateWith(3.0, di.AutoFiniteDiff())  # type: ignore[arg-type]
    with pytest.raises(di.InvalidInputError, match="selector"):
        di.DifferentiateWith(wave, "finitediff")  # type: ignore[arg-type]
    with pytest.raises(di.InvalidInputError, match="context 1"):
        di.DifferentiateWith(loss, di.AutoFiniteDiff(), DATA)  # type: ignore[arg-type]


def test_a_call_with_other_arguments_than_f_takes_is_refused() -> None:
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff(), di.Constant(DATA))
    with pytest.raises(di.InvalidInputError, match="1 context value"):
        g(X, DATA, DATA)
    with pytest.raises(di.InvalidInputError, match="no array"):
        g({})
    if HAS_JAX:
        import jax

        with pytest.raises(di.InvalidInputError, match="floating"):
            jax.jit(g)(jax.numpy.arange(4))


def test_values_of_an_engine_that_cannot_host_g_are_refused_naming_both() -> None:
    strict = pytest.importorskip("array_api_strict")

    class StrictFamily(di.Family):
        name = "array_api_strict"
        display = "array-api-strict"
        module = "array_api_strict"

        def array_types(self, module: ModuleType) -> tuple[type, ...]:
            return (type(module.asarray([0.0])),)

        def to_numpy(self, value: Any) -> np.ndarray:
            return np.asarray(value)

        def from_numpy(self, array: np.ndarray) -> Any:
            return strict.asarray(array)

        def namespace(self) -> Any:
            return strict

    with restored_registries():
        di.register_family(StrictFamily())
        g = di.DifferentiateWith(wave, di.AutoFiniteDiff())
        with pytest.raises(di.DIError, match=r"array-api-strict arrays, an engine di cannot host it in"):
            g(strict.asarray(X))


def test_values_of_two_engines_are_refused() -> None:
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff())
    with pytest.raises(di.DIError, match="two engines, PyTorch and JAX"):
        g({"a": torch.tensor(X), "b": jnp.asarray(X)}, DATA)
    mixed = di.DifferentiateWith(loss, di.AutoTorch(), di.Constant(torch.tensor(DATA)))  # f's own data: fine
    import jax

    close(jax.grad(mixed)(jnp.asarray(X)), jax.grad(loss)(jnp.asarray(X), jnp.asarray(DATA)), 1e-4, 1e-5)


def test_one_prep_serves_every_call_of_a_signature_inside_autograd() -> None:
    pytest.importorskip("autograd")
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff(), di.Constant(DATA))
    with counting_preps() as counts:
        for shift in range(3):
            close(
                di.gradient(g, di.AutoAutograd(), X + shift),
                di.gradient(loss, di.AutoFiniteDiff(), X + shift, di.Constant(DATA)),
                1e-6,
            )
    assert counts == {"value": 1, "pullback": 1, "pushforward": 0, "jacobian": 0}
