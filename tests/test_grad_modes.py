"""torch grad modes never change a derivative.

Under ``torch.no_grad()`` and ``torch.inference_mode()`` an eager ``f`` runs
unrecorded, so a backend that differentiated it there would read every gradient
as zero. Each operator is called inside each mode, with numpy, torch and
inference-tensor inputs, and compared with the analytic result.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from transform_cases import T, X
from transform_cases import scalar as loss
from transform_cases import vector as elementwise

import di

torch = pytest.importorskip("torch")


def first(x: Any) -> np.ndarray:
    return np.sin(x) + x * np.cos(x)


def second(x: Any) -> np.ndarray:
    return 2 * np.cos(x) - x * np.sin(x)


def as_numpy(value: Any) -> np.ndarray:
    return value.detach().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


# operator name -> (call(backend, x), expected at X)
OPERATORS: dict[str, tuple[Callable[[Any, Any], Any], np.ndarray]] = {
    "gradient": (lambda b, x: di.gradient(loss, b, x), first(X)),
    "value_and_gradient": (lambda b, x: di.value_and_gradient(loss, b, x)[1], first(X)),
    "pullback": (lambda b, x: di.pullback(elementwise, b, x, (T,))[0], first(X) * T),
    "pushforward": (lambda b, x: di.pushforward(elementwise, b, x, (T,))[0], first(X) * T),
    "jacobian": (lambda b, x: di.jacobian(elementwise, b, x), np.diag(first(X))),
    "derivative": (lambda b, x: di.derivative(elementwise, b, x[0]), first(X)),
    "hvp": (lambda b, x: di.hvp(loss, b, x, (T,))[0], second(X) * T),
    "hessian": (lambda b, x: di.hessian(loss, b, x), np.diag(second(X))),
    "second_derivative": (lambda b, x: di.second_derivative(elementwise, b, x[0]), second(X)),
}
SCALAR_INPUT = {"derivative", "second_derivative"}

MODES: dict[str, Callable[[], Any]] = {
    "grad": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}


def torch_input(kind: str, mode: Callable[[], Any]) -> Any:
    if kind == "numpy":
        return X.copy()
    if kind == "inference":
        with torch.inference_mode():  # an inference tensor, used inside or outside the mode
            return torch.from_numpy(X.copy())
    with mode():
        return torch.from_numpy(X.copy())


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("kind", ["numpy", "torch", "inference"])
@pytest.mark.parametrize("operator", list(OPERATORS))
def test_grad_mode_does_not_change_the_derivative(operator: str, kind: str, mode: str) -> None:
    call, expected = OPERATORS[operator]
    backend = di.AutoTorch()
    with MODES[mode]():
        x = torch_input(kind, MODES[mode])
        if operator in SCALAR_INPUT:
            expected = expected[0]
        result = call(backend, x)
    np.testing.assert_allclose(as_numpy(result), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_grad_mode_with_cache_and_pytree(mode: str) -> None:
    """The reverse-mode paths that write a Cache (double backward for hvp) and take
    pytrees leaf by leaf record f too."""
    backend = di.AutoTorch()

    def with_cache(x: Any, buffer: Any) -> Any:
        buffer[...] = x * x
        return (buffer * x).sum()

    def tree_loss(p: Any) -> Any:
        return loss(p["a"]) + loss(p["b"])

    with MODES[mode]():
        x = torch.from_numpy(X.copy())
        g = di.gradient(with_cache, backend, x, di.Cache(torch.zeros(3, dtype=torch.float64)))
        hv = di.hvp(
            with_cache, backend, x, (torch.from_numpy(T.copy()),), di.Cache(torch.zeros(3, dtype=torch.float64))
        )
        tree_g = di.gradient(tree_loss, backend, {"a": x, "b": 2 * x})
    np.testing.assert_allclose(as_numpy(g), 3 * X**2)
    np.testing.assert_allclose(as_numpy(hv[0]), 6 * X * T)
    np.testing.assert_allclose(as_numpy(tree_g["a"]), first(X))
    np.testing.assert_allclose(as_numpy(tree_g["b"]), first(2 * X))


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_grad_mode_compiled(mode: str) -> None:
    """Compiled programs, prepared outside the mode and called inside it."""
    backend = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
    x = torch.from_numpy(X.copy())
    prep_g = di.prepare_gradient(loss, backend, x)
    prep_p = di.prepare_pullback(elementwise, backend, x, (torch.from_numpy(T.copy()),))
    with MODES[mode]():
        g = di.gradient(loss, prep_g, backend, x)
        (p,) = di.pullback(elementwise, prep_p, backend, x, (torch.from_numpy(T.copy()),))
    np.testing.assert_allclose(as_numpy(g), first(X), rtol=1e-12)
    np.testing.assert_allclose(as_numpy(p), first(X) * T, rtol=1e-12)


# --- a torch.autograd.forward_ad level ---------------------------------------------------------------------------

REVERSE = {"gradient", "value_and_gradient", "pullback", "hessian", "hvp", "jacobian"}
"""Reverse mode eagerly (the hessian and the hvp: reverse over reverse; a square jacobian, such as the
elementwise one here), which nests in a forward_ad level."""


@pytest.mark.parametrize("operator", sorted(REVERSE))
@pytest.mark.parametrize("create_graph", [True, False])
def test_an_x_that_carries_a_forward_mode_tangent_keeps_it(operator: str, create_graph: bool) -> None:
    """Inside ``torch.autograd.forward_ad.dual_level()`` with a dual ``x``, the
    result's tangent is the directional derivative of the operator's result, as
    ``torch.func.jvp`` gives it. Eager AutoTorch differentiated a detached alias of
    ``x`` and returned results without a tangent, silently."""
    import torch.autograd.forward_ad as forward_ad

    call, _ = OPERATORS[operator]
    x, t = torch.from_numpy(X.copy()), torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
    expected = torch.func.jvp(lambda x: call(di.AutoTorch(), x), (x,), (t,))[1]
    with forward_ad.dual_level():
        result = call(di.AutoTorch(create_graph=create_graph), forward_ad.make_dual(x, t))
        tangent = forward_ad.unpack_dual(result).tangent
    assert tangent is not None, operator
    np.testing.assert_allclose(as_numpy(tangent), as_numpy(expected), rtol=1e-12)


@pytest.mark.parametrize("operator", sorted(set(OPERATORS) - REVERSE - SCALAR_INPUT))
def test_forward_mode_operators_inside_a_forward_ad_level_say_so(operator: str) -> None:
    """torch cannot nest forward mode in a forward_ad level: a di error naming the
    operator, dual_level() and what works, not torch's RuntimeError."""
    import torch.autograd.forward_ad as forward_ad

    call, _ = OPERATORS[operator]
    x, t = torch.from_numpy(X.copy()), torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
    with forward_ad.dual_level(), pytest.raises(di.UnsupportedOperatorError) as info:
        call(di.AutoTorch(), forward_ad.make_dual(x, t))
    message = str(info.value)
    assert operator.split("_and_")[-1] in message and "dual_level()" in message and "torch.func.jvp" in message
