"""AutoTorch's results and the autograd graph: an output cut off from ``x`` is
refused rather than differentiated into zeros, and results carry a graph only
through ``x``, the contexts and the tangents (never to tensors ``f`` closes over)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import di

torch = pytest.importorskip("torch")
torch_pytree = pytest.importorskip("torch.utils._pytree")

COMPILED = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
EAGER = [
    pytest.param(di.AutoTorch(), id="torch"),
    pytest.param(di.AutoTorch(mode="reverse"), id="torch-reverse"),
    pytest.param(di.AutoTorch(mode="forward"), id="torch-forward"),
]
X = np.array([0.3, -1.2, 2.5])
T = np.array([1.0, 0.5, -0.25])
S = np.array(0.7)


def _x() -> Any:
    return torch.tensor(X)


def _array_operators(f: Callable[..., Any], backend: Any) -> dict[str, Callable[[], Any]]:
    """Each operator of an array output, called on ``f`` (``f(x)`` for a vector ``x``;
    the scalar-input operators take ``f(s * x)``)."""
    x, t = _x(), (torch.tensor(T),)
    s = torch.tensor(S)

    base = torch.tensor(X)  # (a NumPy array closed over fails dynamo's guards: a tensor)

    def of_scalar(s: Any) -> Any:
        return f(s * base)

    return {
        "pullback": lambda: di.pullback(f, backend, x, t),
        "value_and_pullback": lambda: di.value_and_pullback(f, backend, x, t + t),
        "pushforward": lambda: di.pushforward(f, backend, x, t),
        "value_and_pushforward": lambda: di.value_and_pushforward(f, backend, x, t + t),
        "pushforward_with_aux": lambda: di.pushforward(lambda x: (f(x), {"tag": 1}), backend, x, t, has_aux=True),
        "jacobian": lambda: di.jacobian(f, backend, x),
        "value_and_jacobian_with_aux": lambda: di.value_and_jacobian(lambda x: (f(x), 1), backend, x, has_aux=True),
        "jacobian_of_a_dict": lambda: di.jacobian(lambda d: f(d["a"]), backend, {"a": x}),
        "derivative": lambda: di.derivative(of_scalar, backend, s),
        "second_derivative": lambda: di.second_derivative(of_scalar, backend, s),
    }


ARRAY_OPERATORS = list(_array_operators(lambda x: x, None))
FORWARD_OPERATORS = [name for name in ARRAY_OPERATORS if "pullback" not in name and "jacobian" not in name] + [
    "jacobian"
]


def cut_off(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sin(x.detach()) * 2.0  # computed from a detached x: no derivative reaches x


def constant_in_x(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sin(x) * 0.0 + 1.5  # computed from x: a derivative of zero


# --- an output cut off from x ---------------------------------------------------------------


@pytest.mark.parametrize("operator", ARRAY_OPERATORS)
@pytest.mark.parametrize("backend", EAGER)
def test_an_array_output_cut_off_from_x_is_refused(backend: Any, operator: str) -> None:
    # it gave zeros: pullback, pushforward and jacobian of x.detach() * 2 were all 0
    with pytest.raises(di.InvalidOutputError, match="not computed from x, so it carries no derivative"):
        _array_operators(cut_off, backend)[operator]()


@pytest.mark.parametrize("operator", FORWARD_OPERATORS)
def test_a_compiled_forward_mode_refuses_an_output_cut_off_from_x(operator: str) -> None:
    with pytest.raises(di.InvalidOutputError, match="not computed from x"):
        _array_operators(cut_off, COMPILED)[operator]()


@pytest.mark.parametrize("operator", ARRAY_OPERATORS)
@pytest.mark.parametrize("backend", [*EAGER, pytest.param(COMPILED, id="torch-compile")])
def test_an_array_output_constant_in_x_has_zero_derivatives(backend: Any, operator: str) -> None:
    result = _array_operators(constant_in_x, backend)[operator]()
    tensors = [leaf for leaf in torch_pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]
    values = [t for t in tensors if t.shape == (3,) and bool((t == 1.5).all())]  # the value, where returned
    derivatives = [t for t in tensors if not any(t is v for v in values)]
    assert derivatives and all(not t.any() for t in derivatives)


def test_a_linear_f_has_a_zero_hessian_and_second_derivative() -> None:
    def linear(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * 2.0)

    backend = di.AutoTorch()
    np.testing.assert_array_equal(di.hessian(linear, backend, _x()).numpy(), np.zeros((3, 3)))
    np.testing.assert_array_equal(di.hvp(linear, backend, _x(), (torch.tensor(T),))[0].numpy(), np.zeros(3))
    second = di.second_derivative(lambda s: s * torch.tensor(X) * 2.0, backend, torch.tensor(S))
    np.testing.assert_array_equal(second.numpy(), np.zeros(3))


def _sin_times_square(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x**2)


def test_a_gradient_on_another_backend_inside_f_is_refused_with_the_remedy() -> None:
    # an outer pullback over another engine's gradient, which comes back detached, gave zeros
    def inner(x: Any) -> Any:
        return di.gradient(_sin_times_square, di.AutoFiniteDiff(), x)

    v = (torch.tensor([1.0, 0.5, -0.25], dtype=torch.float64),)
    for call in (
        lambda: di.pullback(inner, di.AutoTorch(), _x(), v),
        lambda: di.value_and_pullback(inner, di.AutoTorch(), _x(), v),
    ):
        with pytest.raises(
            di.InvalidOutputError, match=r"not computed from x.*di\.DifferentiateWith\(g, that_backend\)"
        ):
            call()
    # the remedy the error names: the inner call made differentiable
    differentiable = di.DifferentiateWith(lambda x: di.gradient(_sin_times_square, di.AutoTorch(), x), di.AutoTorch())
    (pulled,) = di.pullback(differentiable, di.AutoTorch(), _x(), v)
    np.testing.assert_allclose(pulled.numpy(), [1.7108, -1.1306, 2.6387], atol=1e-4)


# --- graphs to tensors f closes over ------------------------------------------------------------


def _all_operators(w: Any, backend: Any, *contexts: Any) -> dict[str, Any]:
    """Every operator's results for functions of ``x`` that close over ``w``."""

    def scalar(x: Any, *values: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(w * x))

    def vector(x: Any, *values: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(w * x), {"w": w * 2.0}

    x, t, s = _x(), (torch.tensor(T),), torch.tensor(S)
    return {
        "gradient": di.value_and_gradient(scalar, backend, x, *contexts),
        "pullback": di.value_and_pullback(vector, backend, x, t, *contexts, has_aux=True),
        "pushforward": di.value_and_pushforward(vector, backend, x, t + t, *contexts, has_aux=True),
        "jacobian": di.value_and_jacobian(vector, backend, x, *contexts, has_aux=True),
        "derivative": di.value_and_derivative(lambda s, *c: vector(s * x)[0], backend, s, *contexts),
        "second_derivative": di.value_derivative_and_second_derivative(lambda s: vector(s * x)[0], backend, s),
        "hvp": di.gradient_and_hvp(scalar, backend, x, t, *contexts),
        "hessian": di.value_gradient_and_hessian(scalar, backend, x, *contexts),
    }


def _with_graph(results: Any) -> list[int]:
    leaves = [leaf for leaf in torch_pytree.tree_leaves(results) if isinstance(leaf, torch.Tensor)]
    return [i for i, leaf in enumerate(leaves) if leaf.requires_grad]


@pytest.mark.parametrize("create_graph", [True, False])
@pytest.mark.parametrize("cache", [False, True], ids=["", "cache"])
def test_results_carry_no_graph_to_tensors_f_closes_over(create_graph: bool, cache: bool) -> None:
    # forward-mode results (hvp, hessian, jacobian, pushforward, derivative) stayed attached to w
    w = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    contexts = (di.Cache(torch.zeros(3, dtype=torch.float64)),) if cache else ()
    results = _all_operators(w, di.AutoTorch(create_graph=create_graph), *contexts)
    assert {name: _with_graph(r) for name, r in results.items()} == {name: [] for name in results}


@pytest.mark.parametrize("operator", ["pushforward", "jacobian", "hessian", "hvp", "derivative"])
def test_results_keep_the_graph_through_x(operator: str) -> None:
    w = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)

    def scalar(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(w * x) * x)

    def vector(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(w * x) * x

    def native(x: Any) -> Any:
        t = torch.tensor(T)
        if operator == "pushforward":
            return torch.func.jvp(vector, (x,), (t,))[1]
        if operator == "jacobian":
            return torch.func.jacfwd(vector)(x)
        if operator == "hessian":
            return torch.func.hessian(scalar)(x)
        if operator == "hvp":
            return torch.func.jvp(torch.func.grad(scalar), (x,), (t,))[1]
        return torch.func.jvp(lambda s: vector(s * x), (torch.tensor(S),), (torch.tensor(1.0, dtype=torch.float64),))[1]

    def ours(x: Any, backend: Any) -> Any:
        t = (torch.tensor(T),)
        if operator == "pushforward":
            return di.pushforward(vector, backend, x, t)[0]
        if operator == "jacobian":
            return di.jacobian(vector, backend, x)
        if operator == "hessian":
            return di.hessian(scalar, backend, x)
        if operator == "hvp":
            return di.hvp(scalar, backend, x, t)[0]
        # (x enters as a Constant: a tensor f closes over carries no graph into the results)
        return di.derivative(lambda s, c: vector(s * c), backend, torch.tensor(S), di.Constant(x))

    x = _x().requires_grad_()
    # with x differentiable the graph is kept (to w as well, as torch.func's own result is)
    expected = torch.autograd.grad(native(x).sum(), (x, w))
    got = torch.autograd.grad(ours(x, di.AutoTorch()).sum(), (x, w), allow_unused=True)
    for a, b in zip(got, expected):
        assert a is not None
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    assert not ours(x, di.AutoTorch(create_graph=False)).requires_grad


def test_torch_function_modes_and_foreign_cotangents_still_go_through_autograd_grad() -> None:
    """The eager programs call autograd's engine directly (without torch.autograd.grad's
    Python) only where grad's checks would pass: under a torch function mode the mode
    still sees torch.autograd.grad, and an hvp tangent of another, broadcastable shape
    (past a strict=False prep) is refused as grad refuses it, never summed by the engine."""
    from torch.overrides import TorchFunctionMode

    seen: list[Any] = []

    class Recording(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(func)
            return func(*args, **(kwargs or {}))

    backend, x = di.AutoTorch(), _x()

    def f(x: Any) -> Any:
        return (torch.sin(x) * x).sum()

    def tree_f(p: Any) -> Any:
        return f(p["a"]), {"mean": p["a"].mean()}

    prep = di.prepare_gradient(f, backend, x)
    tree_prep = di.prepare_gradient(tree_f, backend, {"a": x}, has_aux=True)
    expected = torch.sin(x) + x * torch.cos(x)
    with Recording():
        gradients = [
            di.gradient(f, prep, backend, x),
            di.value_and_gradient(tree_f, tree_prep, backend, {"a": x}, has_aux=True)[1]["a"],
            di.hvp(f, backend, x, (torch.ones_like(x),))[0],
        ]
    assert sum(func is torch.autograd.grad for func in seen) >= 4  # (the hvp's two passes)
    torch.testing.assert_close(gradients[0], expected)
    torch.testing.assert_close(gradients[1], expected)
    torch.testing.assert_close(gradients[2], 2 * torch.cos(x) - x * torch.sin(x))

    def g(x: Any) -> Any:
        return torch.sin(x) * x

    seen.clear()
    with Recording():  # the pushforward's double vjp, the hessian's first pass
        (pushed,) = di.pushforward(g, backend, x, (torch.ones_like(x),))
        hessian = di.hessian(f, backend, x)
    assert sum(func is torch.autograd.grad for func in seen) >= 3
    torch.testing.assert_close(pushed, expected)
    torch.testing.assert_close(hessian, torch.diag(2 * torch.cos(x) - x * torch.sin(x)))

    def cube(x: Any) -> Any:
        return (x**3).sum()

    loose = di.prepare_hvp(cube, backend, x, (torch.ones_like(x),), strict=False)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        di.hvp(cube, loose, backend, x, (torch.ones(1, dtype=x.dtype),))


def test_eager_pushforward_and_hessian_call_autograds_engine_without_grads_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pushforward's double vjp and the hessian's first reverse pass call autograd's
    engine as torch.autograd.grad does once its checks pass (grad's own Python is about
    45k instructions a call); only the hessian's batched second pass goes through grad
    (its is_grads_batched vectorisation lives there). Values checked analytically."""
    calls: list[Any] = []
    grad = torch.autograd.grad

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("is_grads_batched", False))
        return grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", counted)
    backend, x = di.AutoTorch(), _x()

    def g(x: Any) -> Any:
        return torch.sin(x) * x

    def f(x: Any) -> Any:
        return g(x).sum()

    (pushed,) = di.pushforward(g, backend, x, (torch.ones_like(x),))
    assert calls == []
    torch.testing.assert_close(pushed, torch.sin(x) + x * torch.cos(x))
    hessian = di.hessian(f, backend, x)
    assert calls == [True]
    torch.testing.assert_close(hessian, torch.diag(2 * torch.cos(x) - x * torch.sin(x)))
