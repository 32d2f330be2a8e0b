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
