"""One ``di`` error for one mistake on every engine: a write into ``x`` (JAX's
TypeError, autograd's ArrayBox error, a silently wrong finite difference before), a
function of another engine's library on a traced value; the autograd namespace's
matrix norms; torch's checkpoint and custom operators refused with their fix."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, as_family, backend_id, capabilities, to_numpy

import di

X = np.array([0.5, 1.0, 2.0])


def writes_into_x(x: Any) -> Any:
    x[0] = 5.0
    xp = di.array_namespace(x)
    return xp.sum(x**2)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_write_into_x_is_one_di_error_on_every_engine(backend: di.AbstractBackend) -> None:
    x = X.copy()
    if capabilities(backend).x_writes == "own copy":
        # the engine records x[0] = 5.0 as an operation on the array f is given (its own: the
        # caller's is never written), so f is a function of x like any other, with the derivative
        # of what it computes: 0 for the overwritten entry. Nothing to refuse.
        np.testing.assert_allclose(di.gradient(writes_into_x, backend, x), [0.0, 2.0, 4.0])
        np.testing.assert_array_equal(x, X)
        own = as_family(X, capabilities(backend).family)  # x of the engine's own family: not written either
        np.testing.assert_allclose(to_numpy(di.gradient(writes_into_x, backend, own)), [0.0, 2.0, 4.0])
        np.testing.assert_array_equal(to_numpy(own), X)
        return
    assert capabilities(backend).x_writes == "refused"
    with pytest.raises(di.InvalidInputError, match=r"f wrote into x in place") as caught:
        di.gradient(writes_into_x, backend, x)
    assert caught.value.__cause__ is not None or "torch" in repr(backend).lower()  # chained to the engine's own
    np.testing.assert_array_equal(x, X)  # the caller's x is untouched


@pytest.mark.parametrize("operator", ["pushforward", "jacobian", "hessian"])
def test_finite_differences_refuse_a_write_into_x_for_every_operator(operator: str) -> None:
    backend = di.AutoFiniteDiff()
    arguments: tuple[Any, ...] = ((X.copy(),),) if operator == "pushforward" else ()
    f = writes_into_x
    if operator != "hessian":

        def f(x: Any) -> Any:
            x[0] = 5.0
            return x * 2.0

    with pytest.raises(di.InvalidInputError, match=r"f wrote into x in place"):
        getattr(di, operator)(f, backend, X.copy(), *arguments)


@pytest.mark.skipif(importlib.util.find_spec("autograd") is None, reason="autograd is not installed")
@pytest.mark.parametrize("order", ["fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf])
@pytest.mark.parametrize("keepdims", [False, True])
def test_the_autograd_namespace_differentiates_matrix_norms(order: Any, keepdims: bool) -> None:
    x = np.array(
        [[[1.0, 2.0, 0.5], [0.3, -1.0, 4.0], [2.0, 0.1, 1.5]], [[0.2, 1.0, 3.0], [1.0, 1.0, -2.0], [0.0, 2.0, 1.0]]]
    )

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.linalg.matrix_norm(x, ord=order, keepdims=keepdims) ** 2)

    expected = di.gradient(f, di.AutoFiniteDiff(), x)
    np.testing.assert_allclose(di.gradient(f, di.AutoAutograd(), x), expected, rtol=1e-6, atol=1e-8)


def test_torch_functions_in_an_f_run_by_jax_name_the_fix() -> None:
    pytest.importorskip("jax")
    torch = pytest.importorskip("torch")

    def written_for_torch(x: Any) -> Any:
        return torch.sin(x).sum()

    with pytest.raises(di.InvalidOutputError, match=r"another array library") as caught:
        di.gradient(written_for_torch, di.AutoJAX(), X)
    message = str(caught.value)
    assert "di.DifferentiateWith(f, AutoTorch())" in message and "array_namespace" in message
    assert isinstance(caught.value.__cause__, TypeError)


def test_torch_checkpoint_with_reentrant_recomputation_is_refused_with_the_fix() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint

    def f(x: Any) -> Any:
        return checkpoint(lambda x: torch.sin(x) * x, x, use_reentrant=True).sum()

    x = torch.linspace(0.1, 1.0, 4, dtype=torch.float64)
    with pytest.raises(di.UnsupportedOperatorError, match=r"use_reentrant=False"):
        di.gradient(f, di.AutoTorch(), x)

    def fixed(x: Any) -> Any:
        return checkpoint(lambda x: torch.sin(x) * x, x, use_reentrant=False).sum()

    expected = (torch.cos(x) * x + torch.sin(x)).numpy()
    np.testing.assert_allclose(di.gradient(fixed, di.AutoTorch(), x).numpy(), expected, rtol=1e-12)


def test_a_torch_library_custom_operator_gets_its_own_message() -> None:
    torch = pytest.importorskip("torch")

    @torch.library.custom_op("di_tests::sine", mutates_args=(), schema="(Tensor x) -> Tensor")
    def sine(x: Any) -> Any:
        return torch.sin(x)

    @sine.register_fake
    def _(x: Any) -> Any:
        return torch.empty_like(x)

    def setup(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.x = inputs[0]

    sine.register_autograd(lambda ctx, g: g * torch.cos(ctx.x), setup_context=setup)
    x = torch.linspace(0.1, 1.0, 4, dtype=torch.float64)
    f = lambda x: sine(x).sum()
    np.testing.assert_allclose(di.gradient(f, di.AutoTorch(), x).numpy(), torch.cos(x).numpy(), rtol=1e-12)
    # eager torch's second order is double backward (engines/torch/second_order.py), which runs
    # the registered backward formula g * cos(x) under autograd: the Hessian is diag(-sin(x))
    np.testing.assert_allclose(di.hessian(f, di.AutoTorch(), x).numpy(), np.diag(-torch.sin(x).numpy()), rtol=1e-12)
    # eager torch's pushforward at an array x is two reverse passes (the double vjp), which run the
    # registered backward formula: J v = cos(x) v
    (jv,) = di.pushforward(sine, di.AutoTorch(), x, (x,))
    np.testing.assert_allclose(jv.numpy(), (torch.cos(x) * x).numpy(), rtol=1e-12)
    # forward mode has no derivative for it (register_autograd gives a backward only): the error names
    # the custom operator, not the classic autograd.Function, nor an output cut off from x
    for call in (
        lambda: di.jacobian(sine, di.AutoTorch(mode="forward"), x),  # (a square one is reverse mode by default)
        lambda: di.derivative(lambda t: sine(x * t), di.AutoTorch(), torch.tensor(0.5, dtype=torch.float64)),
    ):
        with pytest.raises(di.UnsupportedOperatorError, match=r"custom operator di_tests::sine") as caught:
            call()
        assert "forward(ctx" not in str(caught.value) and "not computed from x" not in str(caught.value)


def test_a_compiled_f_returning_a_pair_without_has_aux_gets_di_error_alone() -> None:
    torch = pytest.importorskip("torch")
    import warnings

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**2), x

    x = torch.linspace(0.1, 1.0, 4, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(di.InvalidOutputError, match=r"pass has_aux=True"):
            di.gradient(f, di.AutoTorch(compile=True, compile_options={"backend": "eager"}), x)
    assert not [w for w in caught if "get_ident" in str(w.message)], [str(w.message)[:80] for w in caught]


def test_a_recompile_for_another_grad_mode_names_the_grad_mode() -> None:
    torch = pytest.importorskip("torch")
    import warnings

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x) ** 2)

    backend = di.AutoTorch(compile=True)
    x = torch.linspace(0.1, 1.0, 4, dtype=torch.float64)
    prep = di.prepare_gradient(f, backend, x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = di.gradient(f, prep, backend, x).detach().numpy()
        with torch.no_grad():
            di.gradient(f, prep, backend, x)
        with torch.inference_mode():
            got = di.gradient(f, prep, backend, x).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    messages = [str(w.message) for w in caught if issubclass(w.category, di.RecompileWarning)]
    assert messages and all("grad mode changed" in message for message in messages), messages
    assert not any("Keep such side effects out of f" in message for message in messages)


def test_array_namespace_under_torch_compile_prints_no_dynamo_lru_cache_warning() -> None:
    """array-api-compat's namespace lookup goes through lru_cache'd helpers, which
    dynamo warns about once per process when it traces them (a fresh process here)."""
    pytest.importorskip("torch")
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import warnings, torch, di
        def f(x):
            xp = di.array_namespace(x)
            return xp.sum(xp.sin(x) ** 2)
        backend = di.AutoTorch(compile=True)
        x = torch.linspace(0.1, 1.0, 4, dtype=torch.float64)
        prep = di.prepare_gradient(f, backend, x)
        di.gradient(f, prep, backend, x)
        with torch.no_grad():
            di.gradient(f, prep, backend, x)
        """
    )
    done = subprocess.run([sys.executable, "-W", "always", "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "lru_cache" not in done.stderr and "_cls_to_namespace" not in done.stderr, done.stderr
