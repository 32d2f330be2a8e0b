"""pytest helpers: one pytest case per backend x scenario x preparation mode.

``pytest`` is imported only when these helpers are called, so ``di.testing``
works without it.

Example (in a user's test module)::

    import di
    from di.testing.pytest_plugin import check_case, parametrize_differentiation

    @parametrize_differentiation([di.AutoJAX(jit=True), di.AutoTorch()])
    def test_backends(di_case):
        check_case(di_case)

    # or, in one line:
    test_all = make_test([di.AutoJAX(), di.AutoFiniteDiff()])

    # a test of your own on every installed engine (and each compiled variant):
    @pytest.mark.parametrize("backend", backend_params())
    def test_my_loss(backend):
        ...

Skipped combinations (operator not in this ``di``, context unsupported by the
backend, engine missing) are reported by pytest as skipped, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from di.backends.selectors import AbstractBackend
from di.testing.labels import backend_label
from di.testing.matrix import engine_backends
from di.testing.runner import FAILED, PREP_MODES, SKIPPED, Case, CaseResult, iter_cases, run_case
from di.testing.scenario import Scenario

__all__ = ["backend_params", "check_case", "differentiation_params", "make_test", "parametrize_differentiation"]


def backend_params(backends: Iterable[AbstractBackend] | None = None) -> list[Any]:
    """One ``pytest.param`` per backend selector, with its label as the test id.

    For a test of your own that takes a ``backend`` argument: with no argument,
    every installed engine's default and compiled selectors
    (:func:`~di.testing.engine_backends`), so an engine installed or registered
    later joins the test without an edit.

    Args:
        backends: the selectors (default: :func:`~di.testing.engine_backends`).

    Returns:
        A list of ``pytest.param(selector, id=label)``.

    Examples:
        >>> import di
        >>> from di.testing.pytest_plugin import backend_params
        >>> [param.id for param in backend_params([di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")])]
        ['finitediff', 'finitediff-forward']

        In a test module::

            @pytest.mark.parametrize("backend", backend_params())
            def test_my_loss(backend):
                np.testing.assert_allclose(di.gradient(loss, backend, x), expected_gradient)
    """
    import pytest

    chosen = engine_backends() if backends is None else backends
    return [pytest.param(backend, id=backend_label(backend)) for backend in chosen]


def differentiation_params(
    backends: AbstractBackend | Iterable[AbstractBackend],
    scenarios: Iterable[Scenario] | None = None,
    *,
    prep_modes: Sequence[str] = PREP_MODES,
) -> list[Any]:
    """The combinations as ``pytest.param(case, id=case.id)`` objects.

    Args:
        backends: one backend selector or several.
        scenarios: the scenarios (default: :func:`~di.testing.default_scenarios`).
        prep_modes: a subset of ``("unprepared", "prepared", "prepared-twice")``.

    Returns:
        A list of ``pytest.param``, one per :class:`~di.testing.Case`.

    Examples:
        >>> import di
        >>> from di.testing import default_scenarios
        >>> from di.testing.pytest_plugin import differentiation_params
        >>> params = differentiation_params(di.AutoFiniteDiff(), default_scenarios()[:1], prep_modes=["prepared"])
        >>> params[0].id
        'finitediff-derivative/sin_exp/f64-prepared'
    """
    import pytest

    return [pytest.param(case, id=case.id) for case in iter_cases(backends, scenarios, prep_modes)]


def parametrize_differentiation(
    backends: AbstractBackend | Iterable[AbstractBackend],
    scenarios: Iterable[Scenario] | None = None,
    *,
    prep_modes: Sequence[str] = PREP_MODES,
    argname: str = "di_case",
) -> Any:
    """A ``pytest.mark.parametrize`` decorator giving each combination to ``argname``.

    Args:
        backends: one backend selector or several.
        scenarios: the scenarios (default: :func:`~di.testing.default_scenarios`).
        prep_modes: a subset of ``("unprepared", "prepared", "prepared-twice")``.
        argname: the test function's parameter that receives the :class:`~di.testing.Case`.

    Returns:
        The decorator.

    Examples:
        >>> import di
        >>> from di.testing.pytest_plugin import parametrize_differentiation
        >>> mark = parametrize_differentiation([di.AutoFiniteDiff()])
        >>> mark.args[0]
        'di_case'
    """
    import pytest

    return pytest.mark.parametrize(argname, differentiation_params(backends, scenarios, prep_modes=prep_modes))


def check_case(
    case: Case,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    check_mutation: bool = True,
    check_types: bool = True,
) -> CaseResult:
    """Run one combination inside a pytest test: skip or fail the test as it says.

    Args:
        case: the :class:`~di.testing.Case` from :func:`parametrize_differentiation`.
        rtol: relative tolerance (default per backend and dtype, see
            :func:`~di.testing.default_tolerances`).
        atol: absolute tolerance, likewise.
        check_mutation: check that inputs are not mutated.
        check_types: check the results' family, shape and dtype.

    Returns:
        The :class:`~di.testing.CaseResult` of a passing case.

    Raises:
        AssertionError: the case failed (chained to the exception it raised, if any).
        pytest.skip.Exception: the case was skipped (operator not in this ``di``,
            unsupported context, engine missing).
    """
    result = run_case(case, rtol=rtol, atol=atol, check_mutation=check_mutation, check_types=check_types)
    if result.status == SKIPPED:
        import pytest

        pytest.skip(result.message)
    if result.status == FAILED:
        raise AssertionError(result.line()) from result.error
    return result


def make_test(
    backends: AbstractBackend | Iterable[AbstractBackend],
    scenarios: Iterable[Scenario] | None = None,
    *,
    prep_modes: Sequence[str] = PREP_MODES,
    rtol: float | None = None,
    atol: float | None = None,
    check_mutation: bool = True,
    check_types: bool = True,
) -> Callable[[Case], None]:
    """A ready parametrised pytest test function: assign it to a ``test_*`` name.

    Args:
        backends: one backend selector or several.
        scenarios: the scenarios (default: :func:`~di.testing.default_scenarios`).
        prep_modes: a subset of ``("unprepared", "prepared", "prepared-twice")``.
        rtol: relative tolerance (default per backend and dtype).
        atol: absolute tolerance (default per backend and dtype).
        check_mutation: check that inputs are not mutated.
        check_types: check the results' family, shape and dtype.

    Returns:
        A test function taking ``di_case``, parametrised over every combination.

    Examples:
        >>> import di
        >>> from di.testing.pytest_plugin import make_test
        >>> test_finitediff = make_test(di.AutoFiniteDiff())
        >>> test_finitediff.__name__
        'test_differentiation_case'
    """

    @parametrize_differentiation(backends, scenarios, prep_modes=prep_modes)
    def test_differentiation_case(di_case: Case) -> None:
        check_case(di_case, rtol=rtol, atol=atol, check_mutation=check_mutation, check_types=check_types)

    return test_differentiation_case  # type: ignore[no-any-return]
