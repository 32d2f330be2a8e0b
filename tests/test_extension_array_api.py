"""An array family added from outside ``di``: ``array_api_strict``, the array API's
reference implementation.

The family below uses only ``di``'s public API, as a third-party package would:
one :class:`di.Family` subclass and one ``di.register_family``. Every backend then
accepts its arrays and returns results in it, converting through NumPy.
``docs/backends.md`` ("Adding an array family") shows exactly this code; a test
below keeps the two equal.

What waits for other work:

* ``di.testing.default_scenarios(families=("array_api_strict",))`` (any registered
  family) comes with the generic ``di.testing``; until then that test reports an
  expected failure, and the same checks run here on scenarios converted by hand.
* A few paths of ``di`` still read a dtype as NumPy would, or call an array
  method the array API does not have; :data:`KNOWN_DI_BUGS` lists them, each
  with a minimal reproduction below marked as an expected failure (strict: once
  fixed, the mark must go).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from extension_support import assert_page_shows, excerpt, python_blocks, restored_registries

import di
from di.families import converter, family_of, get_family, spec_of
from di.testing import PrepArgs, Scenario, default_scenarios, replace_scenario, test_differentiation

xps = pytest.importorskip("array_api_strict")


# docs excerpt begin: family
class ArrayApiStrictFamily(di.Family):
    """Arrays of array_api_strict, the array API's reference implementation (over NumPy)."""

    name = "array_api_strict"
    display = "array-api-strict"
    module = "array_api_strict"  # recognised once imported: detection imports nothing
    mutable = True  # item assignment works: out= buffers and Cache contexts too

    def array_types(self, module: ModuleType) -> tuple[type, ...]:
        return (type(module.asarray(0.0)),)  # the library does not export its array class

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)  # zero-copy; the library refuses arrays on its other devices

    def from_numpy(self, array: np.ndarray) -> Any:
        return self.namespace().asarray(array)  # zero-copy, same dtype

    def namespace(self) -> Any:
        import array_api_strict

        return array_api_strict

    def write_out(self, out: Any, result: Any) -> Any:
        out[...] = result
        return out


# docs excerpt end: family

REGISTRATION = "di.register_family(ArrayApiStrictFamily())\n"
STRICT_ARRAY = type(xps.asarray(0.0))


@pytest.fixture(scope="module", autouse=True)
def registered() -> Iterator[None]:
    with restored_registries():
        di.register_family(ArrayApiStrictFamily())
        yield


def _installed(*candidates: di.AbstractBackend) -> list[di.AbstractBackend]:
    return [backend for backend in candidates if backend.is_installed]


EAGER = _installed(di.AutoFiniteDiff(), di.AutoAutograd(), di.AutoTorch(), di.AutoJAX())
COMPILED = _installed(di.AutoJAX(jit=True), di.AutoTorch(compile=True, compile_options={"backend": "eager"}))
COMPILES_EACH_OPERATION = _installed(di.AutoJAX())  # (eager JAX: an XLA compile per operation and signature)


def _label(backend: Any) -> str:
    return repr(backend).replace(" ", "")


KNOWN_DI_BUGS: dict[str, str] = {}
"""di bugs this family exposes, by a phrase of their error; delete an entry once it no longer occurs."""


# --- scenarios with x in the family ------------------------------------------------------


def _tree_map(function: Callable[[Any], Any], tree: Any) -> Any:
    if isinstance(tree, dict):
        return {key: _tree_map(function, value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_tree_map(function, item) for item in tree)
    return function(tree)


def _strict(value: Any) -> Any:
    return xps.asarray(value) if isinstance(value, np.ndarray) else value


def _strict_contexts(contexts: tuple[di.Context, ...]) -> tuple[di.Context, ...]:
    return tuple(
        di.Constant(_tree_map(_strict, c.value), static=c.static)
        if isinstance(c, di.Constant)
        else type(c)(_tree_map(_strict, c.value))
        for c in contexts
    )


def in_family(scenario: Scenario) -> Scenario:
    """The scenario with x, tangents, contexts and the preparation arguments (zeros,
    negated constants) as array_api_strict arrays; the references stay NumPy."""
    preparation = scenario.preparation()

    def tangents(values: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        return None if values is None else tuple(_tree_map(_strict, t) for t in values)

    return replace_scenario(
        scenario,
        x=_tree_map(_strict, scenario.x),
        contexts=_strict_contexts(scenario.contexts),
        tangents=tangents(scenario.tangents),
        prep_args=PrepArgs(
            _tree_map(_strict, preparation.x), tangents(preparation.tangents), _strict_contexts(preparation.contexts)
        ),
        name=f"{scenario.name}/array_api_strict",
        tags=scenario.tags | {"array_api_strict"},
    )


def _usable(scenario: Scenario) -> bool:
    # "sparse": this family has no sparse matrix type (AutoSparse would need dense_result=True);
    # a Python-float x is no array of any family.
    return "sparse" not in scenario.tags and not isinstance(scenario.x, float)


# Working today on every backend but JAX: one or two per operator, both dtypes, Constant and Cache.
HAND_PICKED = (
    "gradient/quadratic_constant/f64",
    "gradient/rosenbrock/f32",
    "gradient/cached_sum/f64",
    "jacobian/tanh_linear_wide/f32",
    "jacobian/cached_cube/f64",
    "jacobian/stack_where_max/f64",
    "pushforward/matrix_tanh/f64",
    "pullback/matrix_product/f64",
    "hvp/weighted_exp_constants/f64",
    "hessian/quadratic_constant/f64",
)


def hand_converted() -> list[Scenario]:
    by_name = {scenario.name: scenario for scenario in default_scenarios()}
    return [in_family(by_name[name]) for name in HAND_PICKED]


def _snapshot(scenario: Scenario) -> list[np.ndarray]:
    values = [scenario.x, *(c.value for c in scenario.contexts if isinstance(c, di.Constant))]
    values += list(scenario.tangents or ())
    return [np.array(leaf, copy=True) for value in values for leaf in _leaves(value) if family_of(leaf)]


def _leaves(tree: Any) -> list[Any]:
    leaves: list[Any] = []
    _tree_map(leaves.append, tree)
    return leaves


def run(backend: di.AbstractBackend, scenarios: list[Scenario], prep_modes: tuple[str, ...]) -> Any:
    """test_differentiation, with the mutation check done here: the runner's own
    copies and compares arrays of the built-in families only (until di.testing is
    generic), so for these x, tangents and Constants it is switched off and
    replaced by NumPy snapshots."""
    before = [_snapshot(scenario) for scenario in scenarios]
    try:
        report = test_differentiation(backend, scenarios, prep_modes=prep_modes, check_mutation=False)
    except AssertionError as err:
        report = err.report  # type: ignore[attr-defined]
    for scenario, snapshot in zip(scenarios, before):
        for old, new in zip(snapshot, _snapshot(scenario)):
            assert np.array_equal(old, new, equal_nan=True), f"{scenario.name}: an input was mutated"
    return report


def _fail_unless_known(report: Any) -> None:
    unknown = [r for r in report.failed if not any(phrase in r.message for phrase in KNOWN_DI_BUGS)]
    assert not unknown, "\n".join(r.line() for r in unknown)
    assert report.passed or report.failed, "nothing ran"
    known = sorted({reason for r in report.failed for phrase, reason in KNOWN_DI_BUGS.items() if phrase in r.message})
    if known:
        pytest.xfail("; ".join(known))


def _backend_params(backends: list[di.AbstractBackend]) -> list[Any]:
    return [pytest.param(backend, id=_label(backend)) for backend in backends]


def _compiled_sample(scenarios: list[Scenario]) -> list[Scenario]:
    """A compile per scenario: compiled backends get reverse-mode first-order ones only. (Forward
    mode under torch.compile fails, for every family, once dynamo has seen other shapes for the
    same code: a di bug outside this family's reach.)"""
    return [s for s in scenarios if s.operator in ("gradient", "pullback")]


@pytest.mark.parametrize("backend", _backend_params(EAGER + COMPILED))
def test_hand_converted_scenarios_pass_with_results_in_the_family(backend: di.AbstractBackend) -> None:
    scenarios = _compiled_sample(hand_converted()) if backend in COMPILED else hand_converted()
    modes = ("prepared-twice",) if backend in COMPILED else ("unprepared", "prepared-twice")  # (prepared: its call 1)
    report = run(backend, scenarios, modes)
    assert not report.failed, "\n".join(r.line() for r in report.failed)
    for result in report.skipped:  # autograd refuses Cache contexts, as for every family
        assert isinstance(result.error, (di.UnsupportedContextError, di.UnsupportedOperatorError)), result.line()
    ran = {r.scenario for r in report.passed}
    assert {s.operator for s in scenarios if s.name in ran} == {s.operator for s in scenarios}
    # the runner checked each result's family, dtype and shape (check_types) against x's


@pytest.mark.parametrize("backend", [pytest.param(b, id=_label(b)) for b in EAGER + COMPILED])
def test_default_scenarios_in_the_family_pass_on_every_backend(backend: di.AbstractBackend) -> None:
    try:
        scenarios = default_scenarios(families=("array_api_strict",))
    except ValueError as err:
        pytest.xfail(f"waits for the generic di.testing (scenarios in any registered family): {err}")
    scenarios = [s for s in scenarios if _usable(s)]
    if backend in COMPILED:
        scenarios = [s for s in _compiled_sample(scenarios) if "float64" in s.tags]
    elif backend in COMPILES_EACH_OPERATION:
        # every operation on a new shape or dtype is a compile: the wider dtype of each kind, whose
        # scenarios are the narrower's (float32 and complex64 results keep their dtype in the family:
        # test_results_are_strict_arrays_of_x_dtype_and_shape, test_complex)
        scenarios = [s for s in scenarios if not {"float32", "c64"} & set(s.tags)]
    try:
        report = test_differentiation(backend, scenarios, prep_modes=("prepared-twice",))
    except AssertionError as err:
        report = err.report  # type: ignore[attr-defined]
    _fail_unless_known(report)


# --- results in the family, directly ------------------------------------------------------


def sin_exp(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * xp.exp(x))


def tanh_linear(x: Any, a: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.tanh(a @ x)


@pytest.mark.parametrize("backend", _backend_params(EAGER + COMPILED))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_results_are_strict_arrays_of_x_dtype_and_shape(backend: di.AbstractBackend, dtype: str) -> None:
    values = np.array([[0.3, -1.2], [2.0, 0.5]])
    x = xps.asarray(values, dtype=getattr(xps, dtype))
    gradient = di.gradient(sin_exp, backend, x)
    assert type(gradient) is STRICT_ARRAY and gradient.dtype == x.dtype and gradient.shape == x.shape
    tolerance = 1e-4 if dtype == "float32" or isinstance(backend, di.AutoFiniteDiff) else 1e-12
    np.testing.assert_allclose(np.asarray(gradient), (np.cos(values) + np.sin(values)) * np.exp(values), rtol=tolerance)
    a = xps.asarray(np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]]), dtype=x.dtype)
    v = xps.asarray(np.array([0.1, 0.2, -0.3]), dtype=x.dtype)
    jacobian = di.jacobian(tanh_linear, backend, v, di.Constant(a))
    assert type(jacobian) is STRICT_ARRAY and jacobian.dtype == x.dtype and jacobian.shape == (2, 3)
    expected = (1 - np.tanh(np.asarray(a) @ np.asarray(v)) ** 2)[:, None] * np.asarray(a)
    np.testing.assert_allclose(np.asarray(jacobian), expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("backend", _backend_params(EAGER))
def test_a_prepared_call_writes_into_a_strict_out_buffer(backend: di.AbstractBackend) -> None:
    x = xps.asarray(np.array([0.5, 1.0, 1.5]))
    prep = di.prepare_gradient(sin_exp, backend, xps.zeros(3, dtype=xps.float64))
    out = xps.zeros(3, dtype=xps.float64)
    assert di.gradient(sin_exp, prep, backend, x, out=out) is out
    values = np.asarray(x)
    np.testing.assert_allclose(np.asarray(out), (np.cos(values) + np.sin(values)) * np.exp(values), rtol=1e-6)


def test_a_strict_prep_refuses_another_shape_naming_the_family() -> None:
    backend = di.AutoFiniteDiff()
    prep = di.prepare_gradient(sin_exp, backend, xps.zeros(3, dtype=xps.float64))
    with pytest.raises(di.PreparationMismatchError, match=r"array_api_strict float64 \(3,\).*array_api_strict"):
        di.gradient(sin_exp, prep, backend, xps.zeros(4, dtype=xps.float64))


def test_the_family_is_recognised_and_converts_without_copying() -> None:
    values = np.arange(3.0)
    x = xps.asarray(values)
    assert family_of(x) == "array_api_strict"
    assert spec_of(x).describe() == "array_api_strict float64 (3,)"
    assert np.shares_memory(get_family("array_api_strict").to_numpy(x), values)
    assert np.shares_memory(np.asarray(converter("numpy", "array_api_strict")(values)), values)
    if di.AutoTorch().is_installed:
        import torch

        tensor = converter("array_api_strict", "torch")(x)
        assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float64
        back = converter("torch", "array_api_strict")(tensor)
        assert type(back) is STRICT_ARRAY and np.array_equal(np.asarray(back), values)


# --- minimal reproductions of the known di bugs -----------------------------------------


def test_derivative_of_a_0d_strict_array() -> None:
    def cube(x: Any) -> Any:
        return x**3

    derivative = di.derivative(cube, di.AutoFiniteDiff(), xps.asarray(2.0))
    assert type(derivative) is STRICT_ARRAY
    np.testing.assert_allclose(np.asarray(derivative), 12.0, rtol=1e-6)


def test_gradient_with_respect_to_a_dict_of_strict_arrays() -> None:
    def total(x: Any) -> Any:
        xp = di.array_namespace(x["a"])
        return xp.sum(x["a"] ** 2) + xp.sum(x["b"])

    gradient = di.gradient(total, di.AutoFiniteDiff(), {"a": xps.asarray([1.0, 2.0]), "b": xps.asarray([3.0])})
    assert type(gradient["a"]) is STRICT_ARRAY
    np.testing.assert_allclose(np.asarray(gradient["a"]), [2.0, 4.0], rtol=1e-6)


# --- the documentation shows this code ----------------------------------------------------------


def test_docs_backends_page_shows_the_family_exactly() -> None:
    assert_page_shows(excerpt(__file__, "family"), __file__)
    assert any(REGISTRATION in block for block in python_blocks()), "the page registers it as the test does"
