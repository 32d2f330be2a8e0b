"""``test_differentiation``: check backends against scenarios' references.

Every combination of backend x scenario x preparation mode is one *case*. A case
calls the scenario's operator and its combined form (``gradient`` and
``value_and_gradient``, ``hvp`` and ``gradient_and_hvp``, ...), compares every
result with the analytic references, checks the results' array family, shape and
dtype against ``x``, and checks that ``x``, the ``Constant`` values and the
tangents were not mutated.

Preparation modes:

* ``"unprepared"``: ``di.gradient(f, backend, x, *contexts)``.
* ``"prepared"``: ``prep = di.prepare_gradient(f, backend, x0, *contexts0)`` on
  different values (default: zeros-like ``x`` and negated ``Constant`` values),
  then ``di.gradient(f, prep, backend, x, *contexts)`` on the real ones, so a prep
  that kept stale values is caught.
* ``"prepared-twice"``: the same, calling each prepared form twice.

A case is *skipped*, never passed, when the operator is not in this version of
``di``, when the backend declares the context or operator unsupported
(``UnsupportedContextError``, ``UnsupportedOperatorError``), when its engine is
missing, when ``x`` is a pytree and this version of ``di`` does not take pytrees, or
when the scenario has no reference for the operator's own result (``res1`` of a
``gradient``, ``res2`` of an ``hvp``): it runs, and fails on an error or a wrong
result it has a reference for, but nothing checked its derivative.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from di.backends.selectors import AbstractBackend
from di.contexts import Cache, Constant, Context
from di.testing.arrays import copy_tree, records_graph
from di.testing.compare import compare, expected_family_and_dtype, max_error, same
from di.testing.labels import backend_label
from di.testing.scenario import Scenario
from di.testing.scenarios import default_scenarios
from di.testing.tolerances import default_tolerances

__all__ = [
    "PREP_MODES",
    "Case",
    "CaseResult",
    "DifferentiationReport",
    "iter_cases",
    "pytrees_supported",
    "run_case",
    "test_differentiation",
]

PREP_MODES: tuple[str, ...] = ("unprepared", "prepared", "prepared-twice")

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
NOT_AVAILABLE = "not available in this di version"


# --- cases and results -------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One combination: a backend, a scenario and a preparation mode.

    Attributes:
        backend: the backend selector.
        scenario: the :class:`~di.testing.Scenario`.
        prep_mode: ``"unprepared"``, ``"prepared"`` or ``"prepared-twice"``.

    Examples:
        >>> import di
        >>> from di.testing import Case, default_scenarios
        >>> Case(di.AutoFiniteDiff(), default_scenarios()[0], "prepared").id
        'finitediff-derivative/sin_exp/f64-prepared'
    """

    backend: Any
    scenario: Scenario
    prep_mode: str

    @property
    def id(self) -> str:
        """``backend-scenario-mode``, usable as a pytest id."""
        return f"{backend_label(self.backend)}-{self.scenario.name}-{self.prep_mode}"


@dataclass
class CaseResult:
    """The outcome of one :class:`Case`.

    Attributes:
        backend: the backend's label (:func:`backend_label`).
        scenario: the scenario's name.
        operator: the operator's name.
        prep_mode: the preparation mode.
        status: ``"passed"``, ``"failed"`` or ``"skipped"``.
        message: why it failed or was skipped (empty when it passed).
        max_abs_error: the largest ``|result - reference|`` over every result
            compared (``nan`` when nothing was compared).
        max_rel_error: that divided by the largest ``|reference|`` (norm-wise).
        rtol: the relative tolerance used.
        atol: the absolute tolerance used.
        error: the exception raised, if any.
    """

    backend: str
    scenario: str
    operator: str
    prep_mode: str
    status: str
    message: str = ""
    max_abs_error: float = math.nan
    max_rel_error: float = math.nan
    rtol: float = math.nan
    atol: float = math.nan
    error: BaseException | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        """Whether the case passed."""
        return self.status == PASSED

    def line(self) -> str:
        """One line: ``backend | scenario | mode | message``."""
        return f"{self.backend} | {self.scenario} | {self.prep_mode} | {self.message}"

    def as_dict(self) -> dict[str, Any]:
        """The result as a JSON-friendly dict (the exception as its text)."""
        row = dataclasses.asdict(self)
        row["error"] = None if self.error is None else f"{type(self.error).__name__}: {self.error}"
        return row


@dataclass
class DifferentiationReport:
    """What :func:`test_differentiation` returns: every case's result.

    Attributes:
        results: one :class:`CaseResult` per case, in the order run.

    Examples:
        >>> import di
        >>> from di.testing import test_differentiation, default_scenarios
        >>> report = test_differentiation([di.AutoFiniteDiff()], default_scenarios(operators=["gradient"])[:2])
        >>> len(report.passed)
        6
    """

    __test__ = False  # not a pytest test class
    results: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> list[CaseResult]:
        """The cases that passed."""
        return [r for r in self.results if r.status == PASSED]

    @property
    def failed(self) -> list[CaseResult]:
        """The cases that failed."""
        return [r for r in self.results if r.status == FAILED]

    @property
    def skipped(self) -> list[CaseResult]:
        """The cases that were skipped (operator missing, unsupported by the backend, ...)."""
        return [r for r in self.results if r.status == SKIPPED]

    def summary(self) -> str:
        """``"N passed, M failed, K skipped"``."""
        return f"{len(self.passed)} passed, {len(self.failed)} failed, {len(self.skipped)} skipped"

    def __str__(self) -> str:
        return self.summary()


def iter_cases(
    backends: AbstractBackend | Iterable[AbstractBackend],
    scenarios: Iterable[Scenario] | None = None,
    prep_modes: Sequence[str] = PREP_MODES,
) -> Iterator[Case]:
    """Every combination, backend by backend, scenario by scenario, mode by mode.

    Args:
        backends: one selector or several.
        scenarios: the scenarios (default: :func:`~di.testing.default_scenarios`).
        prep_modes: a subset of :data:`PREP_MODES`.

    Yields:
        :class:`Case` objects.

    Raises:
        ValueError: an unknown preparation mode.

    Examples:
        >>> import di
        >>> from di.testing import iter_cases
        >>> len(list(iter_cases(di.AutoFiniteDiff()))) % 3
        0
    """
    for mode in prep_modes:
        if mode not in PREP_MODES:
            raise ValueError(f"unknown preparation mode {mode!r}; known: {', '.join(PREP_MODES)}")
    backend_list = [backends] if isinstance(backends, AbstractBackend) else list(backends)
    scenario_list = default_scenarios() if scenarios is None else list(scenarios)
    for backend in backend_list:
        for scenario in scenario_list:
            for mode in prep_modes:
                yield Case(backend, scenario, mode)


@functools.lru_cache(maxsize=1)
def pytrees_supported() -> bool:
    """Whether this version of ``di`` differentiates with respect to a pytree ``x``.

    Checked by trying: a gradient, on an engine that needs no library, with
    respect to a dict of one array. Scenarios tagged ``"pytree"`` are skipped while this is ``False``.

    Returns:
        ``True`` once ``di`` takes pytrees.
    """
    import di
    from di.backends.selectors import engines

    # an engine that needs no library: always there, and asking it imports nothing
    light = next(engine.default for engine in engines() if not engine.module and engine.default is not None)
    try:
        g = di.gradient(lambda x: (x["a"] * x["a"]).sum(), light, {"a": np.ones(2)})
    except di.DIError:
        return False
    return isinstance(g, dict) and "a" in g


# --- one case --------------------------------------------------------------------------


def backend_for(backend: Any, scenario: Scenario) -> Any:
    """The backend a scenario runs on: ``di.AutoSparse(backend)`` for the scenarios
    tagged ``"sparse"`` (unless it already is one), ``backend`` for the others.

    Examples:
        >>> import di
        >>> from di.testing.runner import backend_for
        >>> from di.testing import default_scenarios
        >>> sparse = [s for s in default_scenarios() if "sparse" in s.tags]
        >>> backend_for(di.AutoFiniteDiff(), sparse[0]).dense
        AutoFiniteDiff(method='central', step=None)
    """
    if "sparse" not in scenario.tags:
        return backend
    import di

    return backend if backend.sparse else di.AutoSparse(backend)


def _copy_contexts(contexts: Sequence[Context]) -> tuple[Context, ...]:
    copies: list[Context] = []
    for context in contexts:
        if isinstance(context, Constant):
            copies.append(Constant(copy_tree(context.value), static=context.static))
        else:
            copies.append(type(context)(copy_tree(context.value)))
    return tuple(copies)


def _skip_reason(case: Case) -> str | None:
    import di

    missing = case.scenario.spec.missing(di)
    if missing:
        return f"{NOT_AVAILABLE} ({', '.join('di.' + name for name in missing)} missing)"
    if case.scenario.is_pytree and not pytrees_supported():
        return "pytree x is not supported in this di version"
    return None


def _execute(case: Case, f: Callable[..., Any], x: Any, tangents: Any, contexts: tuple[Context, ...]) -> list[Any]:
    """Run the case's calls; return ``(label, result, reference names)`` triples."""
    import di

    spec = case.scenario.spec
    call = getattr(di, spec.call)
    value_and = getattr(di, spec.value_and)
    backend = backend_for(case.backend, case.scenario)
    t_args = (tangents,) if spec.takes_tangents else ()
    aux_option = {"has_aux": True} if case.scenario.has_aux else {}
    outputs: list[Any] = []

    def record(label: str, result: Any, references: tuple[str, ...], plain: bool) -> None:
        if aux_option:  # JAX's layout: (result, aux) and ((y, aux), result)
            if plain:
                result, aux = result
            else:
                (y, aux), rest = result
                result = (y, rest)
            outputs.append((f"{label} aux", aux, ("aux",)))
        outputs.append((label, result, references))

    if case.prep_mode == "unprepared":
        record(spec.call, call(f, backend, x, *t_args, *contexts, **aux_option), (spec.call_result,), True)
        record(
            spec.value_and, value_and(f, backend, x, *t_args, *contexts, **aux_option), spec.value_and_results, False
        )
        return outputs
    preparation = case.scenario.preparation()
    p_tangents = preparation.tangents if preparation.tangents is not None else tangents
    p_args = (copy_tree(p_tangents),) if spec.takes_tangents else ()
    prep = getattr(di, spec.prepare)(
        f, backend, copy_tree(preparation.x), *p_args, *_copy_contexts(preparation.contexts), **aux_option
    )
    repeats = 2 if case.prep_mode == "prepared-twice" else 1
    for attempt in range(1, repeats + 1):
        suffix = f" (call {attempt})" if repeats > 1 else ""
        plain = call(f, prep, backend, x, *t_args, *contexts, **aux_option)
        record(spec.call + suffix, plain, (spec.call_result,), True)
        combined = value_and(f, prep, backend, x, *t_args, *contexts, **aux_option)
        record(spec.value_and + suffix, combined, spec.value_and_results, False)
    return outputs


def _describe_error(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def run_case(
    case: Case,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    check_mutation: bool = True,
    check_types: bool = True,
) -> CaseResult:
    """Run one combination and say how it went (never raises for the case's own errors).

    Args:
        case: the :class:`Case`.
        rtol: relative tolerance; default from :func:`default_tolerances`.
        atol: absolute tolerance; default from :func:`default_tolerances`.
        check_mutation: check that ``x``, ``Constant`` values and tangents are unchanged.
        check_types: check each result's array family, shape and dtype against ``x``.

    Returns:
        A :class:`CaseResult`.

    Examples:
        >>> import di
        >>> from di.testing import Case, run_case, default_scenarios
        >>> scenario = default_scenarios(operators=["gradient"])[0]
        >>> run_case(Case(di.AutoFiniteDiff(), scenario, "prepared")).status
        'passed'
    """
    import di

    scenario = case.scenario
    spec = scenario.spec
    label = backend_label(case.backend)
    base = CaseResult(label, scenario.name, scenario.operator, case.prep_mode, PASSED)
    dtype = expected_family_and_dtype(scenario.x)[1]
    default_rtol, default_atol = default_tolerances(case.backend, dtype, spec.order)
    base.rtol = default_rtol if rtol is None else rtol
    base.atol = default_atol if atol is None else atol
    reason = _skip_reason(case)
    if reason is not None:
        return dataclasses.replace(base, status=SKIPPED, message=reason)
    x = copy_tree(scenario.x)
    tangents = None if scenario.tangents is None else copy_tree(scenario.tangents)
    contexts = _copy_contexts(scenario.contexts)
    x_before = copy_tree(x)
    tangents_before = copy_tree(tangents)
    constants_before = [copy_tree(c.value) if isinstance(c, Constant) else None for c in contexts]
    try:
        outputs = _execute(case, scenario.f, x, tangents, contexts)
    except (di.UnsupportedContextError, di.UnsupportedOperatorError, di.BackendNotInstalledError) as err:
        return dataclasses.replace(base, status=SKIPPED, message=_describe_error(err), error=err)
    except Exception as err:
        return dataclasses.replace(base, status=FAILED, message=_describe_error(err), error=err)
    problems: list[str] = []
    worst_abs, worst_rel = math.nan, math.nan
    for name, result, references in outputs:
        if len(references) > 1:
            if not isinstance(result, tuple) or len(result) != len(references):
                got = f"a tuple of {len(result)}" if isinstance(result, tuple) else f"a {type(result).__name__}"
                problems.append(f"{name}: expected a tuple ({', '.join(references)}), got {got}")
                continue
            pairs = list(zip(result, references))
        else:
            pairs = [(result, references[0])]
        for value, which in pairs:
            reference = scenario.reference(which)
            if reference is None:
                continue
            what = name if len(references) == 1 else f"{name} {which}"
            a, r, p = compare(what, value, reference, base.rtol, base.atol, x, check_types, which in ("y", "aux"))
            worst_abs, worst_rel = max_error(worst_abs, a), max_error(worst_rel, r)
            problems += p
    if check_mutation:
        if not same(x, x_before):
            problems.append("x was mutated")
        if tangents is not None and not same(tangents, tangents_before):
            problems.append("the tangents were mutated")
        for i, (context, before) in enumerate(zip(contexts, constants_before), start=1):
            if isinstance(context, Constant) and not same(context.value, before):
                problems.append(f"Constant {i} was mutated")
            if isinstance(context, Cache) and records_graph(context.value):
                problems.append(f"Cache {i} still holds a differentiation graph")
    base.max_abs_error, base.max_rel_error = worst_abs, worst_rel
    if problems:
        return dataclasses.replace(base, status=FAILED, message="; ".join(problems))
    if scenario.reference(spec.call_result) is None:
        message = f"no reference: the scenario has no {spec.call_result} to compare the {spec.call} with"
        return dataclasses.replace(base, status=SKIPPED, message=message)
    return base


# --- the runner --------------------------------------------------------------------------


def test_differentiation(
    backends: AbstractBackend | Iterable[AbstractBackend],
    scenarios: Iterable[Scenario] | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    prep_modes: Sequence[str] = PREP_MODES,
    check_mutation: bool = True,
    check_types: bool = True,
    on_result: Callable[[CaseResult], None] | None = None,
) -> DifferentiationReport:
    """Check backends against scenarios: every backend x scenario x preparation mode.

    Each case calls the operator and its combined form, compares every result
    with the analytic references, checks family/shape/dtype and that no input
    was mutated (see the module documentation). Every case runs, then an
    ``AssertionError`` lists every failure.

    Args:
        backends: one backend selector or several.
        scenarios: the scenarios (default: :func:`~di.testing.default_scenarios`).
        rtol: relative tolerance for every case; default per backend, dtype and
            order from :func:`default_tolerances` (looser for finite differences
            and float32).
        atol: absolute tolerance, likewise.
        prep_modes: a subset of ``("unprepared", "prepared", "prepared-twice")``.
        check_mutation: check that ``x``, ``Constant`` values and tangents are unchanged.
        check_types: check that results have ``x``'s array family, dtype and the
            operator's shape.
        on_result: called with each :class:`CaseResult` as it comes (progress bars).

    Returns:
        A :class:`DifferentiationReport` with the ``passed``, ``failed`` and
        ``skipped`` cases (skipped: the operator is not in this ``di``, the backend
        declares the context or operator unsupported, or the engine is missing).

    Raises:
        AssertionError: some case failed; the message has one line per failure:
            ``backend | scenario | mode | error``.

    Examples:
        >>> import di
        >>> from di.testing import test_differentiation
        >>> report = test_differentiation([di.AutoFiniteDiff()])
        >>> len(report.failed)
        0
    """
    report = DifferentiationReport()
    for case in iter_cases(backends, scenarios, prep_modes):
        result = run_case(case, rtol=rtol, atol=atol, check_mutation=check_mutation, check_types=check_types)
        report.results.append(result)
        if on_result is not None:
            on_result(result)
    failed = report.failed
    if failed:
        lines = [f"di.testing: {len(failed)} of {len(report.results)} cases failed ({report.summary()}):"]
        lines += [f"  {result.line()}" for result in failed]
        error = AssertionError("\n".join(lines))
        error.report = report  # type: ignore[attr-defined]
        raise error
    return report


test_differentiation.__test__ = False  # type: ignore[attr-defined]  # not a pytest test when imported
