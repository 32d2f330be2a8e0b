"""The public surface refuses misuse early and plainly, and its objects behave like values.

Selectors check their arguments when they are built (a wrapped backend that is not a selector,
a boolean option that is not a bool), selectors survive pickle and copies, a context may not wrap
a context, and what a prep and the operators show of themselves (``prep.info``, docstrings) reads well.
"""

from __future__ import annotations

import copy
import pickle
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import ENGINES, backend_params

import di
from di.errors import InvalidInputError, InvalidOptionTypeError


@pytest.fixture(params=backend_params(ENGINES))
def backend(request: pytest.FixtureRequest) -> di.AbstractBackend:
    """Each engine's default selector: what these tests check is refused, or kept, before any
    program runs, compiled or not."""
    return request.param  # type: ignore[no-any-return]


def _square(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.multiply(x, x)


def _sum_of_squares(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.multiply(x, x))


# --- SecondOrder checks outer= and inner= when it is built ---------------------------------------


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (lambda: di.SecondOrder("jax", "jax"), ["SecondOrder(outer=...)", "the name 'jax'", "di.backend('jax')"]),
        (
            lambda: di.SecondOrder(di.AutoJAX, di.AutoJAX()),
            ["SecondOrder(outer=...)", "the class AutoJAX itself", "call it, di.AutoJAX()"],
        ),
        (lambda: di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX), ["SecondOrder(inner=...)", "di.AutoJAX()"]),
        (lambda: di.SecondOrder(inner=3), ["SecondOrder(inner=...)", "not 3"]),
        (lambda: di.AutoSparse(di.AutoJAX), ["AutoSparse(dense=...)", "call it, di.AutoJAX()"]),
        (lambda: di.AutoFastest([di.AutoJAX]), ["AutoFastest candidates", "call it, di.AutoJAX()"]),
    ],
    ids=[
        "second-order-names",
        "second-order-class",
        "second-order-inner-class",
        "second-order-int",
        "sparse",
        "fastest",
    ],
)
def test_a_wrapped_backend_that_is_not_a_selector_is_refused_when_built(
    make: Callable[[], Any], fragments: list[str]
) -> None:
    with pytest.raises(InvalidOptionTypeError) as caught:
        make()
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_second_order_of_selectors_is_still_built() -> None:
    backend = di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward"))
    assert backend.inner == di.AutoFiniteDiff(method="forward")
    assert di.SecondOrder() == di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff())


# --- a selector holding a KnownSparsity survives pickle and copies ------------------------------


@pytest.mark.parametrize("roundtrip", [pickle.loads, copy.deepcopy, copy.copy], ids=["pickle", "deepcopy", "copy"])
def test_known_sparsity_survives_pickle_and_copies(backend: di.AbstractBackend, roundtrip: Callable[..., Any]) -> None:
    known = di.KnownSparsity(np.eye(3, dtype=bool), colors=[0, 0, 0])
    sparse = di.AutoSparse(backend, sparsity=known, dense_result=True)
    given = pickle.dumps(sparse) if roundtrip is pickle.loads else sparse
    restored = roundtrip(given)
    assert restored == sparse and hash(restored) == hash(sparse)
    assert restored.sparsity == known and restored.sparsity.colors.tolist() == [0, 0, 0]
    assert not restored.sparsity.rows.flags.writeable  # still immutable
    with pytest.raises(AttributeError, match="immutable"):
        restored.sparsity.shape = (1, 1)  # type: ignore[misc]
    x = np.array([1.0, 2.0, 3.0])
    prep = di.prepare_jacobian(_square, restored, x)
    assert prep.colors == 1
    np.testing.assert_allclose(di.jacobian(_square, prep, restored, x), np.diag([2.0, 4.0, 6.0]), rtol=1e-6)


def test_known_sparsity_without_colors_copies_equal() -> None:
    known = di.KnownSparsity(np.array([[True, False], [True, True]]))
    for restored in (pickle.loads(pickle.dumps(known)), copy.deepcopy(known), copy.copy(known)):
        assert restored == known and hash(restored) == hash(known)
        assert restored.colors is None and restored.nnz == 3 and restored.shape == (2, 2)


# --- a context may not wrap a context -----------------------------------------------------------


@pytest.mark.parametrize("outer", [di.Constant, di.Cache], ids=["Constant", "Cache"])
@pytest.mark.parametrize("inner", [di.Constant, di.Cache], ids=["Constant", "Cache"])
def test_a_context_wrapping_a_context_is_refused(outer: type[di.Context], inner: type[di.Context]) -> None:
    with pytest.raises(InvalidInputError) as caught:
        outer(inner(2.0))
    message = str(caught.value)
    assert f"di.{outer.__name__}({inner.__name__}(2.0)) wraps a context" in message
    assert f"Remove the inner wrapper: di.{outer.__name__}(v)" in message


def test_a_context_around_a_plain_value_still_reaches_f(backend: di.AbstractBackend) -> None:
    def f(x: Any, c: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * c)

    result = di.gradient(f, backend, np.array([1.0, 2.0]), di.Constant(2.0))
    np.testing.assert_allclose(result, [2.0, 2.0], rtol=1e-6)


@pytest.mark.parametrize("static", ["no", "False", 0, 1.0])
def test_constant_static_takes_only_none_or_a_bool(static: Any) -> None:
    with pytest.raises(InvalidOptionTypeError, match=r"static takes None, True or False"):
        di.Constant(1, static=static)
    assert di.Constant(1, static=np.True_).static is True
    assert di.Constant(1, static=False).static is False and di.Constant(1).static is None


# --- boolean options take True or False only ----------------------------------------------------

_FLAGS = [
    (di.AutoJAX, "jit", {}),
    (di.AutoTorch, "compile", {}),
    (di.AutoTorch, "create_graph", {}),
    (di.AutoSparse, "dense_result", {"dense": di.AutoFiniteDiff()}),
    (di.AutoFastest, "include_compiled", {}),
]


@pytest.mark.parametrize(("selector", "option", "others"), _FLAGS, ids=[f"{s.__name__}-{o}" for s, o, _ in _FLAGS])
@pytest.mark.parametrize("given", ["no", "False", "yes", 0, 1, None])
def test_a_boolean_option_that_is_not_a_bool_is_refused(
    selector: type[di.AbstractBackend], option: str, others: dict[str, Any], given: Any
) -> None:
    with pytest.raises(InvalidOptionTypeError) as caught:
        selector(**others, **{option: given})
    assert f"{selector.__name__}({option}={given!r}): {option} takes True or False" in str(caught.value)
    assert "numpy.bool_" in str(caught.value)


@pytest.mark.parametrize(("selector", "option", "others"), _FLAGS, ids=[f"{s.__name__}-{o}" for s, o, _ in _FLAGS])
def test_a_numpy_bool_option_is_stored_as_a_bool(
    selector: type[di.AbstractBackend], option: str, others: dict[str, Any]
) -> None:
    for given, expected in ((np.True_, True), (np.False_, False)):
        built = selector(**others, **{option: given})
        assert getattr(built, option) is expected
        assert built == selector(**others, **{option: expected})
        assert f"{option}={expected}" in repr(built)


def test_backend_by_name_refuses_a_string_flag() -> None:
    with pytest.raises(InvalidOptionTypeError, match=r"AutoJAX\(jit='no'\): jit takes True or False"):
        di.backend("jax", jit="no")


@pytest.mark.parametrize("option", ["strict", "has_aux", "value"])
@pytest.mark.parametrize("given", ["no", "yes", 1, None])
def test_a_prepare_flag_that_is_not_a_bool_is_refused(backend: di.AbstractBackend, option: str, given: Any) -> None:
    with pytest.raises(InvalidOptionTypeError) as caught:
        di.prepare_gradient(_sum_of_squares, backend, np.ones(3), **{option: given})
    assert f"prepare_gradient({option}={given!r}): {option} takes True or False" in str(caught.value)


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("given", ["no", 0, None])
def test_a_call_has_aux_that_is_not_a_bool_is_refused(backend: di.AbstractBackend, prepared: bool, given: Any) -> None:
    # has_aux="no" was read as true by unprepared calls (bool("no")), and f's output split as (y, aux)
    x = np.array([1.0, 2.0, 3.0])
    args = (di.prepare_gradient(_sum_of_squares, backend, x), backend, x) if prepared else (backend, x)
    with pytest.raises(InvalidOptionTypeError, match=rf"gradient\(has_aux={given!r}\): has_aux takes True or False"):
        di.gradient(_sum_of_squares, *args, has_aux=given)
    np.testing.assert_allclose(di.gradient(_sum_of_squares, *args, has_aux=np.False_), 2 * x, rtol=1e-6)


def test_a_same_point_prepare_names_itself(backend: di.AbstractBackend) -> None:
    with pytest.raises(InvalidOptionTypeError, match=r"prepare_hvp_same_point\(strict='no'\)"):
        di.prepare_hvp_same_point(_sum_of_squares, backend, np.ones(3), (np.ones(3),), strict="no")


def test_a_numpy_bool_prepare_flag_is_taken(backend: di.AbstractBackend) -> None:
    prep = di.prepare_gradient(_sum_of_squares, backend, np.ones(3), strict=np.False_, value=np.True_)
    assert prep.strict is False
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(di.gradient(_sum_of_squares, prep, backend, x), 2 * x, rtol=1e-6)


# --- what preps and operators show of themselves ------------------------------------------------


def test_a_dense_prep_info_has_a_readable_repr(backend: di.AbstractBackend) -> None:
    prep = di.prepare_gradient(_sum_of_squares, backend, np.ones(3))
    assert repr(prep.info) == "StrategyInfo(plan=None, sparsity=None, colors=None, sparse_result=False)"


def test_no_public_docstring_has_a_doubled_blank_line() -> None:
    doubled = re.compile(r"\n[ \t]*\n[ \t]*\n")
    offenders = [name for name in di.__all__ if doubled.search(getattr(di, name).__doc__ or "")]
    assert offenders == []
