"""``benchmark_differentiation``: time backends on scenarios and count calls of ``f``."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from di.backends.selectors import AbstractBackend
from di.testing.arrays import copy_tree
from di.testing.labels import backend_label
from di.testing.runner import NOT_AVAILABLE, _copy_contexts, _describe_error, backend_for, pytrees_supported
from di.testing.scenario import Scenario
from di.testing.scenarios import default_scenarios

__all__ = ["BENCHMARK_COLUMNS", "CountingFunction", "benchmark_differentiation"]

BENCHMARK_COLUMNS: tuple[str, ...] = (
    "backend",
    "scenario",
    "operator",
    "prepared",
    "calls",
    "time_median",
    "time_min",
    "samples",
    "compile_time",
    "status",
    "error",
)


class CountingFunction:
    """Wrap ``f`` and count its calls (including calls made while tracing).

    Args:
        f: the function to wrap.

    Examples:
        >>> from di.testing.benchmark import CountingFunction
        >>> g = CountingFunction(lambda x: x + 1)
        >>> g(1), g(2), g.calls
        (2, 3, 2)
    """

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f = f
        self.calls = 0
        functools.update_wrapper(self, f)

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.f(*args)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return math.nan
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _row(backend: Any, scenario: Scenario, prepared: bool, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "backend": backend_label(backend),
        "scenario": scenario.name,
        "operator": scenario.operator,
        "prepared": prepared,
        "calls": None,
        "time_median": math.nan,
        "time_min": math.nan,
        "samples": 0,
        "compile_time": math.nan,
        "status": "ok",
        "error": None,
    }
    row.update(values)
    return row


def benchmark_one(
    backend: AbstractBackend,
    scenario: Scenario,
    prepared: bool,
    *,
    min_time: float = 0.02,
    min_samples: int = 3,
    max_samples: int = 200,
) -> dict[str, Any]:
    """Time one backend on one scenario, prepared or not; see :func:`benchmark_differentiation`.

    Args:
        backend: the backend selector.
        scenario: the scenario (its operator's plain call is timed).
        prepared: time prepared calls (preparation once, outside the timings) or
            unprepared ones (each call prepares).
        min_time: keep sampling until this many seconds were timed...
        min_samples: ...and at least this many calls...
        max_samples: ...but never more than this many.

    Returns:
        One row (a dict with the columns of :data:`BENCHMARK_COLUMNS`).
    """
    import di

    spec = scenario.spec
    missing = spec.missing(di)
    if missing:
        return _row(backend, scenario, prepared, status="skipped", error=NOT_AVAILABLE)
    if scenario.is_pytree and not pytrees_supported():
        return _row(backend, scenario, prepared, status="skipped", error="pytree x not supported in this di version")
    call = getattr(di, spec.call)
    run_on = backend_for(backend, scenario)  # sparse scenarios run on di.AutoSparse(backend)
    f = CountingFunction(scenario.f)
    x = copy_tree(scenario.x)
    contexts = _copy_contexts(scenario.contexts)
    t_args = (copy_tree(scenario.tangents),) if spec.takes_tangents else ()
    aux_option = {"has_aux": True} if scenario.has_aux else {}
    call = functools.partial(call, **aux_option)
    try:
        start = time.perf_counter()
        if prepared:
            prep = getattr(di, spec.prepare)(f, run_on, x, *t_args, *contexts, **aux_option)
            args: tuple[Any, ...] = (prep, run_on, x, *t_args, *contexts)
        else:
            args = (run_on, x, *t_args, *contexts)
        call(f, *args)
        first = time.perf_counter() - start
        times: list[float] = []
        calls_before = f.calls
        total = 0.0
        while len(times) < max_samples and (len(times) < min_samples or total < min_time):
            start = time.perf_counter()
            call(f, *args)
            elapsed = time.perf_counter() - start
            times.append(elapsed)
            total += elapsed
        calls = (f.calls - calls_before) // len(times)
    except (di.UnsupportedContextError, di.UnsupportedOperatorError, di.BackendNotInstalledError) as err:
        return _row(backend, scenario, prepared, status="skipped", error=_describe_error(err))
    except Exception as err:
        return _row(backend, scenario, prepared, status="error", error=_describe_error(err))
    median = _median(times)
    return _row(
        backend,
        scenario,
        prepared,
        calls=calls,
        time_median=median,
        time_min=min(times),
        samples=len(times),
        compile_time=max(0.0, first - median),
    )


def benchmark_differentiation(
    backends: AbstractBackend | Iterable[AbstractBackend],
    scenarios: Iterable[Scenario] | None = None,
    *,
    prepared: Sequence[bool] = (True, False),
    min_time: float = 0.02,
    min_samples: int = 3,
    max_samples: int = 200,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Time every backend on every scenario, prepared and unprepared.

    For each backend x scenario x prepared/unprepared, the scenario's operator
    (its plain call: ``gradient``, ``hvp``, ...) is called once, then again until
    ``min_time`` seconds and ``min_samples`` calls are reached (at most
    ``max_samples``). ``f`` is wrapped to count its calls.

    Args:
        backends: one backend selector or several.
        scenarios: the scenarios (default: :func:`~di.testing.default_scenarios`).
        prepared: which of prepared (``True``) and unprepared (``False``) to time.
        min_time: seconds of timed calls to reach per row.
        min_samples: fewest timed calls per row.
        max_samples: most timed calls per row.
        on_row: called with each row as it comes (progress bars).

    Returns:
        One dict per row with the columns ``backend`` (its label), ``scenario``,
        ``operator``, ``prepared``, ``calls`` (calls of ``f`` per operator call,
        after the first: 0 for a compiled program), ``time_median`` and
        ``time_min`` (seconds per call), ``samples``, ``compile_time`` (the first
        call, with preparation when prepared, minus the median: compilation and
        warm-up), plus ``status`` (``"ok"``, ``"skipped"``, ``"error"``) and
        ``error`` (the reason, or ``None``). Times are ``nan`` unless the status is
        ``"ok"``. ``pandas.DataFrame(rows)`` makes a table of it.

    Examples:
        >>> import di
        >>> from di.testing import benchmark_differentiation, default_scenarios
        >>> rows = benchmark_differentiation([di.AutoFiniteDiff()], default_scenarios(operators=["gradient"])[:1])
        >>> [(r["prepared"], r["calls"], r["status"]) for r in rows]
        [(True, 10, 'ok'), (False, 10, 'ok')]
    """
    backend_list = [backends] if isinstance(backends, AbstractBackend) else list(backends)
    scenario_list = default_scenarios() if scenarios is None else list(scenarios)
    rows: list[dict[str, Any]] = []
    for backend in backend_list:
        for scenario in scenario_list:
            for is_prepared in prepared:
                row = benchmark_one(
                    backend,
                    scenario,
                    is_prepared,
                    min_time=min_time,
                    min_samples=min_samples,
                    max_samples=max_samples,
                )
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return rows
