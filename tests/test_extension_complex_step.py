"""An engine added from outside ``di``: complex-step differentiation over NumPy.

The selector and adapter below use only ``di``'s public API and the adapter
protocol, as a third-party package would: one primitive (a pushforward), one
``di.register_backend``, and every other first-order operator comes from ``di``'s
generic fallbacks. ``docs/backends.md`` ("Adding an engine") shows exactly this
code; a test below keeps the two equal.

The complex step: for ``f`` analytic (holomorphic) near a real ``x``,
``f(x + i h t) = f(x) + i h f'(x) t + O(h^2)``, so ``Im f(x + i h t) / h`` is the
derivative along ``t`` with no subtraction, hence no cancellation: with ``h =
1e-30`` it is exact to rounding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from extension_support import assert_page_shows, claim_backend_name, excerpt, python_blocks, restored_registries

import di
from di.backends.capabilities import Capabilities
from di.backends.outputs import is_real_floating_array, raise_bad_output
from di.backends.protocol import Adapter, Programs
from di.backends.registry import get_adapter
from di.families import converter, family_of
from di.testing import default_scenarios, test_differentiation

# docs excerpt begin: engine
SECOND_ORDER = ("hvp", "hessian", "second_derivative")


@dataclasses.dataclass(frozen=True)
class AutoComplexStep(di.AbstractBackend):
    """Complex-step derivatives of analytic functions, over NumPy.

    Args:
        step: the imaginary step ``h``: the derivative along ``t`` is
            ``Im f(x + i h t) / h``, exact to rounding since nothing is subtracted.
    """

    step: float = 1e-30
    name = "complexstep"  # what di.backend("complexstep") builds
    engine_display = "complex step (NumPy)"


class ComplexStepAdapter(Adapter):
    """One primitive, the pushforward; di builds every other first-order operator from it."""

    capabilities = Capabilities(  # what it offers: the array family it computes in; no complex x
        family="numpy",
        complex_numbers=False,
        complex_note="the complex step perturbs x along the imaginary axis, so x must be real. Use another backend.",
    )

    def prepare_pushforward_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[di.Context]
    ) -> Programs:
        backend, h = self.backend, self.backend.step
        to_numpy = self.input_converters([x])[0]  # from the caller's family, decided once
        value_converters = self.context_converters(contexts)
        is_cache = [isinstance(context, di.Cache) for context in contexts]

        def value_and_pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            x = np.asarray(to_numpy(x))
            values = tuple(convert(value) for convert, value in zip(value_converters, values))
            y = f(x, *values)
            if not is_real_floating_array(y):
                raise_bad_output(y, backend, "pushforward")
            # A Cache's initial value never matters, so f gets complex scratch space to write into.
            complex_values = [
                np.empty(np.shape(value), np.result_type(value, 1j)) if cache else value
                for cache, value in zip(is_cache, values)
            ]
            products = []
            for t in tx:
                t = np.asarray(converter(family_of(t), "numpy")(t))
                y_step = f(x + 1j * h * t, *complex_values)
                if not np.iscomplexobj(y_step):
                    raise di.InvalidOutputError(
                        f"{backend!r}: f returned a real value at a complex point, dropping the imaginary part "
                        f"(abs, real, a cast?): the complex step needs f analytic. Use another backend."
                    )
                products.append(np.asarray(np.imag(y_step) / h).astype(x.dtype))
            return y, tuple(products)

        def pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            return value_and_pushforward(x, tx, *values)[1]

        return {"pushforward": pushforward, "value_and_pushforward": value_and_pushforward}


# docs excerpt end: engine

REGISTRATION = "di.register_backend(AutoComplexStep, ComplexStepAdapter)\n"


@pytest.fixture(scope="module", autouse=True)
def registered() -> Iterator[None]:
    with restored_registries():
        di.register_backend(AutoComplexStep, ComplexStepAdapter)
        claim_backend_name(AutoComplexStep)
        yield


BACKEND = AutoComplexStep()


def _f_calls(f: Callable[..., Any]) -> tuple[Callable[..., Any], list[int]]:
    calls = [0]

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return f(*args)

    return counted, calls


# --- the default scenarios ------------------------------------------------------------------


def test_every_first_order_default_scenario_passes_and_the_rest_is_refused_up_front() -> None:
    scenarios = default_scenarios()
    report = test_differentiation(BACKEND, scenarios)  # raises, listing every failure
    assert not report.failed
    ran = {result.scenario for result in report.passed}
    for scenario in scenarios:
        if scenario.operator in SECOND_ORDER:
            reason = "second order"
        elif scenario.has_aux:
            reason = "has_aux"
        elif "complex" in scenario.tags:
            reason = "complex x"
        else:
            assert scenario.name in ran, f"{scenario.name} did not run"
            continue
        skipped = [r for r in report.skipped if r.scenario == scenario.name]
        assert skipped, f"{scenario.name} ran: AutoComplexStep should refuse it ({reason})"
        for result in skipped:
            assert isinstance(result.error, di.UnsupportedOperatorError), result.line()
            assert "AutoComplexStep" in result.message, result.line()
    first_order = {s.operator for s in scenarios if s.name in ran}
    assert first_order == {"derivative", "gradient", "jacobian", "pushforward", "pullback"}


# --- exact to rounding ----------------------------------------------------------------------


def sin_exp(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * xp.exp(x))


def test_gradients_are_exact_to_rounding_where_finite_differences_are_not() -> None:
    x = np.array([0.3, -1.2, 2.5, 4.0])
    analytic = (np.cos(x) + np.sin(x)) * np.exp(x)
    exact = di.gradient(sin_exp, BACKEND, x)
    np.testing.assert_allclose(exact, analytic, rtol=1e-15, atol=0)
    assert exact.dtype == np.float64
    finite = di.gradient(sin_exp, di.AutoFiniteDiff(), x)
    assert np.max(np.abs(finite - analytic) / np.abs(analytic)) > 1e-13  # the complex step gains the digits


def test_jacobian_derivative_and_pullback_are_exact_to_rounding() -> None:
    a = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])

    def tanh_linear(x: Any, a: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.tanh(a @ x)

    x = np.array([0.1, 0.2, -0.3])
    jacobian = (1 - np.tanh(a @ x) ** 2)[:, None] * a
    np.testing.assert_allclose(di.jacobian(tanh_linear, BACKEND, x, di.Constant(a)), jacobian, rtol=1e-15, atol=1e-16)
    cotangent = np.array([2.0, -1.0])
    (pulled,) = di.pullback(tanh_linear, BACKEND, x, (cotangent,), di.Constant(a))
    np.testing.assert_allclose(pulled, cotangent @ jacobian, rtol=1e-14, atol=1e-16)

    def cube(x: Any) -> Any:
        return x**3 - 2 * x

    assert di.derivative(cube, BACKEND, 1.5) == pytest.approx(3 * 1.5**2 - 2, rel=1e-16, abs=0)


def test_float32_inputs_give_float32_results_computed_in_complex64() -> None:
    x = np.array([0.5, 1.5], dtype=np.float32)
    gradient = di.gradient(sin_exp, BACKEND, x)
    assert gradient.dtype == np.float32
    analytic = (np.cos(x.astype(np.float64)) + np.sin(x.astype(np.float64))) * np.exp(x.astype(np.float64))
    np.testing.assert_allclose(gradient, analytic, rtol=1e-6)


def test_a_cache_gets_complex_scratch_space_and_the_derivative_survives_it() -> None:
    def squares_through_cache(x: Any, buf: Any) -> Any:
        xp = di.array_namespace(x)
        buf[...] = x * x
        return xp.sum(buf)

    x = np.array([1.0, -2.0, 3.0])
    buffer = np.zeros(3)
    np.testing.assert_allclose(di.gradient(squares_through_cache, BACKEND, x, di.Cache(buffer)), 2 * x, rtol=1e-15)


# --- refused, clearly -----------------------------------------------------------------------


@pytest.mark.parametrize("operator", SECOND_ORDER)
def test_second_order_is_refused_at_preparation_naming_the_way_that_works(operator: str) -> None:
    f, calls = _f_calls(sin_exp)
    x = np.array([0.5, 1.0]) if operator != "second_derivative" else np.array(0.5)
    tangents = ((np.ones(2),),) if operator == "hvp" else ()
    with pytest.raises(di.UnsupportedOperatorError, match=r"AutoComplexStep\(step=1e-30\) cannot compute") as err:
        getattr(di, f"prepare_{operator}")(f, BACKEND, x, *tangents)
    assert "di.SecondOrder(di.AutoFiniteDiff(), AutoComplexStep(step=1e-30))" in str(err.value)
    assert calls[0] == 0


def test_the_way_that_works_finite_differences_of_exact_gradients() -> None:
    x = np.array([0.5, 1.0])
    hessian = di.hessian(sin_exp, di.SecondOrder(di.AutoFiniteDiff(), BACKEND), x)
    np.testing.assert_allclose(hessian, np.diag(2 * np.cos(x) * np.exp(x)), rtol=1e-6, atol=1e-8)


def test_a_function_that_drops_the_imaginary_part_is_refused() -> None:
    def sum_abs(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.abs(x))  # |x + ih| is real: the complex step would see a zero derivative

    with pytest.raises(di.InvalidOutputError, match="needs f analytic"):
        di.gradient(sum_abs, BACKEND, np.array([1.0, -2.0]))


def test_auxiliary_outputs_are_refused_because_the_primitive_takes_no_has_aux() -> None:
    def with_aux(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * x), {"norm": xp.sum(x * x)}

    with pytest.raises(di.UnsupportedOperatorError, match="does not support has_aux"):
        di.gradient(with_aux, BACKEND, np.ones(2), has_aux=True)


# --- the selector and the support it declares -------------------------------------------------


def test_the_selector_is_found_by_name_with_its_options() -> None:
    assert di.backend("complexstep", step=1e-20) == AutoComplexStep(step=1e-20)
    x = np.array([0.7])
    np.testing.assert_allclose(di.gradient(sin_exp, di.backend("complexstep"), x), (np.cos(x) + np.sin(x)) * np.exp(x))


def test_support_says_native_pushforward_fallbacks_and_no_second_order() -> None:
    support = type(get_adapter(BACKEND)).support()
    assert support == {
        "derivative": "fallback",
        "gradient": "fallback",
        "jacobian": "fallback",
        "pushforward": "native",
        "pullback": "fallback",
        "hvp": "unsupported",
        "hessian": "unsupported",
        "second_derivative": "unsupported",
    }


# --- the documentation shows this code ----------------------------------------------------------


def test_docs_backends_page_shows_the_engine_exactly() -> None:
    assert_page_shows(excerpt(__file__, "engine"), __file__)
    assert any(REGISTRATION in block for block in python_blocks()), "the page registers it as the test does"
