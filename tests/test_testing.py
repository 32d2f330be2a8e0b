"""di.testing: the scenarios, test_differentiation on every backend, the pytest helper, the benchmark."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from typing import Any, ClassVar

import numpy as np
import pytest
from conftest import ENGINES, FAMILIES, compiles, engine_name
from extension_support import restored_registries

import di
from di.backends.engine import Engine
from di.backends.selectors import engine_of
from di.engines import BUILTIN_ENGINES
from di.families import Family
from di.testing import (
    OPERATORS,
    PREP_MODES,
    Case,
    Scenario,
    approximates,
    backend_label,
    benchmark_differentiation,
    default_scenarios,
    default_tolerances,
    engine_backends,
    parse_backend,
    pytree_leaves,
    pytrees_supported,
    replace_scenario,
    run_case,
    test_differentiation,
)
from di.testing.benchmark import BENCHMARK_COLUMNS
from di.testing.compare import compare
from di.testing.complex_scenarios import _real_hessian as columns_of_the_hvp
from di.testing.labels import known_labels
from di.testing.pytest_plugin import backend_params, check_case, make_test, parametrize_differentiation

BACKENDS = engine_backends()  # each installed engine's default and compiled selectors
# The selectors whose unprepared calls compile (or, for eager JAX, trace) every time, at ~0.1 s each.
SLOW_UNPREPARED = [b for b in BACKENDS if compiles(b) or engine_name(b) == "jax"]

SCENARIOS = default_scenarios()


# One scenario per operator: JAX compiles at every unprepared call (~0.1 s), so SLOW_UNPREPARED
# runs the unprepared mode on these only, and every scenario prepared (twice:
# the first call is what "prepared" checks, the second checks reuse).
UNPREPARED_SUBSET = [next(s for s in SCENARIOS if s.operator == operator) for operator in OPERATORS]


# --- the scenarios --------------------------------------------------------------------------


def test_default_scenarios_cover_every_operator_dtype_context_and_shape() -> None:
    assert len(SCENARIOS) >= 30
    assert {s.operator for s in SCENARIOS} == set(OPERATORS)
    tags = set().union(*(s.tags for s in SCENARIOS))
    assert {"float32", "float64", "constant", "cache", "pytree", "matrix", "0d", "python-float"} <= tags
    for operator in OPERATORS:
        dtypes = {tag for s in SCENARIOS if s.operator == operator for tag in s.tags & {"float32", "float64"}}
        assert dtypes == {"float32", "float64"}, operator
    outputs = {np.shape(s.y) == () for s in SCENARIOS if s.y is not None}
    assert outputs == {True, False}  # scalar and array outputs
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)
    for s in SCENARIOS:
        spec = OPERATORS[s.operator]
        assert s.reference(spec.call_result) is not None, s.name
        assert all(s.reference(which) is not None for which in spec.value_and_results), s.name


def _numeric_jacobian(f: Any, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of any-shaped f at any-shaped x: shape f(x).shape + x.shape."""
    x = np.asarray(x, dtype=np.float64)
    y_shape = np.shape(f(x))
    jac = np.zeros((int(np.prod(y_shape)), x.size))
    for i in range(x.size):
        step = np.zeros(x.size)
        step[i] = h * max(1.0, abs(x.reshape(-1)[i]))
        up = np.asarray(f(x + step.reshape(x.shape)), dtype=np.float64).reshape(-1)
        down = np.asarray(f(x - step.reshape(x.shape)), dtype=np.float64).reshape(-1)
        jac[:, i] = (up - down) / (2 * step[i])
    return jac.reshape(y_shape + x.shape)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if not s.is_pytree], ids=lambda s: s.name)
def test_references_agree_with_numerical_derivatives(scenario: Scenario) -> None:
    """The analytic references, checked by plain NumPy central differences (no backend)."""
    if np.iscomplexobj(scenario.x):
        _check_complex_references(scenario)
        return
    x = np.asarray(scenario.x, dtype=np.float64)

    def values() -> list[Any]:
        return [
            np.array(c.value, dtype=np.float64) if isinstance(c.value, np.ndarray) else c.value
            for c in scenario.contexts
        ]

    def f(point: np.ndarray) -> Any:
        output = scenario.f(point, *values())
        return np.asarray(output[0] if scenario.has_aux else output, dtype=np.float64)

    if scenario.has_aux:  # the aux reference is what f's own evaluation in NumPy gives
        _assert_same_aux(scenario.f(x, *values())[1], scenario.aux)

    def first(point: np.ndarray) -> np.ndarray:
        return _numeric_jacobian(f, point)

    jac = first(x)
    if scenario.operator == "pushforward":
        for t, ref in zip(scenario.tangents or (), scenario.res1):
            _assert_close(np.tensordot(jac, t, axes=t.ndim), ref, 1e-6)
    elif scenario.operator == "pullback":
        for t, ref in zip(scenario.tangents or (), scenario.res1):
            _assert_close(np.tensordot(t, jac, axes=np.ndim(t)), ref, 1e-6)
    else:
        _assert_close(jac, scenario.res1, 1e-6)
    if scenario.res2 is not None:
        hess = _numeric_jacobian(first, x, h=1e-4)
        if scenario.operator == "hvp":
            for t, ref in zip(scenario.tangents or (), scenario.res2):
                _assert_close(np.tensordot(hess, t, axes=t.ndim), ref, 1e-5)
        else:
            _assert_close(hess, scenario.res2, 1e-5)


def _check_complex_references(scenario: Scenario) -> None:
    """docs/complex.md's convention by central differences along the real and imaginary axes."""
    x = np.asarray(scenario.x, dtype=np.complex128)
    values = [
        np.asarray(c.value, np.complex128) if isinstance(c.value, np.ndarray) else c.value for c in scenario.contexts
    ]

    def f(z: np.ndarray) -> np.ndarray:
        return np.asarray(scenario.f(z, *values))

    def along(g: Any, z: np.ndarray, direction: np.ndarray, h: float = 1e-6) -> np.ndarray:
        return (np.asarray(g(z + h * direction)) - np.asarray(g(z - h * direction))) / (2 * h)

    def unit(k: int, scale: complex = 1.0) -> np.ndarray:
        e = np.zeros(x.size, complex)
        e[k] = scale
        return e.reshape(x.shape)

    if scenario.operator in ("gradient", "hvp", "hessian"):  # real-valued f: df/da + i df/db

        def gradient(z: np.ndarray) -> np.ndarray:
            parts = [along(f, z, unit(k)) + 1j * along(f, z, unit(k, 1j)) for k in range(x.size)]
            return np.asarray(parts).reshape(x.shape)

        assert np.isrealobj(f(x)) or np.all(np.imag(f(x)) == 0)
        _assert_close(gradient(x), scenario.res1, 1e-6)
        if scenario.operator == "hvp":  # the derivative of the gradient map along the tangent
            for t, ref in zip(scenario.tangents or (), scenario.res2 or ()):
                _assert_close(along(gradient, x, np.asarray(t, complex), h=1e-4), ref, 1e-5)
        elif scenario.operator == "hessian":  # column (q, k): along the real (q = 0) or imaginary unit at k

            def hvp(t: np.ndarray) -> np.ndarray:
                return along(gradient, x, t.reshape(x.shape), h=1e-4).reshape(-1)

            hessian = columns_of_the_hvp(hvp, x.size)
            _assert_close(hessian.reshape((2, *x.shape, 2, *x.shape)), scenario.res2, 1e-5)
        return
    # holomorphic f: the complex derivative df/da, with df/db = i df/da (Cauchy-Riemann)
    jac = np.stack([along(f, x, unit(k)) for k in range(x.size)], -1).reshape(np.shape(f(x)) + x.shape)
    imaginary = np.stack([along(f, x, unit(k, 1j)) for k in range(x.size)], -1).reshape(jac.shape)
    _assert_close(imaginary, 1j * jac, 1e-6)
    if scenario.operator == "pushforward":
        for t, ref in zip(scenario.tangents or (), scenario.res1):
            _assert_close(np.tensordot(jac, t, axes=np.ndim(t)), ref, 1e-6)
    elif scenario.operator == "pullback":  # J^H w
        for t, ref in zip(scenario.tangents or (), scenario.res1):
            _assert_close(np.tensordot(t, jac.conj(), axes=np.ndim(t)), ref, 1e-6)
    else:
        _assert_close(jac, scenario.res1, 1e-6)


def _assert_same_aux(actual: Any, desired: Any) -> None:
    """Arrays close, other leaves equal, containers alike."""
    if isinstance(desired, dict):
        assert isinstance(actual, dict) and list(actual) == list(desired)
        for key in desired:
            _assert_same_aux(actual[key], desired[key])
    elif isinstance(desired, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(desired)
        for item, expected in zip(actual, desired):
            _assert_same_aux(item, expected)
    elif desired is None or isinstance(desired, (str, int)):
        assert actual == desired and type(actual) is type(desired)
    else:
        _assert_close(actual, desired, 1e-12)


def _assert_close(actual: Any, desired: Any, rtol: float) -> None:
    """Norm-wise: max |actual - desired| <= rtol * max(1, max |desired|)."""
    actual, desired = np.asarray(actual), np.asarray(desired)
    assert actual.shape == desired.shape
    error = np.max(np.abs(actual - desired), initial=0.0)
    assert error <= rtol * max(1.0, np.max(np.abs(desired), initial=0.0)), (error, actual, desired)


def test_preparation_defaults_to_zeros_and_negated_constants() -> None:
    a = np.arange(3.0)
    s = Scenario(
        "hvp",
        lambda x, a, k, buf: (a * x * x).sum() * k,
        np.ones(3),
        contexts=(di.Constant(a), di.Constant(2), di.Cache(np.full(3, 7.0))),
        tangents=(np.ones(3),),
    )
    prep = s.preparation()
    np.testing.assert_array_equal(prep.x, np.zeros(3))
    np.testing.assert_array_equal(prep.tangents[0], np.zeros(3))
    np.testing.assert_array_equal(prep.contexts[0].value, -a)
    assert prep.contexts[1].value == 2  # ints may be shapes or static: kept
    np.testing.assert_array_equal(prep.contexts[2].value, np.zeros(3))
    assert isinstance(prep.contexts[2], di.Cache)
    np.testing.assert_array_equal(a, np.arange(3.0))  # the scenario's own values are untouched


def test_scenario_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="unknown operator"):
        Scenario("gradiant", np.sum, np.ones(2))
    with pytest.raises(ValueError, match="needs tangents"):
        Scenario("pushforward", np.sin, np.ones(2))
    with pytest.raises(TypeError, match=r"di\.Constant or di\.Cache"):
        Scenario("gradient", np.sum, np.ones(2), contexts=(np.ones(2),))


# --- test_differentiation on every backend ------------------------------------------------------


# Failures caused by known bugs in di's core (not in di.testing), with the reason; each is
# reported as an expected failure until fixed: delete its entry then. Any other failure fails.
KNOWN_CORE_BUGS: dict[tuple[str, str], str] = {}


def _report(backend: Any, scenarios: list[Scenario], prep_modes: tuple[str, ...]) -> Any:
    try:
        return test_differentiation(backend, scenarios, prep_modes=prep_modes)
    except AssertionError as err:
        return err.report  # type: ignore[attr-defined]


# The complex scenarios run on every backend in tests/test_complex.py (every operator, NumPy and
# native families, complex64 and complex128) and in `python -m di`: not a third time here.
REAL_SCENARIOS = [s for s in SCENARIOS if "complex" not in s.tags]


# "prepared" is the first call of "prepared-twice" (same prep, same checks): not run a second time here.
EVERY_BACKEND_MODES = tuple(mode for mode in PREP_MODES if mode != "prepared")


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_label)
def test_every_backend_agrees_with_the_default_scenarios(backend: Any) -> None:
    if backend in SLOW_UNPREPARED:
        report = _report(backend, REAL_SCENARIOS, ("prepared-twice",))
        report.results += _report(backend, UNPREPARED_SUBSET, ("unprepared",)).results
    else:
        report = _report(backend, REAL_SCENARIOS, EVERY_BACKEND_MODES)
    assert report.passed, "nothing ran"
    ran = {(r.scenario, r.prep_mode) for r in report.passed}
    for result in report.skipped:
        assert (result.scenario, result.prep_mode) not in ran
        assert result.message
    _fail_unless_known(report)


@pytest.mark.parametrize("family", [name for name in FAMILIES if name != "numpy"])
def test_inputs_of_every_family_give_results_in_that_family(family: str) -> None:
    scenarios = default_scenarios(operators=["gradient", "pullback"], include_pytrees=False, families=(family,))
    scenarios = [s for s in scenarios if "float64" in s.tags]
    report = _report(ENGINES, scenarios, ("prepared-twice",))  # (compiled variants: covered by the numpy family)
    _fail_unless_known(report)


def _fail_unless_known(report: Any) -> None:
    """Fail on any failure not in KNOWN_CORE_BUGS; mark the test xfail for the known ones."""
    unexpected = [r for r in report.failed if (r.backend, r.scenario) not in KNOWN_CORE_BUGS]
    assert not unexpected, "\n".join(r.line() for r in unexpected)
    known = sorted({KNOWN_CORE_BUGS[(r.backend, r.scenario)] for r in report.failed})
    if known:
        pytest.xfail("known di core bugs: " + "; ".join(known))


def test_a_wrong_reference_fails_and_is_named() -> None:
    good = next(s for s in SCENARIOS if s.name == "gradient/sum_sin/f64")
    wrong = replace_scenario(good, name="gradient/deliberately_wrong", res1=good.res1 + 0.1)
    backends = [di.AutoFiniteDiff(), di.AutoAutograd()] if di.AutoAutograd().is_installed else [di.AutoFiniteDiff()]
    with pytest.raises(AssertionError) as info:
        test_differentiation(backends, [good, wrong])
    message = str(info.value)
    assert "gradient/deliberately_wrong" in message
    assert "gradient/sum_sin/f64" not in message
    assert message.count("deliberately_wrong") == 3 * len(backends)  # every failing combination, one line each
    for mode in PREP_MODES:
        assert f"| {mode} |" in message
    assert "max abs error" in message
    report = info.value.report  # type: ignore[attr-defined]
    assert len(report.passed) == 3 * len(backends)


def _sum_sqrt(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sqrt(x))  # gradient at [0, 1]: [inf, 0.5]


@pytest.mark.parametrize(
    ("result", "reference", "abs_error"),
    [
        ([np.inf, 0.5], [np.inf, 0.5], 0.0),
        ([np.nan, 0.5], [np.nan, 0.5], 0.0),
        ([np.inf, 0.5], [np.inf, 1000.0], 999.5),  # a wrong finite entry beside an infinite one
        ([np.inf, 0.5], [-np.inf, 0.5], math.inf),
        ([np.nan, 0.5], [np.inf, 0.5], math.inf),
        ([1e300, 0.5], [np.inf, 0.5], math.inf),
        ([np.inf, 0.5], [1e300, 0.5], math.inf),
    ],
)
def test_non_finite_references_are_matched_entry_for_entry(
    result: list[float], reference: list[float], abs_error: float
) -> None:
    got, expected = np.array(result), np.array(reference)
    errors = compare("gradient", got, expected, 1e-9, 0.0, np.zeros(2), True, False)
    assert errors[0] == abs_error
    assert (errors[2] == []) == (abs_error == 0.0)
    if math.isinf(abs_error):
        assert errors[2] == ["gradient: its NaN or infinite entries differ from the reference's"]


def test_a_wrong_result_beside_an_infinite_reference_fails() -> None:
    x = np.array([0.0, 1.0])
    backends = [b for b in BACKENDS if not approximates(b)][:1]  # AD gives the infinite entry
    if not backends:
        pytest.skip("no automatic differentiation backend installed")
    right = Scenario("gradient", _sum_sqrt, x, res1=np.array([np.inf, 0.5]), name="gradient/sqrt")
    wrong = replace_scenario(right, name="gradient/sqrt_wrong", res1=np.array([np.inf, 1000.0]))
    with np.errstate(divide="ignore"):
        report = test_differentiation(backends, [right], prep_modes=["prepared"])
        assert len(report.passed) == 1
        with pytest.raises(AssertionError, match="max abs error 1e\\+03") as info:
            test_differentiation(backends, [wrong], prep_modes=["prepared"])
    failed = info.value.report.failed  # type: ignore[attr-defined]
    assert [(r.scenario, r.max_abs_error) for r in failed] == [("gradient/sqrt_wrong", 999.5)]


def test_explicit_tolerances_override_the_defaults() -> None:
    scenario = next(s for s in SCENARIOS if s.name == "gradient/rosenbrock/f64")
    test_differentiation(di.AutoFiniteDiff(), [scenario])  # default: finite differences get looser tolerances
    with pytest.raises(AssertionError, match="exceeds atol 0"):
        test_differentiation(di.AutoFiniteDiff(), [scenario], rtol=0.0, atol=0.0)


def test_default_tolerances_adapt_to_dtype_and_finite_differences() -> None:
    ad64, ad32 = default_tolerances(di.AutoJAX(), np.float64), default_tolerances(di.AutoJAX(), "float32")
    fd64, fd64_2 = (
        default_tolerances(di.AutoFiniteDiff(), np.float64),
        default_tolerances(di.AutoFiniteDiff(), "float64", 2),
    )
    forward = default_tolerances(di.AutoFiniteDiff(method="forward"), np.float64)
    assert ad64[0] < ad32[0]
    assert ad64[0] < fd64[0] < fd64_2[0]
    assert fd64[0] < forward[0]
    assert default_tolerances(di.AutoFiniteDiff(), "torch.float32")[0] == ad32[0]


def test_an_operator_missing_from_di_is_skipped_not_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = next(s for s in SCENARIOS if s.operator == "hvp")
    monkeypatch.delattr(di, "gradient_and_hvp", raising=False)
    monkeypatch.delitem(di._LAZY, "gradient_and_hvp")  # di loads public names on first use: unlist it too
    report = test_differentiation(di.AutoFiniteDiff(), [scenario])
    assert not report.passed and not report.failed
    assert all("not available in this di version" in r.message for r in report.skipped)
    assert "di.gradient_and_hvp" in report.skipped[0].message


def _sum_squares(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x)


def test_a_scenario_without_the_reference_of_its_result_is_skipped_not_passed() -> None:
    x = np.array([1.0, 2.0])
    gradient = Scenario("gradient", _sum_squares, x, name="gradient/no_res1")
    hvp = Scenario("hvp", _sum_squares, x, tangents=(np.ones(2),), res1=2 * x, name="hvp/no_res2")
    report = test_differentiation(di.AutoFiniteDiff(), [gradient, hvp])
    assert not report.passed and not report.failed and len(report.skipped) == 6
    assert {r.message for r in report.skipped} == {
        "no reference: the scenario has no res1 to compare the gradient with",
        "no reference: the scenario has no res2 to compare the hvp with",
    }
    wrong_value = Scenario("gradient", _sum_squares, x, y=123.0, name="gradient/wrong_y")  # what it has is checked
    result = run_case(Case(di.AutoFiniteDiff(), wrong_value, "prepared"))
    assert result.status == "failed" and result.message.startswith("value_and_gradient y: max abs error 118")


def test_an_unsupported_context_is_skipped() -> None:
    pytest.importorskip("autograd")
    scenario = next(s for s in SCENARIOS if "cache" in s.tags and s.operator == "gradient")
    report = test_differentiation(di.AutoAutograd(), [scenario])
    assert len(report.skipped) == 3 and not report.passed
    assert report.skipped[0].message.startswith("UnsupportedContextError")


def test_pytree_scenarios_are_skipped_until_di_takes_pytrees() -> None:
    scenarios = [s for s in SCENARIOS if s.is_pytree]
    assert scenarios and all("pytree" in s.tags for s in scenarios)
    report = test_differentiation(di.AutoFiniteDiff(), scenarios)
    if pytrees_supported():
        assert len(report.passed) == 3 * len(scenarios)
    else:
        assert all("pytree" in r.message for r in report.skipped) and len(report.skipped) == 3 * len(scenarios)
    assert pytree_leaves({"b": np.ones(2), "a": [1.0, (2.0,)]})[:2] == [1.0, 2.0]


def _sum_squares_of_two(x: Any) -> Any:
    xp = di.array_namespace(x[0])
    return xp.sum(x[0] * x[0]) + xp.sum(x[1] * x[1])


@pytest.mark.parametrize("container", [tuple, list])
def test_a_sequence_x_of_mixed_dtypes_is_checked_leaf_by_leaf(container: Any) -> None:
    x = container([np.ones(2, dtype=np.float32), np.ones(2)])
    scenario = Scenario(
        "gradient", _sum_squares_of_two, x, res1=(2 * np.ones(2), 2 * np.ones(2)), name="gradient/mixed"
    )
    report = test_differentiation(BACKENDS, [scenario], prep_modes=["prepared"])
    assert len(report.passed) == len(BACKENDS)
    both_float64 = (2 * np.ones(2), 2 * np.ones(2))
    problems = compare("gradient", both_float64, scenario.res1, 1e-9, 0.0, x, True, False)[2]
    assert problems == ["gradient[0]: expected dtype float32 like x, got float64"]


def _mutating(x: Any, c: Any) -> Any:
    c[0] = 99.0  # writes into a Constant: forbidden
    return (x * x).sum()


def test_a_mutated_constant_is_reported() -> None:
    scenario = Scenario(
        "gradient",
        _mutating,
        np.array([1.0, 2.0]),
        contexts=(di.Constant(np.zeros(2)),),
        res1=np.array([2.0, 4.0]),
        name="gradient/mutates_constant",
    )
    with pytest.raises(AssertionError, match="Constant 1 was mutated"):
        test_differentiation(di.AutoFiniteDiff(), [scenario])
    test_differentiation(di.AutoFiniteDiff(), [scenario], check_mutation=False)


def test_a_result_of_the_wrong_dtype_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = next(s for s in SCENARIOS if s.name == "gradient/sum_sin/f64")
    original = di.gradient
    monkeypatch.setattr(di, "gradient", lambda *args, **kw: original(*args, **kw).astype(np.float32))
    with pytest.raises(AssertionError, match="expected dtype float64 like x, got float32"):
        test_differentiation(di.AutoFiniteDiff(), [scenario], prep_modes=("unprepared",))
    test_differentiation(di.AutoFiniteDiff(), [scenario], prep_modes=("unprepared",), check_types=False, rtol=1e-6)


def test_an_exception_inside_f_fails_the_case_with_its_message() -> None:
    def broken(x: Any) -> Any:
        raise RuntimeError("boom in f")

    scenario = Scenario("gradient", broken, np.ones(2), res1=np.zeros(2), name="gradient/broken")
    result = run_case(Case(di.AutoFiniteDiff(), scenario, "prepared"))
    assert result.status == "failed" and result.message == "RuntimeError: boom in f"
    assert isinstance(result.error, RuntimeError)


# --- the pytest helper ------------------------------------------------------------------------------

_HELPER_SCENARIOS = [s for s in SCENARIOS if s.name in ("gradient/sum_sin/f32", "jacobian/cached_cube/f64")]


@parametrize_differentiation([di.AutoFiniteDiff()], _HELPER_SCENARIOS)
def test_pytest_helper_gives_one_case_per_combination(di_case: Case) -> None:
    result = check_case(di_case)
    assert result.passed


test_pytest_helper_one_liner = make_test(di.AutoFiniteDiff(), _HELPER_SCENARIOS[:1], prep_modes=("prepared",))


def test_pytest_helper_skips_and_fails_through_pytest() -> None:
    pytest.importorskip("autograd")
    cache_scenario = next(s for s in SCENARIOS if "cache" in s.tags)
    with pytest.raises(pytest.skip.Exception, match="UnsupportedContextError"):
        check_case(Case(di.AutoAutograd(), cache_scenario, "prepared"))
    good = _HELPER_SCENARIOS[0]
    wrong = replace_scenario(good, res1=good.res1 * 2, name="gradient/wrong")
    with pytest.raises(AssertionError, match="finitediff \\| gradient/wrong \\| prepared"):
        check_case(Case(di.AutoFiniteDiff(), wrong, "prepared"))


def test_an_engine_joins_the_test_matrices_by_registering() -> None:
    """engine_backends and backend_params read the registry: an engine registered from
    outside gives its default selector, then the ones its record declares compiled;
    every_label gives all its labelled selectors; an engine that is not installed is left
    out; one declaring tolerances approximates."""

    @dataclasses.dataclass(frozen=True)
    class AutoOutside(di.AbstractBackend):
        compile: bool = False
        slow: bool = False

    @dataclasses.dataclass(frozen=True)
    class AutoAbsent(di.AbstractBackend):
        pass

    @dataclasses.dataclass(frozen=True)
    class AutoApproximate(di.AbstractBackend):
        pass

    plain, compiled, slow = AutoOutside(), AutoOutside(compile=True), AutoOutside(slow=True)
    adapter = "di.engines.finitediff.adapter:FiniteDiffAdapter"  # (never loaded here)
    labels = {"outside": plain, "outside-compile": compiled, "outside-slow": slow}
    with restored_registries():
        before = engine_backends(every_label=True)
        di.register_engine(
            Engine(
                "outside",
                AutoOutside,
                adapter,
                labels=labels,
                fastest=("outside-compile",),
                compiled=("outside-compile",),
            )
        )
        di.register_engine(Engine("absent", AutoAbsent, adapter, module="no_such_module_of_di_tests"))
        assert engine_backends(compiled=False)[-1] == plain and AutoAbsent() not in engine_backends(every_label=True)
        assert engine_backends()[-2:] == [plain, compiled]
        assert engine_backends(every_label=True) == [*before, plain, compiled, slow]
        params = backend_params()
        assert [p.values[0] for p in params] == engine_backends()
        assert [p.id for p in params][-2:] == ["outside", "outside-compile"]
        assert not approximates(plain)
        approximate = Engine("approximate", AutoApproximate, adapter, tolerances=lambda selector, order: (1e-3, 1e-6))
        di.register_engine(approximate)
        assert approximates(AutoApproximate()) and approximates(di.SecondOrder(AutoApproximate(), plain))
    assert plain not in engine_backends(every_label=True)


def test_test_differentiation_is_not_collected_by_pytest() -> None:
    assert test_differentiation.__test__ is False  # type: ignore[attr-defined]


# --- benchmark ------------------------------------------------------------------------------------------


def test_benchmark_rows_have_every_column_and_count_calls() -> None:
    scenarios = [s for s in SCENARIOS if s.name in ("gradient/sum_sin/f64", "hvp/sum_sin/f64")]
    backends: list[Any] = [di.AutoFiniteDiff()]
    if di.AutoJAX().is_installed:
        backends.append(di.AutoJAX(jit=True))
    rows = benchmark_differentiation(backends, scenarios, min_time=0.001, max_samples=5)
    assert len(rows) == len(backends) * len(scenarios) * 2
    for row in rows:
        assert tuple(row) == BENCHMARK_COLUMNS
        assert row["status"] == "ok", row
        assert row["samples"] >= 3 and row["time_min"] <= row["time_median"]
        assert row["compile_time"] >= 0
    by_key = {(r["backend"], r["scenario"], r["prepared"]): r for r in rows}
    assert by_key[("finitediff", "gradient/sum_sin/f64", True)]["calls"] == 10  # central differences, n = 5
    if len(backends) > 1:
        assert by_key[("jax-jit", "gradient/sum_sin/f64", True)]["calls"] == 0  # compiled: f is not called again
        assert by_key[("jax-jit", "gradient/sum_sin/f64", False)]["calls"] == 0  # unprepared: the cache holds its prep


def test_benchmark_reports_skips_and_errors_as_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = next(s for s in SCENARIOS if s.operator == "hessian")
    monkeypatch.delattr(di, "hessian", raising=False)
    monkeypatch.delitem(di._LAZY, "hessian")  # di loads public names on first use: unlist it too
    (row,) = benchmark_differentiation(di.AutoFiniteDiff(), [scenario], prepared=(True,))
    assert row["status"] == "skipped" and "not available" in row["error"] and math.isnan(row["time_median"])


# --- names and imports ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend",
    [
        di.AutoJAX(),
        di.AutoJAX(jit=True),
        di.AutoJAX(mode="forward"),
        di.AutoTorch(compile=True),
        di.AutoAutograd(),
        di.AutoFiniteDiff(),
        di.AutoFiniteDiff(method="forward"),
        di.AutoFiniteDiff(step=1e-4),
    ],
    ids=repr,
)
def test_backend_labels_read_back(backend: Any) -> None:
    assert parse_backend(backend_label(backend)) == backend


def test_parse_backend_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="known backends: jax, jax-jit, torch, torch-compile"):
        parse_backend("theano")
    with pytest.raises(ValueError):
        parse_backend("jax(jit=")
    with pytest.raises(ValueError, match="no boolean option or option value 'jot'"):
        parse_backend("jax-jot")


def _engine_name(backend: Any) -> str:
    record = engine_of(backend)
    return record.name if record is not None else ""


def test_labels_follow_one_rule_from_the_selectors_name_and_options() -> None:
    labels = {
        di.AutoJAX(): "jax",
        di.AutoJAX(jit=True): "jax-jit",
        di.AutoTorch(): "torch",
        di.AutoTorch(compile=True): "torch-compile",
        di.AutoAutograd(): "autograd",
        di.AutoFiniteDiff(): "finitediff",
        di.AutoFiniteDiff(method="forward"): "finitediff-forward",
        di.AutoJAX(mode="forward"): "jax(mode='forward')",
        di.AutoTorch(compile=True, compile_options={"backend": "eager"}): (
            "torch-compile(compile_options=(('backend', 'eager'),))"
        ),
    }
    assert {backend: backend_label(backend) for backend in labels} == labels
    assert known_labels()[:5] == ["jax", "jax-jit", "torch", "torch-compile", "autograd"]
    # (engines other tests register from outside follow the built-in ones: left out here)
    built_in_engines = {path.partition(":")[0].rsplit(".", 1)[-1] for path in BUILTIN_ENGINES}
    built_in = [
        label
        for label in known_labels()
        if _engine_name(parse_backend(label)) in built_in_engines
        and type(parse_backend(label)).__module__.startswith("di.")  # (not a test's subclass of one)
    ]
    assert built_in[-2:] == ["finitediff", "finitediff-forward"]  # (the engines added since sit between)
    assert parse_backend("PyTorch-compile") == di.AutoTorch(compile=True)  # aliases and any case


@dataclasses.dataclass(frozen=True)
class _OutOfTree(di.AbstractBackend):
    """A selector defined outside di, with a name of its own (never run: labels only)."""

    fused: bool = False
    flavour: str = "plain"
    steps: int = 1
    name: ClassVar[str] = "out-of-tree"

    def __post_init__(self) -> None:
        if self.flavour not in ("plain", "spicy"):
            raise ValueError(f"_OutOfTree(flavour={self.flavour!r}): flavour must be 'plain' or 'spicy'")


@pytest.mark.parametrize(
    ("backend", "label"),
    [
        (_OutOfTree(), "out-of-tree"),
        (_OutOfTree(fused=True), "out-of-tree-fused"),
        (_OutOfTree(flavour="spicy", fused=True), "out-of-tree-fused-spicy"),
        (_OutOfTree(steps=3), "out-of-tree(steps=3)"),
    ],
)
def test_a_selector_defined_out_of_tree_gets_labels_by_the_same_rule(backend: Any, label: str) -> None:
    assert backend_label(backend) == label
    assert parse_backend(label) == backend
    assert {"out-of-tree", "out-of-tree-fused", "out-of-tree-spicy"} <= set(known_labels())


# --- any registered array family ----------------------------------------------------------------


class _StrictFamily(Family):
    """array-api-strict arrays, registered here as a third-party family would be."""

    name = "strict_test"
    display = "array-api-strict"
    module = "array_api_strict"

    def array_types(self, module: Any) -> tuple[type, ...]:
        from array_api_strict._array_object import Array

        return (Array,)

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def from_numpy(self, array: np.ndarray) -> Any:
        import array_api_strict

        return array_api_strict.asarray(np.asarray(array))

    def namespace(self) -> Any:
        import array_api_strict

        return array_api_strict


@pytest.fixture
def strict_family(monkeypatch: pytest.MonkeyPatch) -> str:
    """The family registered for one test only (the registry is restored after)."""
    pytest.importorskip("array_api_strict")
    from di.families import registry

    monkeypatch.setattr(registry, "_FAMILIES", dict(registry._FAMILIES))
    monkeypatch.setattr(registry, "_FAMILY_BY_TYPE", {})
    monkeypatch.setattr(registry, "_CONVERTERS", {})
    di.register_family(_StrictFamily())
    return _StrictFamily.name


def test_scenarios_are_made_in_any_registered_family(strict_family: str) -> None:
    from di.families import family_of

    scenarios = default_scenarios(operators=["gradient", "hvp"], include_pytrees=False, families=(strict_family,))
    assert scenarios and all(s.name.endswith(f"/{strict_family}") for s in scenarios)
    assert all(strict_family in s.tags for s in scenarios)
    assert all(family_of(leaf) == strict_family for s in scenarios for leaf in pytree_leaves(s.x))
    with_cache = next(s for s in scenarios if "cache" in s.tags and "constant" not in s.tags)
    preparation = with_cache.preparation()  # zeros like x and a zero Cache, in the family
    assert family_of(preparation.x) == family_of(preparation.contexts[0].value) == strict_family
    np.testing.assert_array_equal(np.asarray(preparation.contexts[0].value), np.zeros(with_cache.x.shape))
    with_constant = next(s for s in scenarios if "constant" in s.tags)
    negated = with_constant.preparation().contexts[0].value
    np.testing.assert_array_equal(np.asarray(negated), -np.asarray(with_constant.contexts[0].value))
    # finite differences go through NumPy: the results come back in the family, agreeing with the references
    checked = [s for s in scenarios if not s.is_pytree]
    report = test_differentiation(di.AutoFiniteDiff(), checked, prep_modes=("prepared-twice",))
    assert len(report.passed) == len(checked)


def test_an_unknown_family_is_refused_with_the_registered_ones() -> None:
    with pytest.raises(ValueError, match="unknown array family 'nope'; registered families: 'numpy'"):
        default_scenarios(families=("nope",))


def test_importing_di_testing_imports_no_engine_and_di_does_not_import_it() -> None:
    code = (
        "import sys, di\n"
        "assert 'di.testing' not in sys.modules\n"
        "import di.testing\n"
        "di.testing.default_scenarios()\n"
        "loaded = [m for m in ('jax', 'torch', 'autograd', 'matplotlib', 'rich') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the tables the built-in scenarios are written in ------------------------------------------


def _cube(x: Any, a: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.multiply(a, x**3)


def test_a_table_row_rounds_its_draws_to_its_dtype_and_computes_references_from_the_rounded_values() -> None:
    from di.testing.scenario_table import SAME_X, Analytic, Row, RowGroup, Uniform

    cube = Analytic(_cube, first=lambda x, a: np.diag(3 * a * x**2), second=None)
    group = RowGroup(
        dtypes=(np.float64, np.float32),
        rows=(
            Row("jacobian", cube, x=Uniform(3), contexts=(di.Constant(Uniform(3)),)),
            Row("pushforward", cube, x=SAME_X, contexts=(di.Constant(2.0),), tangents=(Uniform(3),) * 2),
        ),
    )
    scenarios = group(np.random.default_rng(0))
    assert [s.name for s in scenarios] == [
        "jacobian/_cube/f64",
        "pushforward/_cube/f64",
        "jacobian/_cube/f32",
        "pushforward/_cube/f32",
    ]
    assert [sorted(s.tags) for s in scenarios] == [["constant", "float64"]] * 2 + [["constant", "float32"]] * 2
    for jacobian, pushforward in (scenarios[:2], scenarios[2:]):
        assert pushforward.x is jacobian.x  # SAME_X: one point
        x64 = jacobian.x.astype(np.float64)
        a64 = np.asarray(jacobian.contexts[0].value, dtype=np.float64)
        assert jacobian.contexts[0].value.dtype == jacobian.x.dtype
        np.testing.assert_array_equal(jacobian.res1, np.diag(3 * a64 * x64**2))
        assert pushforward.contexts[0].value == 2.0  # a Python float stays one
        for tangent, result in zip(pushforward.tangents, pushforward.res1):
            assert tangent.dtype == jacobian.x.dtype
            np.testing.assert_array_equal(result, np.diag(3 * 2.0 * x64**2) @ tangent.astype(np.float64))
    assert scenarios[0].x.dtype == np.float64 and scenarios[2].x.dtype == np.float32
    assert not np.array_equal(scenarios[0].x, scenarios[2].x)  # one generator: the float32 points come next


def test_a_table_row_refuses_what_it_cannot_build() -> None:
    from di.testing.scenario_table import SAME_X, Analytic, Row, RowGroup, Uniform

    only_first = Analytic(_cube, first=lambda x, a: np.diag(3 * a * x**2))
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="a hessian scenario of _cube needs its 'second' derivative"):
        RowGroup((Row("hessian", only_first, x=Uniform(3), contexts=(di.Constant(1.0),)),)).build(rng)
    with pytest.raises(ValueError, match="SAME_X in the first row"):
        RowGroup((Row("jacobian", only_first, x=SAME_X, contexts=(di.Constant(1.0),)),)).build(rng)
    with pytest.raises(TypeError, match="cannot draw 'three'"):
        RowGroup((Row("jacobian", only_first, x="three", contexts=(di.Constant(1.0),)),)).build(rng)
