"""``di.array_namespace``: one ``f`` for every engine, autograd included.

For autograd's traced values di maps every array-API name to what autograd
differentiates (``di/engines/autograd/namespace.py``). Each name of its tables is checked
here: the value against array-api-compat's NumPy namespace on plain arrays, and
autograd's reverse-mode jacobian and forward-mode JVP against central finite
differences of that NumPy evaluation (independent of di's table).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import array_api_compat
import autograd
import numpy as np
import optree
import pytest
from autograd.differential_operators import make_jvp, make_vjp
from conftest import ENGINES, assert_close, backend_params
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import di
from di.engines.autograd import namespace as table

Fn = Callable[[Any, Any], Any]

# --- helpers ---------------------------------------------------------------------------------


def _numeric_jacobian(f: Callable[[np.ndarray], Any], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of ``f`` at ``x``: shape ``f(x).shape + x.shape``."""
    y_shape = np.shape(f(x))
    jac = np.zeros((int(np.prod(y_shape)), x.size))
    for i in range(x.size):
        step = np.zeros(x.size)
        step[i] = h
        up = np.asarray(f(x + step.reshape(x.shape)), dtype=np.float64).reshape(-1)
        down = np.asarray(f(x - step.reshape(x.shape)), dtype=np.float64).reshape(-1)
        jac[:, i] = (up - down) / (2 * h)
    return jac.reshape(y_shape + x.shape)


def _on_numpy(fn: Fn) -> Callable[[np.ndarray], Any]:
    """``fn`` evaluated with array-api-compat's NumPy namespace: the reference semantics."""
    return lambda x: fn(array_api_compat.array_namespace(x), x)


def _on_boxes(fn: Fn) -> Callable[[Any], Any]:
    """``fn`` evaluated with di's namespace, as ``f`` would be under autograd."""
    return lambda x: fn(di.array_namespace(x), x)


def _reverse_jacobian(fn: Fn, x: np.ndarray) -> np.ndarray:
    return autograd.jacobian(_on_boxes(fn))(x)


def _forward_jacobian(fn: Fn, x: np.ndarray) -> np.ndarray:
    """The jacobian column by column, from autograd's forward mode."""
    columns = []
    for i in range(x.size):
        tangent = np.zeros(x.size)
        tangent[i] = 1.0
        columns.append(np.asarray(make_jvp(_on_boxes(fn))(x)(tangent.reshape(x.shape))[1]))
    return np.stack(columns, axis=-1).reshape(np.shape(columns[0]) + x.shape)


def _assert_close(actual: Any, desired: Any, rtol: float = 1e-6) -> None:
    actual, desired = np.asarray(actual, dtype=np.float64), np.asarray(desired, dtype=np.float64)
    assert actual.shape == desired.shape, (actual.shape, desired.shape)
    scale = max(1.0, float(np.max(np.abs(desired), initial=0.0)))
    assert float(np.max(np.abs(actual - desired), initial=0.0)) <= rtol * scale, (actual, desired)


# --- the cases: every name of the tables, each at a point away from kinks ------------------------

VEC = np.array([0.31, 0.72, 0.55])  # in (0, 1), distinct, no ties
MAT = np.array([[0.6, -0.3, 0.2], [0.1, 0.9, -0.45]])
SQUARE = np.array([[0.9, 0.2, -0.1], [0.3, 1.1, 0.25], [-0.2, 0.15, 0.8]])


def _spd(xp: Any, m: Any) -> Any:
    """A symmetric positive definite matrix built from ``m``."""
    return m @ xp.matrix_transpose(m) + 3.0 * xp.eye(3, dtype=m.dtype)


# name -> (fn(xp, x), x). Binary functions take two slices of x, so both arguments are traced.
CASES: dict[str, tuple[Fn, np.ndarray]] = {
    "abs": (lambda xp, x: xp.abs(x - 0.5), VEC),
    "acos": (lambda xp, x: xp.acos(x), VEC),
    "acosh": (lambda xp, x: xp.acosh(1.5 + x), VEC),
    "add": (lambda xp, x: xp.add(x[:2], x[1:]), VEC),
    "asin": (lambda xp, x: xp.asin(x), VEC),
    "asinh": (lambda xp, x: xp.asinh(x), VEC),
    "atan": (lambda xp, x: xp.atan(x), VEC),
    "atan2": (lambda xp, x: xp.atan2(x[:2], x[1:]), VEC),
    "atanh": (lambda xp, x: xp.atanh(x), VEC),
    "conj": (lambda xp, x: xp.conj(x), VEC),
    "cos": (lambda xp, x: xp.cos(x), VEC),
    "cosh": (lambda xp, x: xp.cosh(x), VEC),
    "divide": (lambda xp, x: xp.divide(x[:2], x[1:]), VEC),
    "exp": (lambda xp, x: xp.exp(x), VEC),
    "expm1": (lambda xp, x: xp.expm1(x), VEC),
    "imag": (lambda xp, x: xp.imag(x) + x, VEC),
    "log": (lambda xp, x: xp.log(x), VEC),
    "log1p": (lambda xp, x: xp.log1p(x), VEC),
    "log2": (lambda xp, x: xp.log2(x), VEC),
    "log10": (lambda xp, x: xp.log10(x), VEC),
    "logaddexp": (lambda xp, x: xp.logaddexp(x[:2], x[1:]), VEC),
    "maximum": (lambda xp, x: xp.maximum(x[:2], x[1:]), VEC),
    "minimum": (lambda xp, x: xp.minimum(x[:2], x[1:]), VEC),
    "multiply": (lambda xp, x: xp.multiply(x[:2], x[1:]), VEC),
    "negative": (lambda xp, x: xp.negative(x), VEC),
    "positive": (lambda xp, x: xp.positive(x) * x, VEC),
    "pow": (lambda xp, x: xp.pow(x[:2], x[1:]), VEC),
    "real": (lambda xp, x: xp.real(x), VEC),
    "reciprocal": (lambda xp, x: xp.reciprocal(x), VEC),
    "remainder": (lambda xp, x: xp.remainder(3.0 * x[:2], x[1:]), VEC),
    "sin": (lambda xp, x: xp.sin(x), VEC),
    "sinh": (lambda xp, x: xp.sinh(x), VEC),
    "sqrt": (lambda xp, x: xp.sqrt(x), VEC),
    "square": (lambda xp, x: xp.square(x), VEC),
    "subtract": (lambda xp, x: xp.subtract(x[:2], x[1:]), VEC),
    "tan": (lambda xp, x: xp.tan(x), VEC),
    "tanh": (lambda xp, x: xp.tanh(x), VEC),
    "copysign": (lambda xp, x: xp.copysign(x, xp.asarray([1.0, -1.0, 1.0], dtype=x.dtype) * x), VEC),
    "clip": (lambda xp, x: xp.clip(x, min=0.4, max=x[2] + 0.1), VEC),
    "hypot": (lambda xp, x: xp.hypot(x[:2], x[1:]), VEC),
    # reductions and scans
    "sum": (lambda xp, x: xp.sum(x**2, axis=1, keepdims=True), MAT),
    "prod": (lambda xp, x: xp.prod(x, axis=0), MAT),
    "mean": (lambda xp, x: xp.mean(x, axis=1), MAT),
    "max": (lambda xp, x: xp.max(x, axis=1), MAT),
    "min": (lambda xp, x: xp.min(x, axis=0, keepdims=True), MAT),
    "std": (lambda xp, x: xp.std(x, axis=1, correction=1), MAT),
    "var": (lambda xp, x: xp.var(x, axis=0, keepdims=True), MAT),
    "cumulative_sum": (lambda xp, x: xp.cumulative_sum(x, axis=1, include_initial=True), MAT),
    "diff": (lambda xp, x: xp.diff(x, axis=1, prepend=x[:, :1] ** 2, append=1.0), MAT),
    # manipulation
    "astype": (lambda xp, x: xp.astype(xp.astype(x, xp.float32), xp.float64) * x, VEC),
    "broadcast_to": (lambda xp, x: xp.broadcast_to(x, (2, 3)), VEC),
    "broadcast_arrays": (lambda xp, x: xp.stack(xp.broadcast_arrays(x, x[:1] ** 2)), VEC),
    "concat": (lambda xp, x: xp.concat([x, x**2, xp.ones((2, 3), dtype=x.dtype)], axis=0), MAT),
    "expand_dims": (lambda xp, x: xp.expand_dims(x, axis=1), VEC),
    "flip": (lambda xp, x: xp.flip(x, axis=1) * x, MAT),
    "moveaxis": (lambda xp, x: xp.moveaxis(x, 0, 1), MAT),
    "permute_dims": (lambda xp, x: xp.permute_dims(x, (1, 0)), MAT),
    "repeat": (lambda xp, x: xp.repeat(x, 2, axis=0), MAT),
    "reshape": (lambda xp, x: xp.reshape(x, (3, 2)), MAT),
    "roll": (lambda xp, x: xp.roll(x, 1, axis=1) * x, MAT),
    "squeeze": (lambda xp, x: xp.squeeze(x[:, :1], axis=1), MAT),
    "stack": (lambda xp, x: xp.stack([x, 2.0 * x, np.ones(3, dtype=x.dtype)], axis=1), VEC),
    "unstack": (lambda xp, x: xp.unstack(x, axis=1)[1] * x[:, 0], MAT),
    "tile": (lambda xp, x: xp.tile(x, (2, 1)), MAT),
    "take": (lambda xp, x: xp.take(x, xp.asarray([2, 0, 2]), axis=1), MAT),
    "where": (lambda xp, x: xp.where(x > 0.4, x**2, x[0]), VEC),
    "sort": (lambda xp, x: xp.sort(x * x[::-1], descending=True), VEC),
    # creation from traced values
    "asarray": (lambda xp, x: xp.asarray([x[0], x[1] ** 2]), VEC),
    "full": (lambda xp, x: xp.full((2,), x[0]) * x[1:], VEC),
    "linspace": (lambda xp, x: xp.linspace(x[0], x[1], num=4), VEC),
    "tril": (lambda xp, x: xp.tril(x, k=0), SQUARE),
    "triu": (lambda xp, x: xp.triu(x, k=1), SQUARE),
    # linear algebra
    "matmul": (lambda xp, x: xp.matmul(x, xp.matrix_transpose(x)), MAT),
    "matrix_transpose": (lambda xp, x: xp.matrix_transpose(x) * 2.0, MAT),
    "tensordot": (lambda xp, x: xp.tensordot(x, x, axes=([1], [1])), MAT),
    "vecdot": (lambda xp, x: xp.vecdot(x, x[::-1], axis=1), MAT),
    "linalg.matmul": (lambda xp, x: xp.linalg.matmul(x, x), SQUARE),
    "linalg.outer": (lambda xp, x: xp.linalg.outer(x, x**2), VEC),
    "linalg.tensordot": (lambda xp, x: xp.linalg.tensordot(x, x, axes=1), SQUARE),
    "linalg.cross": (lambda xp, x: xp.linalg.cross(x, x**2), SQUARE),
    "linalg.diagonal": (lambda xp, x: xp.linalg.diagonal(x, offset=1), SQUARE),
    "linalg.matrix_norm": (lambda xp, x: xp.linalg.matrix_norm(x, ord="fro", keepdims=True), MAT),
    "linalg.matrix_transpose": (lambda xp, x: xp.linalg.matrix_transpose(x), MAT),
    "linalg.trace": (lambda xp, x: xp.linalg.trace(x * x, offset=-1), SQUARE),
    "linalg.vecdot": (lambda xp, x: xp.linalg.vecdot(x, x**2, axis=0), MAT),
    "linalg.vector_norm": (lambda xp, x: xp.linalg.vector_norm(x, axis=(0, 1), keepdims=True), MAT),
    "linalg.cholesky": (lambda xp, x: xp.linalg.cholesky(_spd(xp, x), upper=True), SQUARE),
    "linalg.det": (lambda xp, x: xp.linalg.det(x), SQUARE),
    "linalg.eigh": (lambda xp, x: xp.linalg.eigh(_spd(xp, x)).eigenvalues, SQUARE),
    "linalg.eigvalsh": (lambda xp, x: xp.linalg.eigvalsh(_spd(xp, x)), SQUARE),
    "linalg.inv": (lambda xp, x: xp.linalg.inv(x), SQUARE),
    "linalg.pinv": (lambda xp, x: xp.linalg.pinv(x), MAT),
    "linalg.slogdet": (lambda xp, x: xp.linalg.slogdet(x).logabsdet, SQUARE),
    "linalg.solve": (lambda xp, x: xp.linalg.solve(x, x[:, 0] ** 2), SQUARE),
    "linalg.svd": (lambda xp, x: xp.linalg.svd(x, full_matrices=False).S, MAT),
    "linalg.svdvals": (lambda xp, x: xp.linalg.svdvals(x), MAT),
}


def test_every_differentiable_name_has_a_case() -> None:
    assert set(CASES) == set(table.DIFFERENTIABLE) | set(table.REVERSE_ONLY)


def test_every_name_is_an_array_api_name_offered_by_array_api_compat() -> None:
    names = [*table.DIFFERENTIABLE, *table.REVERSE_ONLY, *table.NO_DERIVATIVE, *table.NO_DERIVATIVE_NEEDED]
    assert len(names) == len(set(names)), "a name in two tables"
    for name in names:
        module, _, attribute = name.rpartition(".")
        compat = array_api_compat.numpy.linalg if module == "linalg" else array_api_compat.numpy
        assert hasattr(compat, attribute), name


# The array API standard's functions (2024.12), and its linear-algebra extension.
ARRAY_API_FUNCTIONS = """
abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_invert bitwise_left_shift bitwise_or
bitwise_right_shift bitwise_xor ceil clip conj copysign cos cosh divide equal exp expm1 floor floor_divide greater
greater_equal hypot imag isfinite isinf isnan less less_equal log log1p log2 log10 logaddexp logical_and
logical_not logical_or logical_xor maximum minimum multiply negative nextafter not_equal positive pow real
reciprocal remainder round sign signbit sin sinh square sqrt subtract tan tanh trunc
arange asarray empty empty_like eye from_dlpack full full_like linspace meshgrid ones ones_like tril triu zeros
zeros_like astype can_cast finfo iinfo isdtype result_type take take_along_axis matmul matrix_transpose tensordot
vecdot broadcast_arrays broadcast_to concat expand_dims flip moveaxis permute_dims repeat reshape roll squeeze
stack tile unstack argmax argmin count_nonzero nonzero searchsorted where unique_all unique_counts unique_inverse
unique_values argsort sort cumulative_prod cumulative_sum max mean min prod std sum var all any diff
""".split()
ARRAY_API_LINALG = """
cholesky cross det diagonal eigh eigvalsh inv matmul matrix_norm matrix_power matrix_rank matrix_transpose outer
pinv qr slogdet solve svd svdvals tensordot trace vecdot vector_norm
""".split()


def test_the_autograd_namespace_offers_every_array_api_function() -> None:
    xp = table.build_namespace()
    assert [name for name in ARRAY_API_FUNCTIONS if not callable(getattr(xp, name, None))] == []
    assert [name for name in ARRAY_API_LINALG if not callable(getattr(xp.linalg, name, None))] == []
    assert xp.float32 is np.float32 and xp.pi == np.pi and xp.newaxis is None


@pytest.mark.parametrize("name", sorted(CASES))
def test_name_is_differentiated_correctly_by_autograd(name: str) -> None:
    fn, x = CASES[name]
    reference = _on_numpy(fn)
    rounds_to_float32 = name == "astype"  # finite differences need a step float32 resolves
    expected_jacobian = _numeric_jacobian(reference, x, h=1e-3 if rounds_to_float32 else 1e-6)
    value = _on_boxes(fn)(x)  # plain numpy through di's namespace: same values as array-api-compat's
    _assert_close(value, reference(x), 1e-12)
    tolerance = 1e-3 if rounds_to_float32 else 1e-6
    _assert_close(_reverse_jacobian(fn, x), expected_jacobian, tolerance)
    if name in table.REVERSE_ONLY:
        with pytest.raises(di.UnsupportedOperatorError, match=rf"{name} in reverse mode only.*pullback"):
            _forward_jacobian(fn, x)
    else:
        _assert_close(_forward_jacobian(fn, x), expected_jacobian, tolerance)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_values_get_float32_derivatives(name: str) -> None:
    # autograd's own rules for max, min, mean, std, var, log2, log10, svd, pinv (and the
    # forward rules of maximum, minimum, stack) return float64 derivatives for float32 values.
    fn, x = CASES[name]
    x32 = x.astype(np.float32)
    if np.asarray(_on_numpy(fn)(x32)).dtype != np.float32:
        pytest.skip("NumPy itself promotes this case to float64")
    vjp, y = make_vjp(_on_boxes(fn))(x32)
    assert np.asarray(y).dtype == np.float32
    assert vjp(np.ones(np.shape(y), dtype=np.float32)).dtype == np.float32
    if name not in table.REVERSE_ONLY:
        assert np.asarray(make_jvp(_on_boxes(fn))(x32)(np.ones_like(x32))[1]).dtype == np.float32


# --- names autograd cannot differentiate: a clear error on traced values -----------------------------

NO_DERIVATIVE_CALLS: dict[str, Fn] = {
    "cumulative_prod": lambda xp, x: xp.cumulative_prod(x),
    "take_along_axis": lambda xp, x: xp.take_along_axis(x, xp.asarray([2, 0]), axis=0),
    "meshgrid": lambda xp, x: xp.meshgrid(x, x)[0],
    "nextafter": lambda xp, x: xp.nextafter(x, 2.0),
    "unique_values": lambda xp, x: xp.unique_values(x),
    "unique_counts": lambda xp, x: xp.unique_counts(x).values,
    "unique_inverse": lambda xp, x: xp.unique_inverse(x).values,
    "unique_all": lambda xp, x: xp.unique_all(x).values,
    "linalg.matrix_power": lambda xp, x: xp.linalg.matrix_power(xp.reshape(x[:1], (1, 1)), 2),
    "linalg.qr": lambda xp, x: xp.linalg.qr(xp.reshape(x[:2], (2, 1))).R,
}


def test_every_name_without_derivative_has_a_case() -> None:
    assert set(NO_DERIVATIVE_CALLS) == set(table.NO_DERIVATIVE)


@pytest.mark.parametrize("name", sorted(NO_DERIVATIVE_CALLS))
def test_name_without_derivative_raises_a_clear_error_on_traced_values(name: str) -> None:
    call = NO_DERIVATIVE_CALLS[name]
    with pytest.raises(di.UnsupportedOperatorError) as raised:
        autograd.jacobian(_on_boxes(call))(VEC)
    message = str(raised.value)
    assert f"no derivative of {name}" in message and table.NO_DERIVATIVE[name] in message, message
    assert "AutoJAX, AutoTorch or AutoFiniteDiff" in message
    # On plain values it computes what array-api-compat's NumPy computes.
    np.testing.assert_array_equal(_on_boxes(call)(VEC), _on_numpy(call)(VEC))


def test_the_error_reaches_the_caller_of_di_and_other_backends_differentiate_the_same_f() -> None:
    def running_product(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.cumulative_prod(x)

    with pytest.raises(di.UnsupportedOperatorError, match="cumulative_prod"):
        di.jacobian(running_product, di.AutoAutograd(), VEC)
    expected = np.array([[1.0, 0, 0], [VEC[1], VEC[0], 0], [VEC[1] * VEC[2], VEC[0] * VEC[2], VEC[0] * VEC[1]]])
    _assert_close(di.jacobian(running_product, di.AutoFiniteDiff(), VEC), expected, 1e-6)


def test_reverse_only_names_refuse_autograds_forward_mode_through_di() -> None:
    def log_det(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.linalg.slogdet(xp.reshape(x, (2, 2))).logabsdet

    x = np.array([2.0, 0.3, -0.4, 1.5])
    expected = np.linalg.inv(x.reshape(2, 2)).T.reshape(-1)
    _assert_close(di.gradient(log_det, di.AutoAutograd(), x), expected, 1e-12)
    with pytest.raises(di.UnsupportedOperatorError, match=r"linalg\.slogdet in reverse mode only"):
        di.pushforward(log_det, di.AutoAutograd(), x, (np.ones(4),))


# --- names with nothing to differentiate: NumPy on the unboxed values --------------------------------


def _calling(name: str, arguments: Callable[[Any, Any], tuple[Any, ...]]) -> Fn:
    """``xp.<name>(*arguments(xp, x))``."""
    return lambda xp, x: getattr(xp, name)(*arguments(xp, x))


NO_DERIVATIVE_NEEDED_CALLS: dict[str, Fn] = {
    **{
        name: _calling(name, lambda xp, x: (x,))
        for name in (
            "all any argmax argmin argsort count_nonzero nonzero isfinite isinf isnan signbit logical_not "
            "ceil floor round sign trunc empty_like ones_like zeros_like result_type"
        ).split()
    },
    **{
        name: _calling(name, lambda xp, x: (x, x[::-1]))
        for name in "equal not_equal greater greater_equal less less_equal logical_and logical_or logical_xor".split()
    },
    **{
        name: _calling(name, lambda xp, x: (xp.astype(x * 10, xp.int64), 1))
        for name in "bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor".split()
    },
    "bitwise_invert": lambda xp, x: xp.bitwise_invert(xp.astype(x * 10, xp.int64)),
    "floor_divide": lambda xp, x: xp.floor_divide(x, 0.25),
    "searchsorted": lambda xp, x: xp.searchsorted(xp.sort(x), x),
    "arange": lambda xp, x: xp.arange(3),
    "empty": lambda xp, x: xp.empty((2,)).shape,
    "eye": lambda xp, x: xp.eye(2, k=1),
    "ones": lambda xp, x: xp.ones(2),
    "zeros": lambda xp, x: xp.zeros((2, 1)),
    "full_like": lambda xp, x: xp.full_like(x, 2.0),
    "from_dlpack": lambda xp, x: xp.from_dlpack(np.arange(3.0)),
    "can_cast": lambda xp, x: xp.can_cast(xp.float32, xp.float64),
    "finfo": lambda xp, x: xp.finfo(xp.float32).eps,
    "iinfo": lambda xp, x: xp.iinfo(xp.int32).max,
    "isdtype": lambda xp, x: xp.isdtype(xp.float64, "real floating"),
    "linalg.matrix_rank": lambda xp, x: xp.linalg.matrix_rank(xp.reshape(xp.concat([x, x]), (2, 3))),
}
NO_DERIVATIVE_NEEDED_CALLS["empty_like"] = lambda xp, x: xp.empty_like(x).shape


def test_every_name_with_nothing_to_differentiate_has_a_case() -> None:
    assert set(NO_DERIVATIVE_NEEDED_CALLS) == set(table.NO_DERIVATIVE_NEEDED)


def test_names_with_nothing_to_differentiate_compute_on_the_values_under_autograd() -> None:
    seen: dict[str, Any] = {}

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        for name, call in NO_DERIVATIVE_NEEDED_CALLS.items():
            seen[name] = call(xp, x)
        return xp.sum(x**2)

    _assert_close(autograd.grad(f)(VEC), 2 * VEC, 1e-12)
    for name, call in NO_DERIVATIVE_NEEDED_CALLS.items():
        expected = call(array_api_compat.array_namespace(VEC), VEC)
        got = seen[name]
        assert not isinstance(got, autograd.tracer.Box), name
        if isinstance(expected, tuple) and not isinstance(expected, type(np.shape(VEC))):
            expected, got = expected[0], got[0]  # nonzero
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected), err_msg=name)
        assert np.asarray(got).dtype == np.asarray(expected).dtype, name


def test_a_name_outside_the_array_api_is_refused_with_an_attribute_error() -> None:
    xp = table.build_namespace()
    with pytest.raises(AttributeError, match=r"no 'einsum'.*array API"):
        xp.einsum  # noqa: B018
    assert not hasattr(xp, "cumprod") and not hasattr(xp.linalg, "norm")
    assert hasattr(xp, "concat") and repr(xp) == "<array namespace di.array_namespace(autograd)>"


# --- what array_namespace returns --------------------------------------------------------------------


def test_the_issue_autograd_with_array_api_compat_gives_zeros_and_dis_namespace_the_jacobian() -> None:
    def features(xp: Any, x: Any) -> Any:
        return xp.concat([xp.sin(x), x**2])

    x = np.array([0.3, -1.2])
    expected = np.concatenate([np.diag(np.cos(x)), np.diag(2 * x)])
    with pytest.warns(UserWarning, match="independent of input"):
        silent = autograd.jacobian(lambda x: features(array_api_compat.array_namespace(x), x))(x)
    # The defect reported in issue 13: array-api-compat hands autograd's boxes to NumPy's
    # concat, which drops them. (If autograd ever differentiates it, this line fails: drop it.)
    np.testing.assert_array_equal(silent, np.zeros((4, 2)))
    _assert_close(autograd.jacobian(lambda x: features(di.array_namespace(x), x))(x), expected, 1e-12)
    _assert_close(di.jacobian(lambda x: features(di.array_namespace(x), x), di.AutoAutograd(), x), expected, 1e-12)


def test_numpy_values_get_array_api_compats_numpy_namespace() -> None:
    assert di.array_namespace(VEC) is array_api_compat.numpy
    assert di.array_namespace(VEC, 2.0, None, MAT) is array_api_compat.numpy
    with pytest.raises(TypeError):
        di.array_namespace()
    with pytest.raises(TypeError):
        di.array_namespace(2.0)


def test_autograd_boxes_mix_with_numpy_arrays_and_scalars_only() -> None:
    torch = pytest.importorskip("torch")
    namespaces: list[Any] = []

    def f(x: Any) -> Any:
        namespaces.append(di.array_namespace(x))
        namespaces.append(di.array_namespace(MAT, x, 1.5))
        with pytest.raises(TypeError, match=r"mix only with NumPy arrays, not torch\.Tensor"):
            di.array_namespace(x, torch.zeros(2))
        return x[0]

    autograd.grad(f)(VEC)
    assert isinstance(namespaces[0], table.AutogradNamespace)
    assert namespaces[0] is namespaces[1]  # built once


def test_jax_tracers_get_the_jax_namespace() -> None:
    jax = pytest.importorskip("jax")
    names: list[str] = []

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        names.append(xp.__name__)
        return xp.sum(xp.concat([xp.sin(x), x**2]))

    x = jax.numpy.asarray(VEC, dtype=jax.numpy.float32)
    jax.jit(jax.grad(f))(x)
    jax.jvp(f, (x,), (x,))
    assert names and set(names) == {di.array_namespace(x).__name__}
    assert array_api_compat.is_jax_namespace(di.array_namespace(x))


@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")  # inside array-api-compat
def test_torch_func_wrapped_tensors_and_dynamo_get_the_torch_namespace() -> None:
    torch = pytest.importorskip("torch")
    namespaces: list[Any] = []

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        namespaces.append(xp)
        return xp.sum(xp.concat([xp.sin(x), x**2]))

    x = torch.tensor(VEC)
    expected = torch.cos(x) + 2 * x
    torch.testing.assert_close(torch.func.grad(f)(x), expected)
    torch.testing.assert_close(torch.func.jacfwd(f)(x), expected)
    assert all(array_api_compat.is_torch_namespace(ns) for ns in namespaces)
    # dynamo traces the check without a graph break (fullgraph=True would raise).
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), f(x))


def test_array_namespace_imports_neither_autograd_nor_the_table_for_other_families() -> None:
    code = """
        import json, sys
        import numpy as np
        import di
        loaded = {"import": sorted(m for m in ("array_api_compat", "autograd") if m in sys.modules)}
        di.array_namespace(np.zeros(2))
        loaded["numpy"] = sorted(m for m in ("array_api_compat", "autograd", "di.engines.autograd.namespace")
                                 if m in sys.modules)
        print(json.dumps(loaded))
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == {"import": [], "numpy": ["array_api_compat"]}


# --- property: shapes and axes drawn by hypothesis, both modes against finite differences -----------

AXIS_FUNCTIONS: dict[str, Callable[[Any, Any, int], Any]] = {
    "sum": lambda xp, x, axis: xp.sum(x * x, axis=axis, keepdims=True),
    "prod": lambda xp, x, axis: xp.prod(x, axis=axis),
    "max": lambda xp, x, axis: xp.max(x, axis=axis),
    "min": lambda xp, x, axis: xp.min(x, axis=axis, keepdims=True),
    "mean": lambda xp, x, axis: xp.mean(x, axis=axis),
    "std": lambda xp, x, axis: xp.std(x, axis=axis),
    "cumulative_sum": lambda xp, x, axis: xp.cumulative_sum(x, axis=axis, include_initial=True),
    "flip": lambda xp, x, axis: xp.flip(x, axis=axis) * x,
    "roll": lambda xp, x, axis: xp.roll(x, 1, axis=axis) * x,
    "concat": lambda xp, x, axis: xp.concat([x, xp.exp(x), np.ones_like(x)], axis=axis),
    "stack": lambda xp, x, axis: xp.stack([x, x**2], axis=axis),
    "vecdot": lambda xp, x, axis: xp.vecdot(x, xp.sin(x), axis=axis),
    "where": lambda xp, x, axis: xp.where(x > 0.0, x**2, xp.sum(x, axis=axis, keepdims=True)),
    "vector_norm_1": lambda xp, x, axis: xp.linalg.vector_norm(x, axis=axis, ord=1),
    "vector_norm_inf": lambda xp, x, axis: xp.linalg.vector_norm(x, axis=axis, ord=xp.inf, keepdims=True),
    "vector_norm_3": lambda xp, x, axis: xp.linalg.vector_norm(x, axis=axis, ord=3),
}


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(sorted(AXIS_FUNCTIONS)),
    shape=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
    axis_choice=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_axis_functions_agree_with_finite_differences_in_both_modes(
    name: str, shape: tuple[int, ...], axis_choice: int, seed: int
) -> None:
    axis = axis_choice % len(shape) - (len(shape) if axis_choice >= 3 else 0)  # negative axes too
    assume(name != "std" or shape[axis] > 1)  # the std of one value is sqrt(0): no derivative
    # Distinct magnitudes, away from 0: no ties for max/min/norms, no kink for where and abs.
    magnitudes = np.random.default_rng(seed).permutation(np.arange(1, int(np.prod(shape)) + 1)) * 0.1 + 0.05
    signs = np.where(np.random.default_rng(seed + 1).random(magnitudes.size) < 0.5, -1.0, 1.0)
    x = (signs * magnitudes).reshape(shape)

    def fn(xp: Any, x: Any) -> Any:
        return AXIS_FUNCTIONS[name](xp, x, axis)

    expected = _numeric_jacobian(_on_numpy(fn), x)
    _assert_close(_on_boxes(fn)(x), _on_numpy(fn)(x), 1e-12)
    _assert_close(_reverse_jacobian(fn, x), expected, 1e-6)
    _assert_close(_forward_jacobian(fn, x), expected, 1e-6)


# --- the scenarios written with it ----------------------------------------------------------------


def test_the_array_api_scenario_group_covers_the_functions_and_shapes_of_issue_13() -> None:
    import inspect

    from di.testing import default_scenarios
    from di.testing.scenarios import SCENARIO_GROUPS

    scenarios = default_scenarios(groups=["array-api"])
    assert scenarios and all("array-api" in s.tags for s in scenarios)
    assert {s.operator for s in scenarios} == {"jacobian", "pushforward", "pullback"}
    shapes = {(np.ndim(s.x), np.ndim(s.y)) for s in scenarios}
    assert {(1, 1), (2, 1), (1, 2)} <= shapes  # vector->vector, matrix->vector, vector->matrix
    source = "".join(inspect.getsource(f) for f in {s.f for s in scenarios})
    for name in ("concat", "stack", "reshape", "matmul", "where", "max"):
        assert f"xp.{name}(" in source, name
    assert source.count("xp = di.array_namespace(x)") == len({s.f for s in scenarios})
    assert "array-api" in SCENARIO_GROUPS
    with pytest.raises(ValueError, match="unknown scenario groups"):
        default_scenarios(groups=["nope"])


# --- pytrees, and engines found without importing them -----------------------------------------------


def test_a_pytree_gets_the_namespace_of_its_leaves() -> None:
    params = {"w": np.ones((2, 2)), "b": [np.zeros(2), 1.5]}
    xp = di.array_namespace(params)
    assert xp is array_api_compat.array_namespace(np.ones(2))
    assert di.array_namespace(params, np.ones(2)) is xp

    def loss(params: Any) -> Any:
        xp = di.array_namespace(params)
        return xp.sum(params["w"] ** 2) + xp.sum(xp.sin(params["b"]))

    g = di.gradient(loss, di.AutoAutograd(), {"w": np.ones(2), "b": np.zeros(2)})
    np.testing.assert_allclose(g["w"], 2 * np.ones(2))
    np.testing.assert_allclose(g["b"], np.ones(2))


@optree.dataclasses.dataclass(namespace="")
class _Params:
    w: Any
    b: Any


class _Unregistered:
    def __init__(self, w: Any) -> None:
        self.w = w


@pytest.mark.parametrize("backend", backend_params(ENGINES))  # (the namespace of a compiled variant's values alike)
def test_a_dataclass_registered_with_optree_gets_the_namespace_of_its_leaves(backend: di.AbstractBackend) -> None:
    """docs/arrays.md lists dataclasses registered as pytrees as valid x; f asks di.array_namespace of x
    itself (it raised 'Params is not a supported array type': only dicts, lists and tuples were asked for
    their leaves)."""
    params = _Params(np.array([1.0, 2.0]), np.array(0.5))
    assert di.array_namespace(params) is array_api_compat.array_namespace(np.ones(2))

    def loss(p: Any) -> Any:
        xp = di.array_namespace(p)
        return xp.sum(xp.sin(p.w)) * p.b

    g = di.gradient(loss, backend, params)
    assert isinstance(g, _Params)
    assert_close(g.w, np.cos([1.0, 2.0]) * 0.5, backend, np.float64, "d/dw")
    assert_close(g.b, np.sum(np.sin([1.0, 2.0])), backend, np.float64, "d/db")
    with pytest.raises(TypeError, match="_Unregistered"):  # not a pytree: array-api-compat's own error
        di.array_namespace(_Unregistered(np.ones(2)))


def test_a_pytree_without_arrays_or_of_mixed_families_is_a_di_error() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(di.InvalidInputError, match="hold no array"):
        di.array_namespace({"a": 1.0, "b": None})
    with pytest.raises(di.InvalidInputError, match=r"one library; these are numpy\.ndarray, torch\.Tensor"):
        di.array_namespace({"a": np.ones(2), "b": torch.ones(2)})
    with pytest.raises(di.InvalidInputError, match=r"these are str "):
        di.array_namespace({"a": "text"})
    with pytest.raises(TypeError):
        di.array_namespace("not an array")  # not a pytree: array-api-compat's own error


def test_autograd_boxes_are_recognised_before_the_adapter_is_imported() -> None:
    code = """
        import json, sys
        import autograd, numpy as np
        import di
        def f(x):
            xp = di.array_namespace(x)
            return xp.sum(xp.concat([xp.sin(x), x ** 2]))
        g = autograd.grad(f)(np.array([0.0, 1.0]))
        print(json.dumps({"g": g.tolist(), "adapter": "di.engines.autograd.adapter" in sys.modules}))
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=True
    )
    out = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(out["g"], np.cos([0.0, 1.0]) + 2 * np.array([0.0, 1.0]))
    assert out["adapter"] is False


def test_the_statically_named_replaced_namespaces_are_the_builtin_records() -> None:
    """array_namespace answers, before any engine is registered, every namespace
    but those the built-in records replace without loading the records: the set
    it reads must be theirs."""
    from di.backends.engine import load
    from di.engines import BUILTIN_ENGINES, BUILTIN_REPLACED_NAMESPACES

    records = [load(path) for path in BUILTIN_ENGINES]
    assert {r.namespace.replaces for r in records if r.namespace is not None} == BUILTIN_REPLACED_NAMESPACES


def test_a_torch_compile_trace_before_any_use_of_di_gets_the_namespace_without_a_graph_break() -> None:
    """A torch.compile(fullgraph=True) trace of an f written with
    di.array_namespace, in a process that has not used di yet, traces the lookup
    (it loaded the engine registry under a lock there, which dynamo refused:
    'Unsupported context manager'; without fullgraph, a graph break kept the
    compiled gradient at 7x di's own); autograd boxes still get di's namespace
    afterwards."""
    pytest.importorskip("torch")
    code = """
        import json, sys
        import autograd, numpy as np, torch
        import di
        def f(x):
            xp = di.array_namespace(x)
            return xp.sum(xp.concat([xp.sin(x), x ** 2]))
        x = torch.tensor([0.0, 1.0])
        g = torch.compile(torch.func.grad(f), fullgraph=True, backend="eager")(x)
        from di.backends.selectors import builtin_loaded
        loaded = builtin_loaded()
        h = autograd.grad(f)(np.array([0.0, 1.0]))
        print(json.dumps({"g": g.tolist(), "h": h.tolist(), "loaded while tracing": loaded}))
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    expected = np.cos([0.0, 1.0]) + 2 * np.array([0.0, 1.0])
    np.testing.assert_allclose(out["g"], expected, rtol=1e-6)
    np.testing.assert_allclose(out["h"], expected)
    assert out["loaded while tracing"] is False


def test_a_namespace_met_before_any_registration_can_still_be_replaced_by_an_engine_registered_later() -> None:
    """Before the records are read, a namespace is answered without them and not
    remembered: an engine registered afterwards that replaces it is heard (a
    fresh process, so that nothing is registered at the first call)."""
    code = """
        import dataclasses, json, sys, types
        import numpy as np
        import di
        from di.backends.engine import Engine, NamespaceOverride
        first = di.array_namespace(np.zeros(2)).__name__
        builder = types.ModuleType("late_namespace")
        builder.build = lambda: types.SimpleNamespace(__name__="late")
        builder.Box = type("Box", (), {})
        sys.modules["late_namespace"] = builder
        @dataclasses.dataclass(frozen=True)
        class AutoLate(di.AbstractBackend):
            pass
        override = NamespaceOverride("array_api_compat.numpy", "late_namespace:build", "late_namespace:Box")
        adapter = "di.engines.finitediff.adapter:FiniteDiffAdapter"
        di.register_engine(Engine("late", AutoLate, adapter, namespace=override))
        print(json.dumps([first, di.array_namespace(np.zeros(2)).__name__]))
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == ["array_api_compat.numpy", "late"]
