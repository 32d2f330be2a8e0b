"""Test and benchmark differentiation backends: the counterpart of
DifferentiationInterfaceTest.jl.

* :class:`Scenario` and :func:`default_scenarios`: functions, points, contexts and
  analytic reference results for every operator.
* :func:`test_differentiation`: run every backend x scenario x preparation mode,
  compare with the references, check types and that inputs are not mutated, and
  raise an ``AssertionError`` listing every failure.
* :func:`benchmark_differentiation`: time prepared and unprepared calls and count
  calls of ``f``.
* :mod:`di.testing.pytest_plugin`: one pytest case per combination.

Importing this package imports no engine; ``import di`` does not import it.

Examples:
    >>> import di
    >>> from di.testing import default_scenarios, test_differentiation
    >>> report = test_differentiation([di.AutoFiniteDiff()], default_scenarios(operators=["gradient"]))
    >>> report.failed
    []
"""

from di.testing.benchmark import benchmark_differentiation
from di.testing.runner import (
    PREP_MODES,
    Case,
    CaseResult,
    DifferentiationReport,
    backend_label,
    default_tolerances,
    iter_cases,
    parse_backend,
    pytrees_supported,
    run_case,
    test_differentiation,
)
from di.testing.scenarios import (
    OPERATORS,
    OperatorSpec,
    PrepArgs,
    Scenario,
    default_scenarios,
    pytree_leaves,
    replace_scenario,
)

__all__ = [
    "OPERATORS",
    "PREP_MODES",
    "Case",
    "CaseResult",
    "DifferentiationReport",
    "OperatorSpec",
    "PrepArgs",
    "Scenario",
    "backend_label",
    "benchmark_differentiation",
    "default_scenarios",
    "default_tolerances",
    "iter_cases",
    "parse_backend",
    "pytree_leaves",
    "pytrees_supported",
    "replace_scenario",
    "run_case",
    "test_differentiation",
]
