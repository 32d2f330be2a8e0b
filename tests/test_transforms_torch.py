"""``di`` inside torch's own transforms and modes: ``torch.func`` (``vmap``, ``grad``,
``jacrev``, ``jvp``, ``jacfwd``), an outer ``torch.autograd.grad`` (inputs that
require grad), ``no_grad``, ``inference_mode`` and ``torch.compile`` around the
caller's code.

Every declared composition of the torch adapter (``COMPOSITIONS`` in
``di/engines/torch/adapter.py``, which the documentation's table shows) runs
here: each operator, prepared strictly outside the transform and unprepared, on
``AutoTorch()`` and ``AutoTorch(compile=True)``, agrees with the native
``torch.func`` composition; each refusal is a ``di`` error naming the transform.
Also: gradient penalties equal ``create_graph=True``, the opt-out, pytrees under
dynamo in one graph, and the graph-break warning naming ``di`` when the break
is its own.
"""

from __future__ import annotations

import dataclasses
import gc
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import optree
import pytest
from helpers import CompileCounter
from transform_cases import (
    OPERATORS,
    T,
    X,
    applier,
    appliers,
    compositions,
    curve,
    di_function,
    prepare,
    scalar,
    vector,
)

import di

torch = pytest.importorskip("torch")
func = torch.func

EAGER = di.AutoTorch()
COMPILED = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
APPLY = appliers("torch")
FUNC_TRANSFORMS = [name for name in APPLY if name.startswith("torch.func.")]


def _tensor(values: np.ndarray) -> Any:
    return torch.from_numpy(values.copy())


NATIVE: dict[str, Callable[[Any], Any]] = {
    "gradient": lambda x: func.grad(scalar)(x),
    "derivative": lambda x: func.jacfwd(curve)(x[0]),
    "jacobian": lambda x: func.jacfwd(vector)(x),
    "pushforward": lambda x: func.jvp(vector, (x,), (_tensor(T),))[1],
    "pullback": lambda x: func.vjp(vector, x)[1](_tensor(T))[0],
    "hvp": lambda x: func.jvp(func.grad(scalar), (x,), (_tensor(T),))[1],
    "hessian": lambda x: func.hessian(scalar)(x),
    "second_derivative": lambda x: func.jacfwd(func.jacfwd(curve))(x[0]),
}
"""The native ``torch.func`` composition each operator must agree with."""


def _composition(transform: str) -> Any:
    return next(c for c in compositions(EAGER) if c.transform == transform)


def _apply(transform: str, aspect: str) -> Any:
    """The transform's applier, compiling without fullgraph where the aspect breaks the graph."""
    return applier(transform, fullgraph=_composition(transform).status(aspect) == "yes")


def _numpy(value: Any) -> np.ndarray:
    return value.detach().numpy()


def _cases() -> list[Any]:
    cases = []
    for backend, name in ((EAGER, "torch"), (COMPILED, "torch-compile")):
        for composition in compositions(backend):
            for operator in OPERATORS:
                cases.append(
                    pytest.param(
                        backend, composition.transform, operator, id=f"{name}-{composition.transform}-{operator}"
                    )
                )
    return cases


def test_every_declared_transform_is_tested() -> None:
    assert {c.transform for c in compositions(EAGER)} == set(APPLY)
    assert set(NATIVE) == set(OPERATORS)


@pytest.mark.parametrize(("backend", "transform", "operator"), _cases())
def test_operator_inside_transform_agrees_with_torch_func(backend: Any, transform: str, operator: str) -> None:
    composition = _composition(transform)
    assert composition.composes(operator)
    x, t = _tensor(X), _tensor(T)
    expected = _numpy(APPLY[transform](NATIVE[operator], x))
    prep = prepare(operator, backend, x, t)  # strict, made outside the transform
    prepared = _apply(transform, operator)(di_function(operator, backend, prep, t), x)
    np.testing.assert_allclose(_numpy(prepared), expected, rtol=1e-10, atol=1e-12)
    if backend is COMPILED and transform not in FUNC_TRANSFORMS:
        return  # (unprepared compiled calls compile each time: checked on a few below)
    assert composition.composes("unprepared")
    unprepared = _apply(transform, "unprepared")(di_function(operator, backend, None, t), x)
    np.testing.assert_allclose(_numpy(unprepared), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("transform", ["torch.no_grad", "torch.autograd.grad", "torch.compile"])
def test_unprepared_compiled_calls_inside_modes(transform: str) -> None:
    x = _tensor(X)
    result = _apply(transform, "unprepared")(di_function("gradient", COMPILED, None, None), x)
    np.testing.assert_allclose(_numpy(result), _numpy(APPLY[transform](NATIVE["gradient"], x)), rtol=1e-10)


# --- same-point preps and Cache contexts ---------------------------------------------------------------


@pytest.mark.parametrize("transform", list(APPLY))
def test_same_point_preps_inside_transforms(transform: str) -> None:
    x, t = _tensor(X), _tensor(T)
    prep = di.prepare_pullback_same_point(vector, EAGER, x, (t,))

    def at_point(x: Any) -> Any:
        return di.pullback(vector, prep, EAGER, x, (t,))[0]

    if not _composition(transform).composes("same point"):
        with pytest.raises(di.UnsupportedOperatorError, match="same-point") as caught:
            APPLY[transform](at_point, x)
        # inside torch.func, the transform; under an outer autograd.grad, the input that requires grad
        assert transform in str(caught.value) or "requires grad" in str(caught.value)
        return
    expected = APPLY[transform](NATIVE["pullback"], x)
    np.testing.assert_allclose(_numpy(_apply(transform, "same point")(at_point, x)), _numpy(expected), rtol=1e-12)


def cached(x: Any, buffer: Any) -> Any:
    buffer[...] = x * x
    return (buffer * x).sum()


@pytest.mark.parametrize("transform", list(APPLY))
def test_cache_contexts_inside_transforms(transform: str) -> None:
    x = _tensor(X)
    cache = di.Cache(torch.zeros(3, dtype=torch.float64))
    prep = di.prepare_gradient(cached, EAGER, x, cache)

    def gradient(x: Any) -> Any:
        return di.gradient(cached, prep, EAGER, x, cache)

    if not _composition(transform).composes("Cache"):
        with pytest.raises(di.UnsupportedContextError, match="Cache") as caught:
            APPLY[transform](gradient, x)
        assert transform in str(caught.value)
        return
    expected = APPLY[transform](lambda x: func.grad(lambda x: (x**3).sum())(x), x)
    np.testing.assert_allclose(_numpy(_apply(transform, "Cache")(gradient, x)), _numpy(expected), rtol=1e-12)


def test_other_engines_refuse_functorch_tensors_up_front() -> None:
    for backend in (di.AutoJAX(), di.AutoFiniteDiff(), di.AutoAutograd()):
        if not backend.is_installed:
            continue
        with pytest.raises(di.InvalidInputError, match=r"is traced by torch\.func\.vmap"):
            func.vmap(lambda x, backend=backend: di.gradient(scalar, backend, x))(torch.stack([_tensor(X)] * 2))


# --- results that carry the caller's graph -------------------------------------------------------


def weighted(x: Any, c: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x * c)


def weighted_vector(x: Any, c: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sin(x) * x * c


# operator -> (di call(backend, x, c), native call(x, c) with create_graph=True)
PENALTIES: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "gradient": (
        lambda b, x, c: di.gradient(weighted, b, x, di.Constant(c)),
        lambda x, c: torch.autograd.grad(weighted(x, c), x, create_graph=True)[0],
    ),
    "value_and_gradient": (
        lambda b, x, c: (
            torch.cat([di.value_and_gradient(weighted, b, x, di.Constant(c))[0].reshape(1)] * 3)
            + di.value_and_gradient(weighted, b, x, di.Constant(c))[1]
        ),
        lambda x, c: weighted(x, c).reshape(1) + torch.autograd.grad(weighted(x, c), x, create_graph=True)[0],
    ),
    "pullback": (
        lambda b, x, c: di.pullback(weighted_vector, b, x, (_tensor(T),), di.Constant(c))[0],
        lambda x, c: torch.autograd.grad(weighted_vector(x, c), x, _tensor(T), create_graph=True)[0],
    ),
    "pushforward": (
        lambda b, x, c: di.pushforward(weighted_vector, b, x, (_tensor(T),), di.Constant(c))[0],
        lambda x, c: func.jvp(lambda x: weighted_vector(x, c), (x,), (_tensor(T),))[1],
    ),
    "jacobian": (
        lambda b, x, c: di.jacobian(weighted_vector, b, x, di.Constant(c)),
        lambda x, c: torch.autograd.functional.jacobian(lambda x: weighted_vector(x, c), x, create_graph=True),
    ),
    "hvp": (
        lambda b, x, c: di.hvp(weighted, b, x, (_tensor(T),), di.Constant(c))[0],
        lambda x, c: torch.autograd.functional.hvp(lambda x: weighted(x, c), x, _tensor(T), create_graph=True)[1],
    ),
    "hessian": (
        lambda b, x, c: di.hessian(weighted, b, x, di.Constant(c)),
        lambda x, c: torch.autograd.functional.hessian(lambda x: weighted(x, c), x, create_graph=True),
    ),
}


@pytest.mark.parametrize("which", ["x", "constant"])
@pytest.mark.parametrize("operator", list(PENALTIES))
@pytest.mark.parametrize("backend", [EAGER, COMPILED], ids=["torch", "torch-compile"])
def test_a_penalty_on_the_result_equals_create_graph(backend: Any, operator: str, which: str) -> None:
    """x (or a Constant) requires grad, grad mode is on: the result carries the
    caller's graph, so a penalty on it has the gradient torch itself gives."""
    call, native = PENALTIES[operator]
    c0 = np.array([1.0, 2.0, 0.5])
    x, c = _tensor(X).requires_grad_(which == "x"), _tensor(c0).requires_grad_(which == "constant")
    result = call(backend, x, c)
    assert result.requires_grad
    leaf = x if which == "x" else c
    (got,) = torch.autograd.grad((result**2).sum(), leaf)
    x_native = _tensor(X).requires_grad_()
    c_native = _tensor(c0).requires_grad_(which == "constant")
    expected_result = native(x_native, c_native)
    (expected,) = torch.autograd.grad((expected_result**2).sum(), x_native if which == "x" else c_native)
    np.testing.assert_allclose(_numpy(result), _numpy(expected_result), rtol=1e-12)
    np.testing.assert_allclose(_numpy(got), _numpy(expected), rtol=1e-10)
    assert x.grad is None and c.grad is None


def test_the_gradient_penalty_of_the_issue() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x) * x)

    x = torch.ones(2, dtype=torch.float64).requires_grad_()
    g = di.gradient(f, di.AutoTorch(), x)
    (g**2).sum().backward()
    expected = 2 * (torch.sin(x) + x * torch.cos(x)) * (2 * torch.cos(x) - x * torch.sin(x))
    np.testing.assert_allclose(_numpy(x.grad), _numpy(expected), rtol=1e-12)


def test_eager_preps_build_their_torch_func_programs_on_first_use_inside_a_transform(monkeypatch: Any) -> None:
    """An eager prep runs torch.func programs only inside transforms: they are built
    there, once, from stand-ins of the prepared arguments, and the prep holds none
    of the caller's tensors meanwhile."""
    from di.engines.torch.func import FuncPrograms

    builds: list[str] = []
    for name in ("_func_gradient", "_func_pullback"):
        original = getattr(FuncPrograms, name)

        def counting(self: Any, *args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            builds.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(FuncPrograms, name, counting)
    x, t, c = _tensor(X), _tensor(T), torch.tensor(2.0, dtype=torch.float64)

    def weighted(x: Any, c: Any) -> Any:
        return scalar(x) * c

    def weighted_vector(x: Any, c: Any) -> Any:
        return vector(x) * c

    grad_prep = di.prepare_gradient(weighted, EAGER, x, di.Constant(c))
    pullback_prep = di.prepare_pullback(weighted_vector, EAGER, x, (t,), di.Constant(c))
    alive = [weakref.ref(value) for value in (x, t, c)]
    del x, t, c
    gc.collect()
    assert builds == [] and all(ref() is None for ref in alive)
    x, t, c = _tensor(X), _tensor(T), torch.tensor(3.0, dtype=torch.float64)
    np.testing.assert_allclose(  # outside transforms: eager reverse mode, nothing built
        _numpy(di.gradient(weighted, grad_prep, EAGER, x, di.Constant(c))), _numpy(3 * func.grad(scalar)(x))
    )
    assert builds == []
    for _ in range(2):
        batch = torch.stack([x, 2 * x])
        got = func.vmap(lambda x: di.gradient(weighted, grad_prep, EAGER, x, di.Constant(c)))(batch)
        np.testing.assert_allclose(
            _numpy(got), _numpy(func.vmap(func.grad(weighted), in_dims=(0, None))(batch, c)), rtol=1e-12
        )
        (got,) = func.vmap(lambda x: di.pullback(weighted_vector, pullback_prep, EAGER, x, (t,), di.Constant(c)))(batch)
        expected = func.vmap(lambda x: func.vjp(lambda x: weighted_vector(x, c), x)[1](t)[0])(batch)
        np.testing.assert_allclose(_numpy(got), _numpy(expected), rtol=1e-12)
    assert builds == ["_func_gradient", "_func_pullback"]


@pytest.mark.parametrize("compiled", [False, True], ids=["torch", "torch-compile"])
def test_create_graph_false_detaches_results(compiled: bool) -> None:
    options = {"compile": True, "compile_options": {"backend": "eager"}} if compiled else {}
    backend = di.AutoTorch(create_graph=False, **options)
    x = _tensor(X).requires_grad_()
    c = _tensor(np.array([1.0, 2.0, 0.5])).requires_grad_()
    for result in (
        di.gradient(weighted, backend, x, di.Constant(c)),
        *di.value_and_gradient(weighted, backend, x, di.Constant(c)),
        di.hvp(weighted, backend, x, (_tensor(T),), di.Constant(c))[0],
        di.jacobian(weighted_vector, backend, x, di.Constant(c)),
    ):
        assert not result.requires_grad and result.grad_fn is None
    np.testing.assert_allclose(
        _numpy(di.gradient(weighted, backend, x, di.Constant(c))),
        _numpy(func.grad(weighted)(x.detach(), c.detach())),
        rtol=1e-12,
    )


def test_nothing_requires_grad_nothing_carries_a_graph() -> None:
    x = _tensor(X)
    for backend in (EAGER, COMPILED):
        g = di.gradient(scalar, backend, x)
        y, g2 = di.value_and_gradient(scalar, backend, x)
        assert not g.requires_grad and not y.requires_grad and not g2.requires_grad


def test_no_grad_around_a_requires_grad_x_gives_the_derivative_without_a_graph() -> None:
    x = _tensor(X).requires_grad_()
    with torch.no_grad():
        g = di.gradient(scalar, EAGER, x)
    assert not g.requires_grad
    np.testing.assert_allclose(_numpy(g), _numpy(func.grad(scalar)(x.detach())), rtol=1e-12)


def test_a_pytree_x_that_requires_grad() -> None:
    def tree_loss(p: Any) -> Any:
        return scalar(p["a"]) * p["b"].sum()

    a, b = _tensor(X).requires_grad_(), _tensor(np.array([2.0])).requires_grad_()
    g = di.gradient(tree_loss, EAGER, {"a": a, "b": b})
    penalty = (g["a"] ** 2).sum() + (g["b"] ** 2).sum()
    got = torch.autograd.grad(penalty, [a, b])
    a2, b2 = _tensor(X).requires_grad_(), _tensor(np.array([2.0])).requires_grad_()
    native = torch.autograd.grad(tree_loss({"a": a2, "b": b2}), [a2, b2], create_graph=True)
    expected = torch.autograd.grad(sum((n**2).sum() for n in native), [a2, b2])
    for got_leaf, expected_leaf in zip(got, expected):
        np.testing.assert_allclose(_numpy(got_leaf), _numpy(expected_leaf), rtol=1e-12)
    prep = di.prepare_gradient(tree_loss, EAGER, {"a": a, "b": b}, value=True)
    y, _ = di.value_and_gradient(tree_loss, prep, EAGER, {"a": a, "b": b})
    (dy_db,) = torch.autograd.grad(y, b)  # the value keeps its graph too
    np.testing.assert_allclose(_numpy(dy_db), [_numpy(scalar(a.detach()))], rtol=1e-12)


def test_a_pytree_x_with_a_constant_that_requires_grad_keeps_its_graph() -> None:
    """Plain leaves and a ``Constant`` that requires grad (a meta-parameter): the
    gradient is differentiable with respect to the constant."""

    def tree_loss(p: Any, c: Any) -> Any:
        return (c * p["a"] ** 2).sum() + p["b"].sum() * c.sum()

    p = {"a": _tensor(X), "b": _tensor(np.array([2.0]))}
    c = _tensor(np.array([1.5])).requires_grad_()
    prep = di.prepare_gradient(tree_loss, EAGER, p, di.Constant(c))
    g = di.gradient(tree_loss, prep, EAGER, p, di.Constant(c))
    np.testing.assert_allclose(_numpy(g["a"]), 3.0 * X, rtol=1e-12)
    (dc,) = torch.autograd.grad(g["a"].sum(), c)  # g["a"] = 2 c a
    np.testing.assert_allclose(_numpy(dc), [2.0 * X.sum()], rtol=1e-12)
    assert not any(t.requires_grad for t in p.values())


# --- torch.compile around the caller's code ------------------------------------------------------------


@pytest.mark.parametrize("backend", [EAGER, COMPILED], ids=["torch", "torch-compile"])
def test_compiling_code_that_calls_prepared_operators_is_one_graph(backend: Any) -> None:
    x, t = _tensor(X), _tensor(T)
    grad_prep = di.prepare_gradient(scalar, backend, x)
    hvp_prep = di.prepare_hvp(scalar, backend, x, (t,))
    counter = CompileCounter()

    def newton_like_step(x: Any) -> Any:
        g = di.gradient(scalar, grad_prep, backend, x)
        (hv,) = di.hvp(scalar, hvp_prep, backend, x, (g,))
        return x - 0.1 * g + 0.01 * hv

    step = torch.compile(newton_like_step, fullgraph=True, backend=counter)
    result = step(x)
    step(x + 1.0)
    assert counter.count == 1
    native = x - 0.1 * func.grad(scalar)(x) + 0.01 * func.jvp(func.grad(scalar), (x,), (func.grad(scalar)(x),))[1]
    np.testing.assert_allclose(_numpy(result), _numpy(native), rtol=1e-12)


@optree.dataclasses.dataclass(namespace="")
class Params:
    weights: Any
    bias: Any


def _tree(kind: str) -> Any:
    weights, bias = _tensor(X), _tensor(np.array([0.5]))
    return {
        "dict": {"weights": weights, "bias": bias},
        "list": [weights, bias],
        "dataclass": Params(weights, bias),
        "nested": {"weights": weights, "more": (bias, None)},  # not a plain tensor tree: di's own flattening
    }[kind]


def _parts(p: Any) -> tuple[Any, Any]:
    if isinstance(p, dict):
        return p["weights"], p["bias"] if "bias" in p else p["more"][0]
    if isinstance(p, list):
        return p[0], p[1]
    return p.weights, p.bias


def tree_scalar(p: Any) -> Any:
    weights, bias = _parts(p)
    xp = di.array_namespace(weights)
    return xp.sum(xp.sin(weights) * weights) * xp.sum(bias)


def tree_vector(p: Any) -> Any:
    weights, bias = _parts(p)
    xp = di.array_namespace(weights)
    return xp.sin(weights) * xp.sum(bias)


@pytest.mark.parametrize("kind", ["dict", "list", "dataclass", "nested"])
@pytest.mark.parametrize("operator", ["gradient", "pullback", "pushforward", "hvp"])
def test_compiled_pytree_x_is_one_graph(operator: str, kind: str) -> None:
    torch._dynamo.reset()
    counter = CompileCounter()
    backend = di.AutoTorch(compile=True, compile_options={"backend": counter})
    x = _tree(kind)
    t = _tensor(T)
    leaves = optree.tree_leaves(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        if operator == "gradient":
            prep = di.prepare_gradient(tree_scalar, backend, x)
            result = di.gradient(tree_scalar, prep, backend, x)
            native = func.grad(lambda leaves: tree_scalar(optree.tree_unflatten(optree.tree_structure(x), leaves)))(
                leaves
            )
        elif operator == "pullback":
            prep = di.prepare_pullback(tree_vector, backend, x, (t,))
            (result,) = di.pullback(tree_vector, prep, backend, x, (t,))
            native = func.vjp(
                lambda leaves: tree_vector(optree.tree_unflatten(optree.tree_structure(x), leaves)), leaves
            )[1](t)[0]
        elif operator == "pushforward":
            prep = di.prepare_pushforward(tree_vector, backend, x, (x,))
            (result,) = di.pushforward(tree_vector, prep, backend, x, (x,))
        else:
            prep = di.prepare_hvp(tree_scalar, backend, x, (x,))
            (result,) = di.hvp(tree_scalar, prep, backend, x, (x,))
    assert counter.count == 1, f"{counter.count} graphs"
    if operator == "pushforward":
        expected = func.jvp(
            lambda leaves: tree_vector(optree.tree_unflatten(optree.tree_structure(x), leaves)), (leaves,), (leaves,)
        )[1]
        np.testing.assert_allclose(_numpy(result), _numpy(expected), rtol=1e-12)
        return
    if operator == "hvp":
        native = func.jvp(
            func.grad(lambda leaves: tree_scalar(optree.tree_unflatten(optree.tree_structure(x), leaves))),
            (leaves,),
            (leaves,),
        )[1]
    assert type(result) is type(x)
    for got, want in zip(optree.tree_leaves(result), native):
        np.testing.assert_allclose(_numpy(got), _numpy(want), rtol=1e-12)


def test_a_graph_break_in_di_is_named_as_di_s_own(monkeypatch: Any) -> None:
    """A function dynamo does not trace, called by di's pytree code, breaks the
    graph in di: the warning (and the error, where a break is fatal) says so. (The
    gradient of a dataclass goes through di's pytree code; a dict's goes to
    torch.func as it is. Every tree is walked here, none gets written functions.)"""
    import di.pytrees.structure

    monkeypatch.setattr(di.pytrees.structure, "_unflatten", torch._dynamo.disable(di.pytrees.structure._unflatten))
    monkeypatch.setattr(di.pytrees.structure, "_written", lambda root: None)
    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    own = r"[Tt]he break is in di's own code \(di/pytrees/structure.py:\d+ in unflatten\)"
    with pytest.warns(di.RecompileWarning, match=own):
        prep = di.prepare_gradient(tree_scalar, backend, _tree("dataclass"))
    np.testing.assert_allclose(
        _numpy(di.gradient(tree_scalar, prep, backend, _tree("dataclass")).weights),
        _numpy(func.grad(scalar)(_tensor(X))) * 0.5,
        rtol=1e-12,
    )
    with pytest.raises(di.UnsupportedOperatorError, match="di's own code"):
        di.prepare_hvp(tree_scalar, backend, _tree("dict"), (_tree("dict"),))


def test_a_graph_break_in_f_is_not_blamed_on_di() -> None:
    def branching(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**2) if xp.sum(x) > 0 else xp.sum(x)

    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    with pytest.warns(di.RecompileWarning) as caught:
        di.prepare_gradient(branching, backend, _tensor(X))
    message = str(next(w.message for w in caught if w.category is di.RecompileWarning))
    assert "di's own code" not in message and "control flow" in message
    with pytest.raises(di.UnsupportedOperatorError, match="remove the data-dependent Python control flow"):
        di.prepare_hvp(branching, backend, _tensor(X), (_tensor(T),))


def test_dataclass_helpers_are_plain_dataclasses() -> None:
    assert dataclasses.is_dataclass(Params)


# --- torch.compile(torch.func.vmap(...)) around prepared operators ------------------------------------


def _decay(p: Any, t: Any) -> Any:
    xp = di.array_namespace(p)
    return p[0] * xp.exp(-p[1] * t) - 1.0


def _decay_with_aux(p: Any, t: Any) -> Any:
    xp = di.array_namespace(p)
    y = p[0] * xp.exp(-p[1] * t) - 1.0
    return y, {"total": xp.sum(y), "label": "decay"}


def _energy(p: Any, c: Any) -> Any:
    xp = di.array_namespace(p)
    return xp.sum(xp.sin(p) * p) * c + p[0] ** 2 * p[1]


def _wave(s: Any, t: Any) -> Any:
    xp = di.array_namespace(s)
    return xp.sin(s * t) * s


_TIMES = np.linspace(0.0, 1.0, 4)
_C = 1.5
_TANGENTS = (np.array([1.0, -0.5]), np.array([0.3, 2.0]))
_BATCH = np.array([[1.0, 0.5], [2.0, 1.0], [0.5, 2.0]])


def _vmapped_case(case: str) -> tuple[Callable[[Any], Any], Callable[[Any], Any], Any]:
    """``(step, native, batch)``: ``step(p)`` calls a prep made outside, per example;
    ``native(p)`` is the same derivative written with ``torch.func`` alone."""
    b, times, c = EAGER, _tensor(_TIMES), torch.tensor(_C, dtype=torch.float64)
    zero, scalar_zero = torch.zeros(2, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    k = 2 if case.endswith("-2") else 1
    tx = tuple(_tensor(t) for t in _TANGENTS[:k])
    energy = lambda p: _energy(p, c)
    decay = lambda p: _decay(p, times)
    wave = lambda s: _wave(s, times)
    jvps = lambda g, p: torch.stack([func.jvp(g, (p,), (t,))[1] for t in tx])
    batch, scalar_batch = _tensor(_BATCH), _tensor(_BATCH[:, 0])
    if case == "jacobian":
        prep = di.prepare_jacobian(_decay, b, zero, di.Constant(times))
        return lambda p: di.jacobian(_decay, prep, b, p, di.Constant(times)), func.jacrev(decay), batch
    if case == "value_and_jacobian-aux":
        prep = di.prepare_jacobian(_decay_with_aux, b, zero, di.Constant(times), has_aux=True)

        def step(p: Any) -> Any:
            (y, aux), jac = di.value_and_jacobian(_decay_with_aux, prep, b, p, di.Constant(times), has_aux=True)
            assert aux["label"] == "decay"
            return torch.cat([y, aux["total"][None], jac.reshape(-1)])

        return step, lambda p: torch.cat([decay(p), decay(p).sum()[None], func.jacrev(decay)(p).reshape(-1)]), batch
    if case.startswith("pushforward"):
        prep = di.prepare_pushforward(_decay, b, zero, tx, di.Constant(times))
        return (
            lambda p: torch.stack(di.pushforward(_decay, prep, b, p, tx, di.Constant(times))),
            lambda p: jvps(decay, p),
            batch,
        )
    if case == "value_and_pushforward-aux-2":
        prep = di.prepare_pushforward(_decay_with_aux, b, zero, tx, di.Constant(times), has_aux=True)

        def step(p: Any) -> Any:
            (y, aux), dys = di.value_and_pushforward(_decay_with_aux, prep, b, p, tx, di.Constant(times), has_aux=True)
            return torch.cat([y, aux["total"][None], *dys])

        return step, lambda p: torch.cat([decay(p), decay(p).sum()[None], *jvps(decay, p)]), batch
    if case.startswith("hvp"):
        prep = di.prepare_hvp(_energy, b, zero, tx, di.Constant(c))
        return (
            lambda p: torch.stack(di.hvp(_energy, prep, b, p, tx, di.Constant(c))),
            lambda p: jvps(func.grad(energy), p),
            batch,
        )
    if case == "gradient_and_hvp-2":
        prep = di.prepare_hvp(_energy, b, zero, tx, di.Constant(c))

        def step(p: Any) -> Any:
            g, hvs = di.gradient_and_hvp(_energy, prep, b, p, tx, di.Constant(c))
            return torch.stack([g, *hvs])

        return step, lambda p: torch.cat([func.grad(energy)(p)[None], jvps(func.grad(energy), p)]), batch
    if case == "hessian":
        prep = di.prepare_hessian(_energy, b, zero, di.Constant(c))
        return lambda p: di.hessian(_energy, prep, b, p, di.Constant(c)), func.hessian(energy), batch
    if case == "value_gradient_and_hessian":
        prep = di.prepare_hessian(_energy, b, zero, di.Constant(c))

        def step(p: Any) -> Any:
            y, g, h = di.value_gradient_and_hessian(_energy, prep, b, p, di.Constant(c))
            return torch.cat([y[None], g, h.reshape(-1)])

        return (
            step,
            lambda p: torch.cat([energy(p)[None], func.grad(energy)(p), func.hessian(energy)(p).reshape(-1)]),
            batch,
        )
    if case == "derivative":
        prep = di.prepare_derivative(_wave, b, scalar_zero, di.Constant(times))
        return lambda s: di.derivative(_wave, prep, b, s, di.Constant(times)), func.jacrev(wave), scalar_batch
    assert case == "second_derivative"
    prep = di.prepare_second_derivative(_wave, b, scalar_zero, di.Constant(times))
    native = func.jacrev(func.jacrev(wave))
    return lambda s: di.second_derivative(_wave, prep, b, s, di.Constant(times)), native, scalar_batch


_VMAPPED_CASES = [
    "jacobian",
    "value_and_jacobian-aux",
    "pushforward-1",
    "pushforward-2",
    "value_and_pushforward-aux-2",
    "hvp-1",
    "hvp-2",
    "gradient_and_hvp-2",
    "derivative",
    "hessian",
    "value_gradient_and_hessian",
    "second_derivative",
]


class _AotEagerCounter:
    """A ``torch.compile`` backend that compiles graphs with ``aot_eager`` and counts
    those compiled (a restart of dynamo's analysis from inside the backend is not one)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        compiled = torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)
        self.count += 1
        return compiled


@pytest.mark.parametrize("case", _VMAPPED_CASES)
def test_compiled_vmap_of_prepared_operators(case: str) -> None:
    """``torch.compile(torch.func.vmap(step))``, as the documentation recommends for a
    batched computation: dynamo fails to trace a ``jvp`` batched by ``vmap`` inside
    another ``vmap`` (an INTERNAL ASSERT in ``_fw_primal``, for native ``jacfwd`` too),
    so the prepared operators there take derivatives that compose (reverse mode, a
    loop over the tangents). One graph, with the uncompiled ``vmap``'s values."""
    torch._dynamo.reset()
    step, native, batch = _vmapped_case(case)
    uncompiled = _numpy(func.vmap(step)(batch))
    np.testing.assert_allclose(uncompiled, _numpy(func.vmap(native)(batch)), rtol=1e-12, atol=1e-14)
    counter = _AotEagerCounter()
    compiled = torch.compile(func.vmap(step), fullgraph=True, backend=counter)
    np.testing.assert_allclose(_numpy(compiled(batch)), uncompiled, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_numpy(compiled(2.0 * batch)), _numpy(func.vmap(native)(2.0 * batch)), rtol=1e-12)
    assert counter.count == 1
