"""A matrix of bad inputs for gradient, jacobian, hvp and pullback on every backend.

Each case checks the error type, that the message names the offending argument and
the fix, and that nothing the caller passed was mutated (``x``, the contexts, ``out``).
``tests/test_errors.py`` covers these cases for ``gradient``; this module extends them
to the other operators and adds what it leaves out: object arrays, non-array
outputs, the order of contexts, preps from another signature of tangents, ``out``
for jacobians, NaN and Inf, and missing engines for every operator.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    BACKENDS,
    BACKENDS_AND_SCHEMES,
    ENGINES,
    FAMILIES,
    as_family,
    backend_id,
    backend_params,
    engine_family,
    engine_name,
    family,
    to_numpy,
)

import di
from di.testing import approximates

ROOT = Path(__file__).resolve().parents[1]

# --- operators -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One operator family: its functions, its tangent argument, what f must return."""

    name: str
    prepare: Callable[..., Any]
    plain: Callable[..., Any]
    combined: Callable[..., Any]  # value_and_* (or gradient_and_hvp)
    tangent: str | None  # "tx", "ty" or None
    scalar: bool  # f must return a scalar
    has_out: bool

    def __repr__(self) -> str:
        return self.name


OPS = {
    "gradient": Op("gradient", di.prepare_gradient, di.gradient, di.value_and_gradient, None, True, True),
    "jacobian": Op("jacobian", di.prepare_jacobian, di.jacobian, di.value_and_jacobian, None, False, True),
    "hvp": Op("hvp", di.prepare_hvp, di.hvp, di.gradient_and_hvp, "tx", True, False),
    "pullback": Op("pullback", di.prepare_pullback, di.pullback, di.value_and_pullback, "ty", False, False),
}
OTHER_OPS = [OPS[name] for name in ("jacobian", "hvp", "pullback")]  # gradient: see test_errors.py


def tangents_for(op: Op, x: Any) -> tuple[Any, ...]:
    """Tangents (shaped like x, or like f(x) = x-shaped) for op, or ()."""
    if op.tangent is None:
        return ()
    shape = getattr(x, "shape", (3,))
    return ((np.ones(shape) if family(x) != "torch" and family(x) != "jax" else x * 0 + 1),)


def prepare(op: Op, f: Callable[..., Any], backend: Any, x: Any, *contexts: Any, tangents: Any = None) -> Any:
    args = (tangents if tangents is not None else tangents_for(op, x),) if op.tangent else ()
    return op.prepare(f, backend, x, *args, *contexts)


def calls(op: Op, f: Callable[..., Any], backend: Any, x: Any, *contexts: Any, prep: Any = None, **kw: Any):
    """``{label: thunk}`` for the plain and combined forms, prepared when ``prep`` is given,
    else unprepared and prepare + call."""
    tangents = kw.pop("tangents", None)
    t = ((tangents if tangents is not None else tangents_for(op, x)),) if op.tangent else ()
    if prep is not None:
        return {
            f"prepared {op.name}": lambda: op.plain(f, prep, backend, x, *t, *contexts, **kw),
            f"prepared {op.combined.__name__}": lambda: op.combined(f, prep, backend, x, *t, *contexts, **kw),
        }
    return {
        f"prepare_{op.name}": lambda: op.prepare(f, backend, x, *t, *contexts),
        op.name: lambda: op.plain(f, backend, x, *t, *contexts, **kw),
        op.combined.__name__: lambda: op.combined(f, backend, x, *t, *contexts, **kw),
    }


# --- functions -------------------------------------------------------------------------------------------------------


def scalar_f(x, *values):
    xp = di.array_namespace(x)
    return xp.sum(x * x * x) / 3.0


def vector_f(x, *values):
    return x * x * 0.5


def scalar_f2(x, a, b):
    """With two contexts: a matrix ``a`` and a vector ``b``."""
    xp = di.array_namespace(x)
    return xp.sum((a @ x) * x) + xp.sum(b * x)


def vector_f2(x, a, b):
    return a @ x + b * x


def good_f(op: Op, contexts: int = 0) -> Callable[..., Any]:
    if contexts:
        return scalar_f2 if op.scalar else vector_f2
    return scalar_f if op.scalar else vector_f


# --- snapshots: nothing is mutated -----------------------------------------------------------------------------------


def snapshot(value: Any) -> Any:
    if isinstance(value, di.Context):
        return (type(value), snapshot(value.value))
    if family(value) in ("numpy", "torch", "jax"):
        array = to_numpy(value)
        return ("array", family(value), str(value.dtype), array)
    return ("other", copy.deepcopy(value))


def assert_unchanged(before: Any, value: Any, what: str) -> None:
    after = snapshot(value)
    if before[0] == "array":
        assert after[0] == "array" and after[1:3] == before[1:3], f"{what}: family or dtype changed"
        if before[3].dtype == object:
            assert all(a is b for a, b in zip(before[3].ravel(), after[3].ravel())), f"{what} was mutated"
        else:
            np.testing.assert_array_equal(after[3], before[3], err_msg=f"{what} was mutated")
    elif isinstance(before[0], type):  # a context
        assert after[0] is before[0], f"{what}: context kind changed"
        assert_unchanged(before[1], value.value, what)
    else:
        assert after[0] == "other" and repr(after[1]) == repr(before[1]), f"{what} was mutated"


class Unchanged:
    """Snapshots of every argument, checked by :meth:`check`."""

    def __init__(self, **arguments: Any) -> None:
        self.arguments = arguments
        self.before = {name: snapshot(value) for name, value in arguments.items()}

    def check(self) -> None:
        for name, value in self.arguments.items():
            assert_unchanged(self.before[name], value, name)


def raises(error: type[BaseException], call: Callable[[], Any], label: str) -> BaseException:
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, error), f"{label}: {type(info.value).__name__}: {info.value}"
    return info.value


def names(message: str, *words: str) -> None:
    """``message`` names each word (whole word for short ones such as ``x``)."""
    for word in words:
        pattern = rf"(?<![\w.]){re.escape(word)}(?!\w)" if word.isidentifier() and len(word) <= 3 else re.escape(word)
        assert re.search(pattern, message), f"the message does not name {word!r}:\n{message}"


def suggests(message: str, *fixes: str) -> None:
    """``message`` contains at least one of the fixes."""
    assert any(fix in message for fix in fixes), f"the message suggests none of {fixes}:\n{message}"


def params(test: str, *axes: list[tuple[str, Any]]) -> list[Any]:
    """The product of ``axes`` (lists of ``(id, value)``) as pytest params."""
    combos: list[tuple[list[str], list[Any]]] = [([], [])]
    for axis in axes:
        combos = [([*ids, i], [*values, v]) for ids, values in combos for i, v in axis]
    return [pytest.param(*values, id="-".join(ids)) for ids, values in combos]


# Most bad inputs are refused before an engine runs, whether its programs are compiled or not:
# those tests run on each engine's default selector (ENGINE_AXIS). The tests of what f returns or
# raises, of prepared programs and of the numbers they compute add the compiled ones (BACKEND_AXIS).
# What f returns, and the numbers at non-finite points, are checked where f is evaluated, which a
# difference scheme decides (central differences never evaluate f at x): those add every scheme.
ENGINE_AXIS = [(backend_id(b), b) for b in ENGINES]
BACKEND_AXIS = [(backend_id(b), b) for b in BACKENDS]
SCHEME_AXIS = [(backend_id(b), b) for b in BACKENDS_AND_SCHEMES]
OP_AXIS = [(op.name, op) for op in OTHER_OPS]
ALL_OP_AXIS = [(op.name, op) for op in OPS.values()]


# --- x of the wrong kind ---------------------------------------------------------------------------------------------


def _bad_xs() -> list[tuple[str, Any, tuple[str, ...]]]:
    """``(id, x factory, words the fix may use)``."""
    convert = ("astype", "asarray", "double()", "convert", "Convert")
    cases: list[tuple[str, Any, tuple[str, ...]]] = [
        ("int-array", lambda: np.arange(3), convert),
        ("bool-array", lambda: np.array([True, False, True]), convert),
        ("object-array", lambda: np.array([1.0, "a", None], dtype=object), convert),
        ("list", lambda: [1.0, 2.0, 3.0], convert),
        ("None", lambda: None, ("floating-point array",)),
        ("str", lambda: "1.0", ("floating-point array",)),
        ("int", lambda: 3, convert),
        ("bool", lambda: True, convert),
        ("complex", lambda: 1.0 + 2.0j, convert),
    ]
    if "torch" in FAMILIES:
        import torch

        cases.append(("torch-int", lambda: torch.arange(3), convert))
        cases.append(("torch-bool", lambda: torch.ones(3, dtype=torch.bool), convert))
    if "jax" in FAMILIES:
        import jax.numpy as jnp

        cases.append(("jax-int", lambda: jnp.arange(3), convert))
    return cases


_BAD_X = {name: (make, fixes) for name, make, fixes in _bad_xs()}


def _x_params() -> list[Any]:
    """Every (backend, operator, x) case; for gradient only what test_errors.py leaves out."""
    result = params("x", ENGINE_AXIS, OP_AXIS, [(k, k) for k in _BAD_X])
    new_for_gradient = [(k, k) for k in _BAD_X if k in ("object-array", "torch-bool")]
    return result + params("x", ENGINE_AXIS, [("gradient", OPS["gradient"])], new_for_gradient)


@pytest.mark.parametrize(("backend", "op", "kind"), _x_params())
def test_x_of_the_wrong_kind_is_refused_naming_x(backend, op, kind):
    make, fixes = _BAD_X[kind]
    x = make()
    tangents = ((np.ones(3),),) if op.tangent else ()
    watch = Unchanged(x=x)
    thunks = {
        f"prepare_{op.name}": lambda: op.prepare(good_f(op), backend, x, *tangents),
        op.name: lambda: op.plain(good_f(op), backend, x, *tangents),
        op.combined.__name__: lambda: op.combined(good_f(op), backend, x, *tangents),
    }
    for label, call in thunks.items():
        err = raises(di.InvalidInputError, call, label)
        message = str(err)
        names(message, "x", op.name)
        assert "floating-point" in message, message
        suggests(message, *fixes)
        assert isinstance(err, TypeError) and isinstance(err, di.DIError)
    watch.check()


# --- f returning something the operator cannot use -------------------------------------------------------------------


class _Opaque:
    """A non-array object."""

    def __repr__(self) -> str:
        return "<opaque>"


def _bad_outputs(op: Op) -> list[tuple[str, Callable[..., Any], tuple[str, ...]]]:
    """``(id, f, words the message must contain)`` for outputs ``op`` cannot use."""
    outputs = [
        ("int", lambda x, *v: 3, ("int",)),
        ("complex", lambda x, *v: 1.0 + 2.0j, ("complex",)),
        ("complex-array", lambda x, *v: x * (1.0 + 1.0j), ("complex",)),
        ("None", lambda x, *v: None, ("None",)),
        ("object", lambda x, *v: _Opaque(), ("_Opaque",)),
        ("str", lambda x, *v: "1.0", ("str",)),
    ]
    if op.scalar:
        outputs.append(("vector", lambda x, *v: x * 2.0, ("(3,)",)))
    else:
        outputs.append(("bool-array", lambda x, *v: x > 0, ("bool",)))
        outputs.append(("int-array", _int_array, ("int64",)))
    return outputs


def _int_array(x, *values):
    xp = di.array_namespace(x)
    return xp.astype(x > 0, xp.int64)


def _output_params() -> list[Any]:
    """Every (backend, operator, output) case; for gradient only what test_errors.py leaves out."""
    result = []
    for op in OPS.values():
        kinds = [(name, name) for name, _, _ in _bad_outputs(op) if op.name != "gradient" or name == "object"]
        result += params("output", SCHEME_AXIS, [(op.name, op)], kinds)
    return result


@pytest.mark.parametrize(("backend", "op", "kind"), _output_params())
def test_f_returning_an_unusable_output_is_refused(backend, op, kind):
    f, words = {name: (f, words) for name, f, words in _bad_outputs(op)}[kind]
    x = np.array([1.0, -2.0, 0.5])
    t = tangents_for(op, x)
    watch = Unchanged(x=x, tangents=t[0] if t else None)
    for label, call in calls(op, f, backend, x).items():
        if label.startswith("prepare_"):
            try:
                call()  # engines that trace f refuse it here already; others at the call
            except di.InvalidOutputError as err:
                _check_output_message(str(err), op, words)
            continue
        err = raises(di.InvalidOutputError, call, label)
        _check_output_message(str(err), op, words)
        assert isinstance(err, TypeError) and isinstance(err, di.DIError)
    watch.check()


def _check_output_message(message: str, op: Op, words: tuple[str, ...]) -> None:
    names(message, "f", op.name, *words)
    expected = "a real scalar" if op.scalar else "a real floating-point array"
    assert f"{op.name} needs f to return {expected}" in message, message
    suggests(message, "Reduce", "Return", "Differentiate", "use jacobian", "stack")


@pytest.mark.parametrize("operator", ["jacobian", "value_and_jacobian", "pushforward", "pullback"])
def test_finite_differences_refuse_an_output_whose_shape_moves_with_x(operator: str) -> None:
    """f keeps the positive elements of x: perturbing x[0] = 0 changes how many.
    Finite differences compare outputs at nearby points, and numpy would broadcast
    a one-element output into a row of two without a word (a wrong jacobian, before
    the check): the error names both shapes and the way out."""

    def positives(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x[x > 0])

    x = np.array([0.0, 5.0])
    tangents = {"pushforward": (np.ones(2),), "pullback": (np.ones(1),)}
    call = getattr(di, operator)
    with pytest.raises(di.InvalidOutputError, match=r"f returned shape \((1|2),\) at one evaluation and \((1|2),\)"):
        call(positives, di.AutoFiniteDiff(), x, *([tangents[operator]] if operator in tangents else []))
    np.testing.assert_array_equal(x, [0.0, 5.0])


# --- f raising its own exception -------------------------------------------------------------------------------------


class ModelError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message, code)
        self.code = code


class ModelKeyError(KeyError):
    """A user error deriving from a builtin di also derives from (LookupError / TypeError)."""


def _raising(error: BaseException) -> Callable[..., Any]:
    def f(x, *values):
        raise error

    return f


@pytest.mark.parametrize(("backend", "op"), params("raises", BACKEND_AXIS, OP_AXIS))
@pytest.mark.parametrize(
    "error",
    [ModelError("the model diverged", 42), ModelKeyError("theta"), TypeError("f's own type error")],
    ids=["custom", "keyerror", "typeerror"],
)
def test_an_exception_raised_by_f_comes_through_unchanged(backend, op, error):
    f = _raising(error)
    x = np.array([1.0, 2.0, 3.0])
    a = di.Constant(np.eye(3))
    tangents = tangents_for(op, x)
    t = (tangents,) if op.tangent else ()
    watch = Unchanged(x=x, a=a, tangents=tangents[0] if tangents else None)
    thunks = {
        "prepare + call": lambda: op.plain(f, prepare(op, f, backend, x, a), backend, x, *t, a),
        op.name: lambda: op.plain(f, backend, x, *t, a),
        op.combined.__name__: lambda: op.combined(f, backend, x, *t, a),
    }
    if op.has_out:
        out = np.full((3, 3), 7.0)
        watch = Unchanged(x=x, a=a, out=out)
        thunks["with out="] = lambda: op.plain(f, backend, x, a, out=out)
    for label, call in thunks.items():
        with pytest.raises(type(error)) as info:
            call()
        assert type(info.value) is type(error), f"{label}: {type(info.value).__name__}"
        assert info.value.args == error.args, f"{label}: {info.value.args}"
        assert not isinstance(info.value, di.DIError), label
    watch.check()


def _every_operator_call(f: Callable[..., Any], backend: Any) -> list[tuple[str, Callable[[], Any]]]:
    """``(label, call)`` for each public operator function on ``backend``, unprepared
    and prepared, at a point and tangents of the kind its family takes."""
    from di.operators.table import OPERATORS

    calls: list[tuple[str, Callable[[], Any]]] = []
    for operator_family, operator in OPERATORS.items():
        x = np.array(0.5) if operator.scalar_x else np.array([1.0, 2.0, 3.0])
        t = ((np.ones(3),),) if operator.tangents else ()
        for name in operator.names:
            function = getattr(di, name)
            calls.append((name, lambda function=function, x=x, t=t: function(f, backend, x, *t)))
        prepare, plain = getattr(di, f"prepare_{operator_family}"), getattr(di, operator.names[0])

        def prepared(prepare: Any = prepare, plain: Any = plain, x: Any = x, t: Any = t) -> Any:
            prep = prepare(f, backend, x, *t)  # (where preparation evaluates f, it raises here)
            return plain(f, prep, backend, x, *t)

        calls.append((f"prepare_{operator_family} + call", prepared))
    return calls


@pytest.mark.parametrize(
    "error",
    [StopIteration("f's own stop", 3), ModelError("the model diverged", 42)],
    ids=["stopiteration", "custom"],
)
def test_an_exception_raised_by_f_comes_through_every_operator(backend, error):
    """Every operator function, prepared and not: f's exception keeps its type and
    arguments (finite differences evaluated f in generator expressions, where Python
    turns a StopIteration into RuntimeError)."""
    for label, call in _every_operator_call(_raising(error), backend):
        with pytest.raises(type(error)) as info:
            call()
        assert type(info.value) is type(error), f"{label}: {type(info.value).__name__}: {info.value}"
        assert info.value.args == error.args, f"{label}: {info.value.args}"


def test_an_exception_raised_by_f_only_at_execution_comes_through(backend):
    """Engines that call f at every execution (not compiled ones, which traced it at preparation)."""
    calls_left = {"n": 10**9}

    def f(x, *values):
        calls_left["n"] -= 1
        if calls_left["n"] < 0:
            raise ModelError("late failure", 7)
        return vector_f(x)

    x = np.array([1.0, 2.0, 3.0])
    prep = di.prepare_jacobian(f, backend, x)
    calls_left["n"] = 0
    try:
        jac = di.jacobian(f, prep, backend, x)
    except ModelError as err:
        assert err.args == ("late failure", 7)
    else:  # a compiled program no longer calls f: the result must still be right
        np.testing.assert_allclose(to_numpy(jac), np.diag(x), rtol=1e-6)
    calls_left["n"] = 10**9
    np.testing.assert_allclose(to_numpy(di.jacobian(f, prep, backend, x)), np.diag(x), rtol=1e-6)


# --- contexts: number, order, wrapping -------------------------------------------------------------------------------


def _context_args():
    a = np.arange(9.0).reshape(3, 3) / 10.0
    b = np.array([1.0, -1.0, 2.0])
    return a, b


@pytest.mark.parametrize(("backend", "op"), params("contexts", ENGINE_AXIS, OP_AXIS))
def test_wrong_number_of_contexts_for_a_prep(backend, op):
    a, b = _context_args()
    x = np.array([0.5, 1.0, -1.5])
    f = good_f(op, contexts=2)
    ca, cb = di.Constant(a), di.Constant(b)
    prep = prepare(op, f, backend, x, ca, cb)
    watch = Unchanged(x=x, a=ca, b=cb)
    for given, wrong in (((ca,), "context 2"), ((ca, cb, di.Constant(b)), "context 3")):
        for label, call in calls(op, f, backend, x, *given, prep=prep).items():
            message = str(raises(di.PreparationMismatchError, call, label))
            rows = _report_rows(message)
            assert rows.get(wrong, "").startswith("differs"), f"{label}: {wrong} not marked:\n{message}"
            assert all(rows[k].startswith("ok") for k in rows if k != wrong), f"{label}:\n{message}"
            suggests(message, f"di.prepare_{op.name}")
            suggests(message, "strict=False")
    watch.check()


@pytest.mark.parametrize(("backend", "op"), params("contexts", ENGINE_AXIS, ALL_OP_AXIS))
def test_contexts_in_the_wrong_order_for_a_prep(backend, op):
    a, b = _context_args()
    x = np.array([0.5, 1.0, -1.5])
    f = good_f(op, contexts=2)
    ca, cb = di.Constant(a), di.Constant(b)
    prep = prepare(op, f, backend, x, ca, cb)
    watch = Unchanged(x=x, a=ca, b=cb)
    for label, call in calls(op, f, backend, x, cb, ca, prep=prep).items():
        message = str(raises(di.PreparationMismatchError, call, label))
        rows = _report_rows(message)
        assert rows["context 1"].startswith("differs") and rows["context 2"].startswith("differs"), message
        assert "(3, 3)" in rows["context 1"] and "(3,)" in rows["context 1"], message
        assert rows["x"].startswith("ok") and rows["f"].startswith("ok"), message
        suggests(message, f"di.prepare_{op.name}")
    watch.check()


@pytest.mark.parametrize("backend", backend_params(ENGINES))
def test_wrong_number_of_contexts_without_a_prep_is_fs_own_error(backend):
    """Without a prep there is nothing to compare with: f's own TypeError names the missing argument."""
    a, _b = _context_args()
    x = np.array([0.5, 1.0, -1.5])
    with pytest.raises(TypeError, match="'b'") as info:
        di.jacobian(vector_f2, backend, x, di.Constant(a))
    assert not isinstance(info.value, di.DIError)


@pytest.mark.parametrize(("backend", "op"), params("unwrapped", ENGINE_AXIS, OP_AXIS))
@pytest.mark.parametrize("position", [1, 2])
def test_an_unwrapped_value_where_a_context_is_expected(backend, op, position):
    a, b = _context_args()
    x = np.array([0.5, 1.0, -1.5])
    f = good_f(op, contexts=2)
    given = (a, di.Constant(b)) if position == 1 else (di.Constant(a), b)
    prep = prepare(op, f, backend, x, di.Constant(a), di.Constant(b))
    watch = Unchanged(x=x, a=a, b=b)
    thunks = {**calls(op, f, backend, x, *given), **calls(op, f, backend, x, *given, prep=prep)}
    for label, call in thunks.items():
        err = raises(di.InvalidInputError, call, label)
        message = str(err)
        names(message, f"context {position}")
        suggests(message, "di.Constant(")
        suggests(message, "di.Cache(")
    watch.check()


@pytest.mark.parametrize("backend", backend_params(ENGINES))
def test_an_unwrapped_float_where_a_context_is_expected(backend):
    x = np.array([0.5, 1.0, -1.5])

    def f(x, c):
        return x * c

    with pytest.raises(di.InvalidInputError) as info:
        di.jacobian(f, backend, x, 2.0)
    names(str(info.value), "context 1", "float")
    suggests(str(info.value), "di.Constant(")


# --- preps used with other arguments ---------------------------------------------------------------------------------

_REPORT_ROW = re.compile(r"^\s+(f|backend|x|tx|ty|context \d+)\s+(ok|differs)\b(.*)$")


def _report_rows(message: str) -> dict[str, str]:
    rows = {}
    for line in message.splitlines()[1:]:
        match = _REPORT_ROW.match(line)
        if match:
            rows[match.group(1)] = match.group(2) + match.group(3)
    return rows


def _other_backend(backend: Any) -> Any:
    return (
        di.AutoFiniteDiff(method="forward") if backend != di.AutoFiniteDiff(method="forward") else di.AutoFiniteDiff()
    )


@pytest.mark.parametrize(
    ("backend", "op", "case"), params("prep", ENGINE_AXIS, ALL_OP_AXIS, [("other-operator", None)])
)
def test_a_prep_from_another_operator(backend, op, case):
    x = np.array([0.5, 1.0, -1.5])
    watch = Unchanged(x=x)
    for other in OPS.values():
        if other.name == op.name:
            continue
        prep = prepare(other, good_f(other), backend, x)
        for label, call in calls(op, good_f(op), backend, x, prep=prep).items():
            message = str(raises(di.InvalidInputError, call, f"{label} with a {other.name} prep"))
            names(message, f"prepare_{other.name}", f"prepare_{op.name}")
            # The suggested call is complete: it names the tangents when the operator takes some.
            suggested = f"di.prepare_{op.name}(f, backend, x, {op.tangent}" if op.tangent else f"di.prepare_{op.name}("
            assert suggested in message, f"{label}: the fix does not show {suggested!r}:\n{message}"
    watch.check()


@pytest.mark.parametrize(("backend", "op"), params("prep", ENGINE_AXIS, OP_AXIS))
def test_a_prep_for_another_f_or_backend(backend, op):
    x = np.array([0.5, 1.0, -1.5])
    prep = prepare(op, good_f(op), backend, x)

    def other_f(x, *values):
        return good_f(op)(x, *values)

    other = _other_backend(backend)
    for what, f, b in (("f", other_f, backend), ("backend", good_f(op), other)):
        for label, call in calls(op, f, b, x, prep=prep).items():
            message = str(raises(di.PreparationMismatchError, call, label))
            rows = _report_rows(message)
            assert rows[what].startswith("differs"), f"{label}:\n{message}"
            assert all(rows[k].startswith("ok") for k in rows if k != what), f"{label}:\n{message}"
            suggests(message, f"di.prepare_{op.name}")
    assert repr(other) in message and repr(backend) in message


def _other_xs() -> list[tuple[str, Callable[[], Any], str]]:
    """``(id, x factory, what the report must show)`` for an x of another signature than float64 (3,)."""
    cases = [
        ("shape", lambda: np.zeros(4), "(4,)"),
        ("dtype", lambda: np.zeros(3, dtype=np.float32), "float32"),
        ("0-d", lambda: np.zeros(()), "()"),
        ("pytree", lambda: {"w": np.zeros(3)}, "dict"),
    ]
    for name in FAMILIES:
        if name != "numpy":
            cases.append((name, lambda name=name: as_family(np.zeros(3), name), name))
    return cases


@pytest.mark.parametrize(("backend", "op"), params("prep", BACKEND_AXIS, OP_AXIS))
@pytest.mark.parametrize(("kind", "make", "shown"), [pytest.param(*c, id=c[0]) for c in _other_xs()])
def test_a_prep_for_another_signature_of_x(backend, op, kind, make, shown):
    x0 = np.array([0.5, 1.0, -1.5])
    prep = prepare(op, good_f(op), backend, x0)
    x = make()
    t = tangents_for(op, x0)  # the prepared tangents: only x differs
    watch = Unchanged(x=x if kind != "pytree" else x["w"])
    for label, call in calls(op, good_f(op), backend, x, prep=prep, tangents=t if t else None).items():
        message = str(raises(di.PreparationMismatchError, call, label))
        rows = _report_rows(message)
        assert rows["x"].startswith("differs") and "(3,)" in rows["x"] and shown in rows["x"], f"{label}:\n{message}"
        suggests(message, f"di.prepare_{op.name}")
    watch.check()


_TANGENT_OPS = [(op.name, op) for op in OTHER_OPS if op.tangent]


@pytest.mark.parametrize(("backend", "op"), params("tangents", ENGINE_AXIS, _TANGENT_OPS))
def test_a_prep_for_other_tangents(backend, op):
    x = np.array([0.5, 1.0, -1.5])
    prep = prepare(op, good_f(op), backend, x)
    label = op.tangent
    for kind, tangents in (
        ("count", (np.ones(3), np.ones(3))),
        ("shape", (np.ones(4),)),
        ("dtype", (np.ones(3, dtype=np.float32),)),
    ):
        for call_label, call in calls(op, good_f(op), backend, x, prep=prep, tangents=tangents).items():
            message = str(raises(di.PreparationMismatchError, call, f"{call_label} ({kind})"))
            rows = _report_rows(message)
            assert rows[label].startswith("differs"), f"{call_label} ({kind}):\n{message}"
            suggests(message, f"di.prepare_{op.name}")


@pytest.mark.parametrize(("backend", "op"), params("bare-tangent", ENGINE_AXIS, _TANGENT_OPS))
def test_a_bare_tangent_instead_of_a_tuple(backend, op):
    """Unprepared and prepared calls alike say to wrap the tangent in a tuple."""
    x = np.array([0.5, 1.0, -1.5])
    prep = prepare(op, good_f(op), backend, x)
    thunks = {**calls(op, good_f(op), backend, x, tangents=np.ones(3))}
    thunks.update(calls(op, good_f(op), backend, x, prep=prep, tangents=np.ones(3)))
    for _label, call in thunks.items():
        with pytest.raises(di.DIError) as info:
            call()
        names(str(info.value), op.tangent)
        suggests(str(info.value), "tuple")


@pytest.mark.parametrize(("backend", "op"), params("tangent-shape", ENGINE_AXIS, _TANGENT_OPS))
def test_an_unprepared_tangent_of_the_wrong_shape(backend, op):
    """A tangent that does not fit x (tx) or f(x) (ty) is refused naming it, not answered with the engine's
    own error or, worse, a result of the wrong shape."""
    x = np.array([0.5, 1.0, -1.5])
    t = np.ones(4)
    watch = Unchanged(x=x, t=t)
    for _label, call in calls(op, good_f(op), backend, x, tangents=(t,)).items():
        with pytest.raises(di.DIError) as info:
            call()
        names(str(info.value), op.tangent, "(4,)", "(3,)")
    watch.check()


@pytest.mark.parametrize("backend", params("numpy-scalar", BACKEND_AXIS))
def test_a_numpy_scalar_x_for_a_0d_prep(backend):
    """If a numpy scalar is refused where a 0-d array was prepared, the report must show what differs."""
    f = OPS["gradient"].plain
    prep = di.prepare_gradient(scalar_f, backend, np.array(0.5))
    try:
        g = f(scalar_f, prep, backend, np.float64(2.0))
    except di.PreparationMismatchError as err:
        rows = _report_rows(str(err))
        prepared, _, given = rows["x"].partition("given")
        assert prepared.replace("differs", "").replace("prepared", "").strip() != given.strip(), str(err)
    else:
        np.testing.assert_allclose(to_numpy(g), 4.0, rtol=1e-6)


# --- out= ------------------------------------------------------------------------------------------------------------


def _bad_outs(x_family: str) -> list[tuple[str, Callable[[], Any], str]]:
    """``(id, out factory, what the message must show)`` for a (3, 3) float64 jacobian."""
    cases = [
        ("shape", lambda: np.full((3, 4), 7.0), "(3, 4)"),
        ("shape-of-x", lambda: np.full(3, 7.0), "(3,)"),
        ("dtype", lambda: np.full((3, 3), 7.0, dtype=np.float32), "float32"),
        ("list", lambda: [[7.0] * 3] * 3, "list"),
    ]
    if "torch" in FAMILIES and x_family == "numpy":
        import torch

        cases.append(("family", lambda: torch.full((3, 3), 7.0, dtype=torch.float64), "torch"))
    return cases


@pytest.mark.parametrize(("backend", "combined"), params("out", ENGINE_AXIS, [("plain", False), ("value_and", True)]))
@pytest.mark.parametrize(("kind", "make", "shown"), [pytest.param(*c, id=c[0]) for c in _bad_outs("numpy")])
def test_out_that_does_not_fit_the_jacobian(backend, combined, kind, make, shown):
    x = np.array([0.5, 1.0, -1.5])
    c = di.Constant(np.ones(3))
    prep = di.prepare_jacobian(lambda x, c: x * x * c, backend, x, c)
    out = make()
    watch = Unchanged(x=x, c=c, out=out)
    function = di.value_and_jacobian if combined else di.jacobian
    for label, call in {
        "prepared": lambda: function(prep.f, prep, backend, x, c, out=out),
        "unprepared": lambda: function(prep.f, backend, x, c, out=out),
    }.items():
        message = str(raises(di.OutBufferError, call, label))
        names(message, "out", "jacobian", shown)
        suggests(message, "must be")
    watch.check()


@pytest.mark.parametrize("backend", params("out-jax", ENGINE_AXIS))
def test_out_for_a_jax_x_is_refused(backend):
    if "jax" not in FAMILIES:
        pytest.skip("jax is not installed")
    x = as_family(np.array([0.5, 1.0, -1.5]), "jax")
    out = np.full((3, 3), 7.0)
    watch = Unchanged(x=x, out=out)
    for function in (di.jacobian, di.value_and_jacobian):
        call = functools.partial(function, vector_f, backend, x, out=out)
        message = str(raises(di.OutBufferError, call, "jax x"))
        names(message, "out", "JAX")
        suggests(message, "without out=")
    watch.check()


@pytest.mark.parametrize("backend", params("out-torch", ENGINE_AXIS))
def test_out_of_the_numpy_family_for_a_torch_x(backend):
    if "torch" not in FAMILIES:
        pytest.skip("torch is not installed")
    import torch

    x = torch.tensor([0.5, 1.0, -1.5], dtype=torch.float64)
    out = np.full(3, 7.0)
    watch = Unchanged(x=x, out=out)
    for function in (di.gradient, di.value_and_gradient):
        call = functools.partial(function, scalar_f, backend, x, out=out)
        message = str(raises(di.OutBufferError, call, "torch x"))
        names(message, "out", "torch", "numpy")
    jac_out = np.full((3, 3), 7.0)
    message = str(raises(di.OutBufferError, lambda: di.jacobian(vector_f, backend, x, out=jac_out), "torch x"))
    names(message, "out", "torch", "numpy")
    watch.check()
    assert_unchanged(snapshot(np.full((3, 3), 7.0)), jac_out, "out")


# --- NaN and Inf propagate -------------------------------------------------------------------------------------------

_EXACT = [b for b in BACKENDS_AND_SCHEMES if not approximates(b)]


@pytest.mark.parametrize(("backend", "op"), params("nan", SCHEME_AXIS, ALL_OP_AXIS))
def test_nan_and_inf_in_x_propagate_without_error(backend, op):
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -0.5])
    v = np.array([1.0, 1.0, 1.0, 2.0, 3.0])
    watch = Unchanged(x=x, v=v)
    exact = backend in _EXACT
    with np.errstate(all="ignore"):
        if op.name == "gradient":  # f = sum(x**3) / 3: gradient x**2
            result = di.gradient(scalar_f, backend, x)
            expected = x * x
        elif op.name == "hvp":  # H v = 2 x v
            result = di.hvp(scalar_f, backend, x, (v,))[0]
            expected = 2.0 * x * v
        elif op.name == "pullback":  # f = x**2 / 2: J^T v = x v
            result = di.pullback(vector_f, backend, x, (v,))[0]
            expected = x * v
        else:  # diag(x)
            result = di.jacobian(vector_f, backend, x)
            expected = np.diag(x)
    result = to_numpy(result)
    assert result.shape == expected.shape and result.dtype == np.float64
    finite = np.isfinite(x)
    if op.name == "jacobian":
        diagonal, off = np.diagonal(result), result[~np.eye(5, dtype=bool)]
        assert np.all((off == 0) | np.isnan(off)), f"off-diagonal entries: {result}"
        result, expected = diagonal, np.diagonal(expected)
    # Non-finite inputs give non-finite outputs where the exact answer is non-finite: they are not hidden.
    assert not np.isfinite(result[~finite]).any(), f"{op.name}: {result}"
    if exact:
        np.testing.assert_array_equal(result, expected)  # NaN == NaN, inf == inf here
    else:  # finite differences at a NaN point: NaN (f is NaN around it), never a wrong finite number
        ok = np.isnan(result) | np.isclose(result, expected, rtol=1e-5)
        assert ok.all(), f"{op.name}: {result} vs {expected}"
    watch.check()


@pytest.mark.parametrize("backend", backend_params(BACKENDS_AND_SCHEMES))
def test_nan_in_a_constant_propagates(backend):
    x = np.array([0.5, 1.0, -1.5])
    c = di.Constant(np.array([1.0, np.nan, 2.0]))
    watch = Unchanged(x=x, c=c)
    g = to_numpy(di.gradient(lambda x, c: di.array_namespace(x).sum(x * x * c), backend, x, c))
    assert np.isnan(g[1]) and (backend not in _EXACT or np.allclose(g[[0, 2]], [1.0, -6.0]))
    watch.check()


# --- a backend whose engine is not installed -------------------------------------------------------------------------

_MISSING = textwrap.dedent(
    """
    import json, sys
    sys.modules[{engine!r}] = None  # as if the engine were not installed: import fails, find_spec is None
    import numpy as np
    import di

    f = lambda x: (x * x).sum()
    g = lambda x: x * x
    x, t = np.array([1.0, 2.0]), (np.ones(2),)
    report = {{}}
    for selector in {selectors}:
        calls = {{
            "prepare_jacobian": lambda: di.prepare_jacobian(g, selector, x),
            "jacobian": lambda: di.jacobian(g, selector, x),
            "value_and_jacobian": lambda: di.value_and_jacobian(g, selector, x),
            "prepare_hvp": lambda: di.prepare_hvp(f, selector, x, t),
            "hvp": lambda: di.hvp(f, selector, x, t),
            "gradient_and_hvp": lambda: di.gradient_and_hvp(f, selector, x, t),
            "prepare_pullback": lambda: di.prepare_pullback(g, selector, x, t),
            "pullback": lambda: di.pullback(g, selector, x, t),
            "value_and_pullback": lambda: di.value_and_pullback(g, selector, x, t),
            "hessian": lambda: di.hessian(f, selector, x),
            "pushforward": lambda: di.pushforward(g, selector, x, t),
        }}
        for name, call in calls.items():
            try:
                call()
            except Exception as err:
                report[f"{{selector!r}} {{name}}"] = {{
                    "type": type(err).__name__,
                    "di": isinstance(err, di.BackendNotInstalledError),
                    "import_error": isinstance(err, ImportError),
                    "message": str(err),
                }}
            else:
                report[f"{{selector!r}} {{name}}"] = None
    report["fd"] = di.jacobian(g, di.AutoFiniteDiff(), x).tolist()
    print(json.dumps(report))
    """
)

_ENGINES = [
    ("jax", "[di.AutoJAX(), di.AutoJAX(jit=True)]", "JAX", "jax"),
    ("torch", "[di.AutoTorch(), di.AutoTorch(compile=True)]", "PyTorch", "torch"),
    ("autograd", "[di.AutoAutograd()]", "autograd", "autograd"),
]


@pytest.mark.parametrize(("engine", "selectors", "display", "extra"), [pytest.param(*e, id=e[0]) for e in _ENGINES])
def test_every_operator_of_a_backend_whose_engine_is_missing(engine, selectors, display, extra):
    script = _MISSING.format(engine=engine, selectors=selectors)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(report.pop("fd"), [[2.0, 0.0], [0.0, 4.0]], rtol=1e-6, atol=1e-9)
    assert report, "no calls"
    for call, error in report.items():
        assert error is not None, f"{call}: no error although {engine} is missing"
        assert error["type"] == "BackendNotInstalledError" and error["di"] and error["import_error"], (call, error)
        names(error["message"], display)
        suggests(error["message"], f"pip install 'differentiation-interface[{extra}]'")


# --- arguments that hold themselves ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
@pytest.mark.parametrize("argument", ["x", "context 1", "tx[0]"])
def test_an_argument_that_holds_itself_is_refused_naming_it(backend: Any, argument: str) -> None:
    """optree cannot flatten a list inside itself: a di error names the argument,
    with optree's RecursionError as its cause, before f or the engine runs."""
    cycle: list[Any] = [np.array([1.0, 2.0])]
    cycle.append(cycle)
    x, c = np.array([1.0, 2.0]), np.array([3.0, 4.0])

    def f(x: Any, c: Any) -> Any:
        xp = di.array_namespace(c)
        return xp.sum(c * x**2)

    gradient_prep = di.prepare_gradient(f, backend, x, di.Constant(c))
    pushforward_prep = di.prepare_pushforward(f, backend, x, (x,), di.Constant(c))
    calls = {
        "x": [
            lambda: di.gradient(f, backend, cycle, di.Constant(c)),
            lambda: di.gradient(f, gradient_prep, backend, cycle, di.Constant(c)),
        ],
        "context 1": [
            lambda: di.gradient(f, backend, x, di.Constant(cycle)),
            lambda: di.gradient(f, gradient_prep, backend, x, di.Constant(cycle)),
        ],
        "tx[0]": [
            lambda: di.pushforward(f, backend, x, (cycle,), di.Constant(c)),
            lambda: di.pushforward(f, pushforward_prep, backend, x, (cycle,), di.Constant(c)),
        ],
    }
    refusal = rf"^{re.escape(argument)} cannot be flattened.*holds itself"
    for call in calls[argument]:  # unprepared, then a strict prep's refusal
        with pytest.raises(di.InvalidInputError, match=refusal) as info:
            call()
        assert isinstance(info.value.__cause__, RecursionError)


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
def test_a_tangent_that_is_not_an_array_shaped_like_x_is_named(backend: Any) -> None:
    """A list of NumPy scalars is a pytree, not an array shaped like x: the error
    says what it is and how to convert it (it said 'not ()' before)."""
    x = np.array([1.0, -2.0, 0.5])

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return x**2 * xp.sum(x)

    as_list = list(np.array([1.0, 0.0, 2.0]))
    with pytest.raises(
        di.InvalidInputError, match=r"tx\[0\] must be an array shaped like x, \(3,\), not list.*np\.asarray"
    ):
        di.pushforward(f, backend, x, (as_list,))
    with pytest.raises(di.InvalidInputError, match=r"tx\[0\] must have the shape of x, \(3,\), not \(2,\)"):
        di.pushforward(f, backend, x, (np.ones(2),))


_PYTREE_TANGENT_OPS = {
    "hvp": (di.prepare_hvp, di.hvp, di.gradient_and_hvp),
    "pushforward": (di.prepare_pushforward, di.pushforward, di.value_and_pushforward),
}


def _tangents_unlike_a_pytree_x() -> list[Any]:
    """``(id, tangent, words)`` for x = {"w": (3,), "v": ()}: what the refusal names."""
    structure = ("tx[0] must have the structure of x", "{'w': (3,), 'v': ()}")
    return [
        pytest.param({"w": np.ones(3)}, (*structure, "tx[0]['v']"), id="missing-leaf"),
        pytest.param({"w": np.ones(2), "v": np.array(1.0)}, ("tx[0]['w']", "x['w']", "(3,)", "(2,)"), id="leaf-shape"),
        pytest.param(np.ones(4), (*structure, "(4,)"), id="array"),
    ]


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
@pytest.mark.parametrize("operator", list(_PYTREE_TANGENT_OPS))
@pytest.mark.parametrize(("tangent", "words"), _tangents_unlike_a_pytree_x())
def test_a_tangent_unlike_a_pytree_x_is_named_by_its_path(backend, operator, tangent, words):
    """A tangent of another structure than a pytree x, or with a leaf of another shape, is refused at
    preparation naming tx[i] and the leaf (JAX raised its own errors, the flattening backends a prep's
    mismatch about a strict=False prep the caller never made); a strict prep made for good tangents
    reports them as differing."""
    prepare, plain, combined = _PYTREE_TANGENT_OPS[operator]
    x = {"w": np.array([1.0, 2.0, -1.0]), "v": np.array(0.5)}

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x["w"] ** 2) + 3.0 * x["v"] ** 2

    watch = Unchanged(x=x, t=tangent)
    for label, call in {
        "unprepared": lambda: plain(f, backend, x, (tangent,)),
        "unprepared combined": lambda: combined(f, backend, x, (tangent,)),
        "preparation": lambda: prepare(f, backend, x, (tangent,)),
    }.items():
        message = str(raises(di.InvalidInputError, call, label))
        names(message, *words)
        assert "strict=False" not in message, f"{label}:\n{message}"
    prep = prepare(f, backend, x, ({"w": np.ones(3), "v": np.array(1.0)},))
    message = str(raises(di.PreparationMismatchError, lambda: plain(f, prep, backend, x, (tangent,)), "strict prep"))
    assert _report_rows(message)["tx"].startswith("differs"), message
    watch.check()


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
def test_a_read_only_out_is_refused_before_f_runs(backend: Any) -> None:
    """A NumPy buffer whose writeable flag is off: OutBufferError up front (it was
    NumPy's ValueError from the copy, after the work), prepared or not; a prepared
    gradient does not run f (an unprepared call prepares first, which traces f
    on a compiled backend)."""
    x = np.array([0.5, 1.0, -1.5])
    calls: list[int] = []

    def f(x: Any) -> Any:
        calls.append(1)
        xp = di.array_namespace(x)
        return xp.sum(x**2)

    prep = di.prepare_gradient(f, backend, x)
    out = np.full(3, 7.0)
    out.flags.writeable = False
    calls.clear()
    with pytest.raises(di.OutBufferError, match=r"read-only.*writable buffer"):
        di.gradient(f, prep, backend, x, out=out)
    assert calls == []
    with pytest.raises(di.OutBufferError, match=r"read-only.*writable buffer"):
        di.gradient(f, backend, x, out=out)
    with pytest.raises(di.OutBufferError, match=r"read-only.*writable buffer"):
        di.jacobian(f, backend, x, out=out)  # checked against the result, before the copy
    assert np.array_equal(out, np.full(3, 7.0))


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
def test_out_for_a_python_float_x_receives_the_result(backend: Any) -> None:
    """A Python float x gives writable 0-d NumPy float64 results (operators.md), so
    out= takes a NumPy buffer of the result's shape; it was refused saying the
    results are immutable. A buffer that does not fit is still refused."""

    def curve(t: Any) -> Any:
        xp = di.array_namespace(t)
        return xp.stack([t**2, t**3])

    def cube(t: Any) -> Any:
        return t**3

    out = np.full((), 7.0)
    assert di.derivative(cube, backend, 0.5, out=out) is out
    np.testing.assert_allclose(out, 0.75, rtol=1e-6)
    prep = di.prepare_second_derivative(cube, backend, 0.5)
    returned = di.value_derivative_and_second_derivative(cube, prep, backend, 0.5, out=out)
    assert returned[-1] is out
    np.testing.assert_allclose(out, 3.0, rtol=1e-4)
    out = np.full((), 7.0)
    assert di.gradient(cube, backend, 2.0, out=out) is out
    np.testing.assert_allclose(out, 12.0, rtol=1e-6)
    vector = np.full(2, 7.0)
    assert di.derivative(curve, backend, 2.0, out=vector) is vector
    np.testing.assert_allclose(vector, [4.0, 12.0], rtol=1e-6)
    wrong = np.full(3, 7.0)
    with pytest.raises(di.OutBufferError, match=r"out does not fit the derivative: it must be numpy float64 \(2,\)"):
        di.derivative(curve, backend, 2.0, out=wrong)
    assert np.array_equal(wrong, np.full(3, 7.0))


# --- tangents of complex numbers, or of no numbers -------------------------------------------------------------------


def _cube(x: Any) -> Any:
    return x**3


def _cube_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**3)


_TANGENT_OPS = {  # name: (prepare, plain, combined, f, label); f(x) is shaped like x, its Jacobian diag(3 x**2)
    "pushforward": (di.prepare_pushforward, di.pushforward, di.value_and_pushforward, _cube, "tx"),
    "pullback": (di.prepare_pullback, di.pullback, di.value_and_pullback, _cube, "ty"),
    "hvp": (di.prepare_hvp, di.hvp, di.gradient_and_hvp, _cube_sum, "tx"),  # Hessian diag(6 x)
}


def _odd_tangents() -> list[tuple[str, Callable[[], Any], tuple[str, ...]]]:
    """``(id, tangent factory, words the fix must use)`` for x = [1, 2]."""
    cases: list[tuple[str, Callable[[], Any], tuple[str, ...]]] = [
        ("complex", lambda: np.array([1 + 2j, 1.0]), ("complex", "real and imaginary parts", "t.real, t.imag")),
        ("object", lambda: np.array([1.0, 1.0], dtype=object), ("object", "np.asarray(t, dtype=float)")),
        ("string", lambda: np.array(["1", "1"]), ("<U1", "np.asarray(t, dtype=float)")),
    ]
    if "torch" in FAMILIES:
        import torch

        cases.append(("torch-complex", lambda: torch.tensor([1 + 2j, 1.0]), ("complex64", "real and imaginary parts")))
    if "jax" in FAMILIES:
        cases.append(("jax-complex", lambda: as_family(np.array([1 + 2j, 1.0]), "jax"), ("complex", "t.real")))
    return cases


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
@pytest.mark.parametrize("operator", list(_TANGENT_OPS))
@pytest.mark.parametrize(("kind", "make", "words"), [pytest.param(*c, id=c[0]) for c in _odd_tangents()])
def test_a_complex_or_non_numeric_tangent_is_refused_naming_it(backend, operator, kind, make, words):
    """Every engine dropped a complex tangent's imaginary part without a word
    (pushforward of x**3 along [1+2j, 1] gave [3, 12]); object arrays raised the
    engine's own TypeError or were taken. Refused now, unprepared, at preparation
    and by a strict prep made with real tangents, naming the tangent."""
    prepare, plain, combined, f, label = _TANGENT_OPS[operator]
    x = np.array([1.0, 2.0])
    tangent = make()
    prep = prepare(f, backend, x, (np.ones(2),))
    watch = Unchanged(x=x)
    for name, call in {
        "unprepared": lambda: plain(f, backend, x, (np.ones(2), tangent)),
        "unprepared combined": lambda: combined(f, backend, x, (tangent,)),
        "preparation": lambda: prepare(f, backend, x, (tangent,)),
        "strict prep": lambda: plain(f, prep, backend, x, (tangent,)),
    }.items():
        message = str(raises(di.InvalidInputError, call, f"{kind} {name}"))
        index = "1" if name == "unprepared" else "0"
        names(message, f"{label}[{index}]", *words)
    watch.check()


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
def test_a_complex_leaf_of_a_pytree_tangent_is_named_by_its_path(backend):
    x = {"a": np.array([1.0, 2.0]), "b": np.array(0.5)}

    def f(x: Any) -> Any:
        return x["a"] * x["b"]

    tangent = {"a": np.ones(2), "b": np.array(1j)}
    message = str(raises(di.InvalidInputError, lambda: di.pushforward(f, backend, x, (tangent,)), "pytree"))
    names(message, "tx[0]['b']", "real and imaginary parts")


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
@pytest.mark.parametrize("operator", list(_TANGENT_OPS))
def test_int_and_bool_tangents_are_real_numbers(backend, operator):
    prepare, plain, _, f, _ = _TANGENT_OPS[operator]
    x = np.array([1.0, 2.0])
    scale = np.array([6.0, 12.0]) if operator == "hvp" else np.array([3.0, 12.0])
    tangents = (np.array([2, -1]), np.array([True, False]))
    expected = [scale * np.array([2.0, -1.0]), scale * np.array([1.0, 0.0])]
    prep = prepare(f, backend, x, tangents)
    # forward differences of forward-difference gradients (hvp): first order, about 2e-5
    rtol = 1e-4 if getattr(backend, "method", None) == "forward" else 1e-5
    for results in (plain(f, backend, x, tangents), plain(f, prep, backend, x, tangents)):
        for result, wanted in zip(results, expected):
            np.testing.assert_allclose(to_numpy(result), wanted, rtol=rtol, atol=1e-6, err_msg=operator)


# --- NumPy masked arrays and matrices --------------------------------------------------------------


def _sum_of_squares(x: Any, *values: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**2)


_SUBCLASSES = [
    pytest.param(
        lambda: np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0]),
        ("masked array", ".filled(fill_value)", "np.asarray("),
        id="masked",
    ),
    pytest.param(lambda: np.matrix([[1.0, 2.0, 3.0]]), ("np.matrix", "np.asarray("), id="matrix"),
]


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
@pytest.mark.parametrize(("make", "words"), _SUBCLASSES)
def test_a_masked_array_or_matrix_is_refused_wherever_it_is_passed(backend, make, words):
    """A masked x lost its mask on AutoTorch, AutoJAX() and finite differences
    (the gradient of sum(x**2) came back [2, 4, 6] while f ignores the masked
    element) and raised the engine's own error on autograd and AutoJAX(jit=True);
    an np.matrix x raised a raw TypeError on autograd only, and changes what * means.
    Refused as x, as a pytree leaf of x, as a Constant's value and as a tangent,
    unprepared, at preparation and by a strict prep."""
    value = make()
    plain = np.asarray(value).reshape(3)
    prep = di.prepare_gradient(_sum_of_squares, backend, np.asarray(value))
    for name, call in {
        "x": lambda: di.gradient(_sum_of_squares, backend, value),
        "prepare x": lambda: di.prepare_gradient(_sum_of_squares, backend, value),
        "prepared x": lambda: di.gradient(_sum_of_squares, prep, backend, value),
        "x['w']": lambda: di.gradient(lambda x: _sum_of_squares(x["w"]), backend, {"w": value}),
        "context 1": lambda: di.gradient(_sum_of_squares, backend, plain, di.Constant(value)),
        "tx[0]": lambda: di.pushforward(lambda x: x * 2.0, backend, np.asarray(value), (value,)),
    }.items():
        message = str(raises(di.InvalidInputError, call, name))
        argument = name.removeprefix("prepare ").removeprefix("prepared ")
        names(message, argument, *words)


# --- a cotangent that no longer fits f's output ------------------------------------------------------------------


def _head(x: Any, n: Any) -> Any:
    return x[:n] * 2.0


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_prepared_cotangent_that_no_longer_fits_fs_output_is_named(backend):
    """f's output shape depends on an int Constant: a prepared pullback called
    with another one and the prepared cotangents raised each engine's own error
    (torch's 'Mismatch in shape', numpy's matmul ValueError, ...). Now the engine's
    error, when it comes, is explained: InvalidInputError naming ty[0]'s shape and
    f's output shape at this call, chained to the engine's error."""
    x = np.ones(4)
    prep = di.prepare_pullback(_head, backend, x, (np.ones(2),), di.Constant(2))
    for function in (di.pullback, di.value_and_pullback):
        with pytest.raises(di.InvalidInputError) as info:
            function(_head, prep, backend, x, (np.ones(2),), di.Constant(3))
        names(str(info.value), "ty[0]", "(3,)", "(2,)", "at this call")
        assert info.value.__cause__ is not None and not isinstance(info.value.__cause__, di.DIError)
    (result,) = di.pullback(_head, prep, backend, x, (np.array([1.0, 3.0]),), di.Constant(2))  # the prep still works
    np.testing.assert_allclose(to_numpy(result), [2.0, 6.0, 0.0, 0.0], rtol=1e-6)
    # a one-element cotangent for a longer output: autograd's vjp broadcast it ([2, 2, 2, 0])
    prep = di.prepare_pullback(_head, backend, x, (np.ones(1),), di.Constant(1))
    with pytest.raises(di.InvalidInputError) as info:
        di.pullback(_head, prep, backend, x, (np.ones(1),), di.Constant(3))
    names(str(info.value), "ty[0]", "(3,)", "(1,)")


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_an_error_of_f_in_a_prepared_pullback_is_not_taken_for_a_cotangent_error(backend):
    """The failure path asks f's output shape again: f raising there, or the
    cotangents fitting, leave the engine's (or f's) error as it is."""

    def g(x: Any, n: Any) -> Any:
        if n > 2:
            raise ModelError("n too large", n)
        return x[:n] * 2.0

    x = np.ones(4)
    prep = di.prepare_pullback(g, backend, x, (np.ones(2),), di.Constant(2))
    with pytest.raises(ModelError) as info:
        di.pullback(g, prep, backend, x, (np.ones(2),), di.Constant(3))
    assert info.value.args == ("n too large", 3)


# --- dtypes an engine cannot take --------------------------------------------------------------------------------


def _dtype_backends() -> list[Any]:
    """Every engine, and strategies over each engine that computes in another family than NumPy's."""
    others = [b for b in ENGINES if engine_family(b) != "numpy"]
    extra = [di.SecondOrder(di.AutoFiniteDiff(), b) for b in others] + [di.AutoSparse(b) for b in others]
    return [pytest.param(b, id=backend_id(b)[:40]) for b in [*ENGINES, *extra]]


NO_LONGDOUBLE = {"pytensor"}
"""Engines computing in NumPy's family that have no type for np.longdouble (no capability declares it)."""


@pytest.mark.parametrize("backend", _dtype_backends())
def test_an_extended_precision_x_computes_or_is_refused_naming_the_backend(backend):
    """np.longdouble x reached torch and JAX as their own TypeErrors ("can't
    convert np.ndarray of type numpy.longdouble", "Error interpreting argument to
    stage as a JAX value"), also through AutoSparse and SecondOrder. Engines
    computing in NumPy take it; the others refuse it at preparation, saying what
    to do."""
    x = np.array([1.0, 2.0, 3.0], dtype=np.longdouble)
    takes = getattr(backend, "inner", None) or getattr(backend, "dense", backend)
    if isinstance(backend, di.SecondOrder):  # finite differences outside evaluate the inner gradient in float64
        h = di.hessian(_sum_of_squares, backend, x)
        np.testing.assert_allclose(np.asarray(h, dtype=np.float64), 2 * np.eye(3), rtol=1e-5, atol=1e-5)
    if engine_family(takes) == "numpy" and engine_name(takes) not in NO_LONGDOUBLE:
        g = di.gradient(_sum_of_squares, backend, x)
        assert g.dtype == np.longdouble
        np.testing.assert_allclose(g.astype(np.float64), [2.0, 4.0, 6.0], rtol=1e-6)
        return
    for call in (
        lambda: di.gradient(_sum_of_squares, backend, x),
        lambda: di.prepare_jacobian(_cube, backend, x),
        lambda: di.gradient(_sum_of_squares, backend, np.ones(3), di.Constant(x)),
    ):
        message = str(raises(di.InvalidInputError, call, "longdouble"))
        names(message, type(takes).__name__, str(np.dtype(np.longdouble)), "float64")


@pytest.mark.parametrize("backend", ENGINES, ids=backend_id)
@pytest.mark.parametrize("x_family", [name for name in FAMILIES if name != "numpy"])
def test_a_float8_x_is_refused_on_every_backend(backend, x_family):
    """A torch float8 x raised torch's own 'Got unsupported ScalarType
    Float8_e4m3fn' (or 'pow not implemented') on every backend, where a JAX one
    was refused: both are refused now, saying to cast to float32."""
    if x_family == "torch":
        import torch

        x = torch.ones(3).to(torch.float8_e4m3fn)
    else:
        import jax.numpy as jnp

        x = jnp.ones(3, dtype=jnp.float8_e4m3fn)
    for call in (lambda: di.gradient(_sum_of_squares, backend, x), lambda: di.prepare_jacobian(_cube, backend, x)):
        message = str(raises(di.InvalidInputError, call, "float8"))
        names(message, "x", "float8_e4m3fn", "float32")
    # as a pytree x's leaf, or as a tangent (each engine raised its own error there)
    leaf_of_x = lambda: di.gradient(lambda p: _sum_of_squares(p["a"]), backend, {"a": x})
    tangent = lambda: di.pushforward(_cube, backend, np.ones(3), (x,))
    for call, name in ((leaf_of_x, "x['a']"), (tangent, "tx[0]")):
        names(str(raises(di.InvalidInputError, call, "float8")), name, "float8_e4m3fn", "float32")


def test_a_torch_bfloat16_x_through_finite_differences_over_jax() -> None:
    """value_gradient_and_hessian of a torch bfloat16 x on SecondOrder(finite
    differences, JAX) raised torch's "can't convert np.ndarray of type
    ml_dtypes.bfloat16" (a NumPy bfloat16 array reaching torch)."""
    if not {"torch", "jax"} <= set(FAMILIES):
        pytest.skip("needs torch and jax")
    import torch

    x = torch.tensor([1.0, 2.0, 0.5], dtype=torch.bfloat16)
    backend = di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX())
    y, g, h = di.value_gradient_and_hessian(_sum_of_squares, backend, x)
    assert y.dtype == g.dtype == h.dtype == torch.bfloat16
    np.testing.assert_allclose(to_numpy(g.float()), [2.0, 4.0, 1.0], rtol=2e-2)
    np.testing.assert_allclose(to_numpy(h.float()), 2 * np.eye(3), rtol=2e-2, atol=0.1)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if engine_name(b) == "jax"], ids=backend_id)
def test_a_cotangent_of_another_structure_than_fs_output_is_named(backend):
    """Pytree outputs (AutoJAX): a cotangent is compared with f's output by
    structure and shapes. A one-leaf dict output and an array cotangent of its
    leaf's shape had the same list of shapes, and JAX's vjp raised AttributeError
    ('dict' object has no attribute 'dtype')."""

    def as_dict(x):
        return {"a": x * 2.0}

    def as_array(x):
        return x * 2.0

    x = np.ones(3)
    for f, ty, wanted in ((as_dict, np.ones(3), "{'a': (3,)}"), (as_array, {"a": np.ones(3)}, "(3,)")):
        for function in (di.pullback, di.prepare_pullback):
            with pytest.raises(di.InvalidInputError) as info:
                function(f, backend, x, (ty,))
            names(str(info.value), "ty[0]", wanted)
    (result,) = di.pullback(as_dict, backend, x, ({"a": np.array([1.0, 2.0, 3.0])},))
    np.testing.assert_allclose(to_numpy(result), [2.0, 4.0, 6.0])


class _ForeignArray:
    """An array of a library di has no family for."""

    shape, dtype = (2,), "float64"


_ForeignArray.__module__ = "foreignlib.arrays"


def test_an_array_of_an_unknown_library_is_named_with_its_library() -> None:
    """'not Array' read as 'not an array': the messages now name the library
    (foreignlib._ForeignArray) and say to convert it or register its family."""

    def total(x: Any) -> Any:
        return di.array_namespace(x).sum(x)

    with pytest.raises(di.InvalidInputError, match=r"not foreignlib\._ForeignArray\. .*register_family"):
        di.gradient(total, di.AutoFiniteDiff(), _ForeignArray())
    wrapped = di.DifferentiateWith(total, di.AutoFiniteDiff())
    with pytest.raises(di.InvalidInputError, match=r"leaf 0 of x \(foreignlib\._ForeignArray\) is neither"):
        wrapped([_ForeignArray()])
