"""Test and benchmark differentiation backends: the counterpart of
DifferentiationInterfaceTest.jl.

* :class:`Scenario` and :func:`default_scenarios`: functions, points, contexts and
  analytic reference results for every operator, in any registered array family.
* :func:`test_differentiation`: run every backend x scenario x preparation mode,
  compare with the references, check types and that inputs are not mutated, and
  raise an ``AssertionError`` listing every failure.
* :func:`benchmark_differentiation`: time prepared and unprepared calls and count
  calls of ``f``.
* :func:`engine_backends`: every installed engine's selectors, read from the
  engine registry, to parametrise tests of your own over.
* :mod:`di.testing.pytest_plugin`: one pytest case per combination.

Importing this package imports no engine; ``import di`` does not import it.

Examples:
    >>> import di
    >>> from di.testing import default_scenarios, test_differentiation
    >>> report = test_differentiation([di.AutoFiniteDiff()], default_scenarios(operators=["gradient"]))
    >>> report.failed
    []
"""

from di.testing.arrays import pytree_leaves
from di.testing.benchmark import benchmark_differentiation
from di.testing.labels import backend_label, parse_backend
from di.testing.matrix import engine_backends
from di.testing.runner import (
    PREP_MODES,
    Case,
    CaseResult,
    DifferentiationReport,
    iter_cases,
    pytrees_supported,
    run_case,
    test_differentiation,
)
from di.testing.scenario import OPERATORS, OperatorSpec, PrepArgs, Scenario, replace_scenario
from di.testing.scenarios import default_scenarios
from di.testing.tolerances import approximates, default_tolerances

__all__ = [
    "OPERATORS",
    "PREP_MODES",
    "Case",
    "CaseResult",
    "DifferentiationReport",
    "OperatorSpec",
    "PrepArgs",
    "Scenario",
    "approximates",
    "backend_label",
    "benchmark_differentiation",
    "default_scenarios",
    "default_tolerances",
    "engine_backends",
    "iter_cases",
    "parse_backend",
    "pytree_leaves",
    "pytrees_supported",
    "replace_scenario",
    "run_case",
    "test_differentiation",
]
