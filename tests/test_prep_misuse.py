"""Prepared calls given the wrong things: another f or backend to a strict=False prep, x and the
backend swapped, a prep inside another engine's transform, a pickled prep, an x of Python floats
in a dict, a missing argument."""

from __future__ import annotations

import copy
import importlib.util
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, backend_id

import di

X = np.array([1.0, 2.0, 3.0])


def scaled(k: float) -> Callable[[Any], Any]:
    """``sum(x**2) * k``: two of them are two functions of one code."""

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**2) * k

    return f


def scaled_with(k: float) -> Callable[..., Any]:
    """``sum(x**2) * k * a * b`` over the contexts given (one or two)."""

    def f(x: Any, *values: Any) -> Any:
        xp = di.array_namespace(x)
        y = xp.sum(x**2) * k
        for value in values:
            y = y * value
        return y

    return f


def scaled_tree(k: float) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x["w"])
        return xp.sum(x["w"] ** 2) * k

    return f


def _other(backend: di.AbstractBackend) -> di.AbstractBackend:
    """A selector other than ``backend``."""
    forward = di.AutoFiniteDiff(method="forward")
    return di.AutoFiniteDiff() if backend == forward else forward


# --- a strict=False prep still compares f and the backend ----------------------------------------

# (prepare, call with another f, call with the prepared f, expected result for k): each runner
_LOOSE_CALLS: dict[str, tuple[Any, ...]] = {
    "gradient": (
        lambda k, b, strict: di.prepare_gradient(scaled(k), b, X, strict=strict),
        lambda f, p, b: di.gradient(f, p, b, X),
        scaled,
        lambda k: 2 * k * X,
    ),
    "value_and_gradient": (
        lambda k, b, strict: di.prepare_gradient(scaled(k), b, X, strict=strict),
        lambda f, p, b: di.value_and_gradient(f, p, b, X)[1],
        scaled,
        lambda k: 2 * k * X,
    ),
    "gradient one context": (
        lambda k, b, strict: di.prepare_gradient(scaled_with(k), b, X, di.Constant(1.0), strict=strict),
        lambda f, p, b: di.gradient(f, p, b, X, di.Constant(1.0)),
        scaled_with,
        lambda k: 2 * k * X,
    ),
    "gradient two contexts": (
        lambda k, b, strict: di.prepare_gradient(
            scaled_with(k), b, X, di.Constant(1.0), di.Constant(1.0), strict=strict
        ),
        lambda f, p, b: di.gradient(f, p, b, X, di.Constant(1.0), di.Constant(1.0)),
        scaled_with,
        lambda k: 2 * k * X,
    ),
    "gradient pytree x": (
        lambda k, b, strict: di.prepare_gradient(scaled_tree(k), b, {"w": X}, strict=strict),
        lambda f, p, b: di.gradient(f, p, b, {"w": X})["w"],
        scaled_tree,
        lambda k: 2 * k * X,
    ),
    "pushforward": (
        lambda k, b, strict: di.prepare_pushforward(scaled(k), b, X, (X,), strict=strict),
        lambda f, p, b: di.pushforward(f, p, b, X, (X,))[0],
        scaled,
        lambda k: 2 * k * np.sum(X * X),
    ),
    "gradient out=": (
        lambda k, b, strict: di.prepare_gradient(scaled(k), b, X, strict=strict),
        lambda f, p, b: di.gradient(f, p, b, X, out=np.zeros(3)),
        scaled,
        lambda k: 2 * k * X,
    ),
}


def _report_rows(message: str) -> dict[str, str]:
    rows = {}
    for line in message.splitlines()[1:-1]:
        label, _, rest = line.strip().partition("  ")
        rows[label] = rest.strip()
    return rows


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
@pytest.mark.parametrize("call", list(_LOOSE_CALLS))
@pytest.mark.parametrize("strict", [False, True], ids=["loose", "strict"])
def test_a_prep_refuses_another_f_strict_or_not(backend: Any, call: str, strict: bool) -> None:
    """A strict=False prep called with another f ran the prepared f: [2, 4, 6] where f gave
    [20, 40, 60] (28 where 280 for pushforward). It now raises the strict prep's report."""
    prepare, run, make, expected = _LOOSE_CALLS[call]
    prep = prepare(1.0, backend, strict)
    with pytest.raises(di.PreparationMismatchError) as raised:
        run(make(10.0), prep, backend)
    rows = _report_rows(str(raised.value))
    assert rows["f"].startswith("differs"), str(raised.value)
    assert rows["backend"].startswith("ok"), str(raised.value)
    if not strict:
        assert "a strict=False prep still checks both" in str(raised.value)
    np.testing.assert_allclose(np.asarray(run(prep.f, prep, backend)), expected(1.0), rtol=1e-6)
    # an equal selector (not the same object) is the same backend
    np.testing.assert_allclose(np.asarray(run(prep.f, prep, copy.copy(backend))), expected(1.0), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
@pytest.mark.parametrize("call", list(_LOOSE_CALLS))
def test_a_loose_prep_refuses_another_backend(backend: Any, call: str) -> None:
    """A strict=False prep of one backend called with another ran its own engine quietly."""
    prepare, run, _, _ = _LOOSE_CALLS[call]
    prep = prepare(1.0, backend, False)
    other = _other(backend)
    with pytest.raises(di.PreparationMismatchError) as raised:
        run(prep.f, prep, other)
    rows = _report_rows(str(raised.value))
    assert rows["f"] == "ok", str(raised.value)
    assert rows["backend"] == f"differs  prepared {backend!r}   given {other!r}", str(raised.value)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
@pytest.mark.parametrize("strict", [False, True], ids=["loose", "strict"])
def test_tangents_in_a_list_are_refused_by_a_prepared_call_with_what_to_do(backend: Any, strict: bool) -> None:
    """A preparation takes its tangents in a list (as a tuple); a prepared call takes a tuple,
    and refuses a list saying to pass the tuple, strict or not (a strict prep said it was
    made for other arguments: the list's structure differed from the tuple's)."""
    f = scaled(2.0)
    prep = di.prepare_pushforward(f, backend, X, [X], strict=strict)
    with pytest.raises(di.InvalidInputError, match=r"tx must be a tuple, not a list: pass tuple\(tx\)"):
        di.pushforward(f, prep, backend, X, [X])
    np.testing.assert_allclose(np.asarray(di.pushforward(f, prep, backend, X, (X,))[0]), 4 * np.sum(X * X), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(di.pushforward(f, backend, X, [X])[0]), 4 * np.sum(X * X), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_loose_prep_still_takes_another_shape(backend: Any) -> None:
    """What strict=False is for is unchanged: other x of another shape runs (a new compile on a
    compiled backend)."""
    f = scaled(3.0)
    prep = di.prepare_gradient(f, backend, X, strict=False)
    x = np.array([1.0, -1.0, 0.5, 2.0])
    np.testing.assert_allclose(di.gradient(f, prep, backend, x), 6.0 * x, rtol=1e-6)


# --- x and the backend swapped ----------------------------------------------------------------------

_SWAPPED_CALLS: dict[str, tuple[Any, Any]] = {
    "gradient": (
        lambda f, b, strict: di.prepare_gradient(f, b, X, strict=strict),
        lambda f, p, b: di.gradient(f, p, X, b),
    ),
    "value_and_gradient": (
        lambda f, b, strict: di.prepare_gradient(f, b, X, strict=strict),
        lambda f, p, b: di.value_and_gradient(f, p, X, b),
    ),
    "gradient out=": (
        lambda f, b, strict: di.prepare_gradient(f, b, X, strict=strict),
        lambda f, p, b: di.gradient(f, p, X, b, out=np.zeros(3)),
    ),
    "gradient one context": (
        lambda f, b, strict: di.prepare_gradient(f, b, X, di.Constant(1.0), strict=strict),
        lambda f, p, b: di.gradient(f, p, X, b, di.Constant(1.0)),
    ),
    "pushforward": (
        lambda f, b, strict: di.prepare_pushforward(f, b, X, (X,), strict=strict),
        lambda f, p, b: di.pushforward(f, p, X, b, (X,)),
    ),
}


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
@pytest.mark.parametrize("call", list(_SWAPPED_CALLS))
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "loose"])
def test_x_and_the_backend_swapped_in_a_prepared_call_says_so(backend: Any, call: str, strict: bool) -> None:
    """NumPy's 'truth value of an array ... is ambiguous' (strict) or the engine's own error
    (strict=False) came through."""
    prepare, run = _SWAPPED_CALLS[call]
    f = scaled_with(1.0)
    prep = prepare(f, backend, strict)
    with pytest.raises(di.InvalidInputError) as raised:
        run(f, prep, backend)
    message = str(raised.value)
    assert "argument 3, the backend, must be a backend selector such as" in message, message
    assert repr(backend) in message and "x and the backend look swapped" in message, message


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_prepared_call_with_no_selector_as_backend_names_it(backend: Any) -> None:
    f = scaled(1.0)
    prep = di.prepare_gradient(f, backend, X)
    with pytest.raises(di.InvalidInputError, match=r"must be a backend selector such as .*, not str;") as raised:
        di.gradient(f, prep, "jax", X)
    assert "swapped" not in str(raised.value)


# --- a prep inside another engine's transform ------------------------------------------------------

_INSTALLED = {name: importlib.util.find_spec(name) is not None for name in ("jax", "torch", "autograd")}


def _both(*names: str) -> Any:
    return pytest.mark.skipif(not all(_INSTALLED[n] for n in names), reason=f"needs {' and '.join(names)}")


def sin_weighted(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x**2)


def _message(call: Callable[[], Any]) -> str:
    with pytest.raises(di.InvalidInputError) as raised:
        call()
    return str(raised.value)


@_both("jax", "autograd")
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "loose"])
def test_a_jax_prep_inside_autograd_grad_is_refused_as_preparation_refuses(strict: bool) -> None:
    """JAX's 'Error interpreting argument to stage as a JAX value' came through: the strict check
    matches an autograd box by the array inside."""
    jax_backend = di.AutoJAX()
    prep = di.prepare_gradient(sin_weighted, jax_backend, X, strict=strict)
    pprep = di.prepare_pushforward(sin_weighted, jax_backend, X, (X,), strict=strict)
    expected = _message(
        lambda: di.gradient(
            lambda x: di.array_namespace(x).sum(di.gradient(sin_weighted, jax_backend, x)), di.AutoAutograd(), X
        )
    )
    assert expected.startswith("x is traced by autograd.grad, and AutoJAX(")
    for inner in (
        lambda x: di.array_namespace(x).sum(di.gradient(sin_weighted, prep, jax_backend, x)),
        lambda x: di.value_and_gradient(sin_weighted, prep, jax_backend, x)[0],
        lambda x: di.array_namespace(x).sum(di.gradient(sin_weighted, prep, jax_backend, x, out=np.zeros(3))),
        lambda x: di.pushforward(sin_weighted, pprep, jax_backend, x, (X,))[0],
    ):
        assert _message(lambda inner=inner: di.gradient(inner, di.AutoAutograd(), X)) == expected


@_both("jax", "torch")
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "loose"])
def test_a_jax_prep_inside_torch_func_jvp_is_refused_as_preparation_refuses(strict: bool) -> None:
    """The outer AutoTorch said 'f called NumPy on a value PyTorch traces', which f never does."""
    import torch

    x = torch.tensor(X)
    jax_backend = di.AutoJAX()
    prep = di.prepare_gradient(sin_weighted, jax_backend, x, strict=strict)
    forward = di.AutoTorch(mode="forward")  # (a square jacobian runs reverse mode by default)
    expected = _message(lambda: di.jacobian(lambda x: di.gradient(sin_weighted, jax_backend, x), forward, x))
    assert expected.startswith("x is traced by torch.func.jvp")
    actual = _message(lambda: di.jacobian(lambda x: di.gradient(sin_weighted, prep, jax_backend, x), forward, x))
    assert actual == expected


@_both("jax")
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "loose"])
def test_a_finitediff_prep_inside_jax_grad_is_refused_as_preparation_refuses(strict: bool) -> None:
    """The strict check's failure path: a JAX tracer differs from the prepared NumPy array, and the
    report said x differs instead of why."""
    fd = di.AutoFiniteDiff()
    prep = di.prepare_gradient(sin_weighted, fd, X, strict=strict)
    expected = _message(
        lambda: di.gradient(lambda x: di.array_namespace(x).sum(di.gradient(sin_weighted, fd, x)), di.AutoJAX(), X)
    )
    actual = _message(
        lambda: di.gradient(
            lambda x: di.array_namespace(x).sum(di.gradient(sin_weighted, prep, fd, x)), di.AutoJAX(), X
        )
    )
    assert actual == expected and expected.startswith("x is traced by jax.grad")


@_both("autograd")
def test_an_autograd_prep_inside_autograd_grad_still_runs() -> None:
    backend = di.AutoAutograd()
    prep = di.prepare_gradient(sin_weighted, backend, X)
    outer = di.gradient(lambda x: di.array_namespace(x).sum(di.gradient(sin_weighted, prep, backend, x)), backend, X)
    unprepared = di.gradient(lambda x: di.array_namespace(x).sum(di.gradient(sin_weighted, backend, x)), backend, X)
    np.testing.assert_allclose(outer, unprepared, rtol=1e-12)


# --- pickling and copying a prep ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_prep_refuses_pickling_with_a_di_error_and_copies(backend: Any) -> None:
    """pickle.dumps(prep) raised AttributeError: Can't pickle local object 'NumpyFamily.matcher...'."""
    f = scaled(2.0)
    prep = di.prepare_gradient(f, backend, X)
    with pytest.raises(di.InvalidInputError, match="a prep cannot be pickled") as raised:
        pickle.dumps(prep)
    assert isinstance(raised.value, TypeError) and "prepare in each process" in str(raised.value)
    for copied in (copy.copy(prep), copy.deepcopy(prep)):
        assert copied is not prep and copied.f is f and copied.backend == backend
        np.testing.assert_allclose(di.gradient(f, copied, backend, X), 4.0 * X, rtol=1e-6)
        with pytest.raises(di.PreparationMismatchError):
            di.gradient(f, copied, backend, np.zeros(4))
    pprep = di.prepare_pushforward(f, backend, X, (X,))
    with pytest.raises(di.InvalidInputError, match="prepare_pushforward"):
        pickle.dumps(pprep, protocol=pickle.HIGHEST_PROTOCOL)
    np.testing.assert_allclose(di.pushforward(f, copy.deepcopy(pprep), backend, X, (X,))[0], 4.0 * 14.0, rtol=1e-6)


# --- an x of Python floats in a container; missing arguments -----------------------------------------


def sum_of_leaves(x: Any) -> Any:
    leaves = list(x.values()) if isinstance(x, dict) else list(x)
    xp = di.array_namespace(leaves[0])
    return sum(xp.sum(xp.asarray(leaf)) for leaf in leaves)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
@pytest.mark.parametrize(
    ("x", "path"),
    [({"a": 1.0}, "x['a'] is float"), ({"a": [1.0, 2.0]}, "x['a'][0] is float"), ({"b": 1.0, "a": 2.0}, "x['a'] is")],
    ids=["float", "list", "two"],
)
def test_a_pytree_x_of_python_floats_names_the_leaf(backend: Any, x: Any, path: str) -> None:
    """It said 'x must be a real floating-point array ..., not dict', although with one array leaf
    beside it names the leaf."""
    with pytest.raises(di.InvalidInputError) as raised:
        di.gradient(sum_of_leaves, backend, x)
    message = str(raised.value)
    assert f"every leaf of x must be a real floating-point array, but {path}" in message, message
    assert "pass it as a di.Constant" in message
    with pytest.raises(di.InvalidInputError, match="Convert it first"):  # a flat list: converted as a whole
        di.gradient(sum_of_leaves, backend, [1.0, 2.0])


def test_a_missing_argument_is_named() -> None:
    """di.gradient(f, prep, x) said 'backend and x are missing' although x was given."""
    backend = di.AutoFiniteDiff()
    f = scaled(1.0)
    prep = di.prepare_gradient(f, backend, X)
    pprep = di.prepare_pushforward(f, backend, X, (X,))
    cases = {
        "gradient(f, prep, backend, x, *contexts): backend is missing (the prep's is AutoFiniteDiff(": lambda: (
            di.gradient(f, prep, X)
        ),
        "value_and_gradient(f, prep, backend, x, *contexts): backend is missing": lambda: di.value_and_gradient(
            f, prep, X
        ),
        "gradient(f, prep, backend, x, *contexts): x is missing": lambda: di.gradient(f, prep, backend),
        "gradient(f, prep, backend, x, *contexts): backend and x are missing": lambda: di.gradient(f, prep),
        "gradient(f, backend, x, *contexts): backend is missing": lambda: di.gradient(f, X),
        "gradient(f, backend, x, *contexts): x is missing": lambda: di.gradient(f, backend),
        "pushforward(f, [prep,] backend, x, tx, *contexts): backend is missing": lambda: di.pushforward(
            f, pprep, X, (X,)
        ),
        "pushforward(f, [prep,] backend, x, tx, *contexts): tx is missing": lambda: di.pushforward(
            f, pprep, backend, X
        ),
    }
    for expected, call in cases.items():
        with pytest.raises(di.InvalidInputError) as raised:
            call()
        assert str(raised.value).startswith(expected), (expected, str(raised.value))
