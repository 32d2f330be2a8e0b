"""di.AutoFastest: the planner that prepares every candidate, checks and times them, and keeps the fastest.

"Picks the fastest" is tested with third-party test backends of known artificial cost
(finite differences that sleep), never with a wall-clock threshold; correctness with
a backend that returns a deliberately wrong gradient and backends that fail.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import reachable_arrays
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import di
from di.backends.registry import register_backend
from di.contexts import Context
from di.engines.finitediff.adapter import FiniteDiffAdapter
from di.families import family_of
from di.fastest import agreement, timing
from di.fastest import strategy as fastest
from di.fastest.plan import CandidatesDisagreeError, Plan, PlanCache, PlanRow, selector_label

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 0.03


# --- test backends: finite differences with a known cost, a wrong result, or a failure -----------


@dataclasses.dataclass(frozen=True)
class Sleepy(di.AutoFiniteDiff):
    """Central finite differences that sleep ``delay`` seconds in every call."""

    delay: float = 0.0


@dataclasses.dataclass(frozen=True)
class Wrong(di.AutoFiniteDiff):
    """Finite differences whose gradient is ``factor`` times the right one plus ``offset``:
    a deliberately wrong backend."""

    factor: float = 1.5
    offset: float = 0.0


@dataclasses.dataclass(frozen=True)
class Failing(di.AutoFiniteDiff):
    """A backend that fails ``when`` = "prepare", "call" (the first) or "timing" (every call after the first)."""

    when: str = "call"


PREPARED: list[di.AbstractBackend] = []  # every test backend preparation, in order


class SleepyAdapter(FiniteDiffAdapter):
    def prepare_gradient_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        PREPARED.append(self.backend)
        programs = super().prepare_gradient_programs(f, x, contexts)
        delay = self.backend.delay  # type: ignore[attr-defined]

        def slowed(program: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any) -> Any:
                time.sleep(delay)
                return program(*args)

            return run

        return {name: slowed(program) for name, program in programs.items()}


class WrongAdapter(FiniteDiffAdapter):
    def prepare_gradient_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        PREPARED.append(self.backend)
        programs = super().prepare_gradient_programs(f, x, contexts)
        factor, offset = self.backend.factor, self.backend.offset  # type: ignore[attr-defined]
        gradient, value_and_gradient = programs["gradient"], programs["value_and_gradient"]

        def wrong_value_and_gradient(*args: Any) -> Any:
            y, g = value_and_gradient(*args)
            return y, factor * g + offset

        def wrong_gradient(*args: Any) -> Any:
            return factor * gradient(*args) + offset

        return {"gradient": wrong_gradient, "value_and_gradient": wrong_value_and_gradient}


class FailingAdapter(FiniteDiffAdapter):
    def prepare_gradient_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        PREPARED.append(self.backend)
        when = self.backend.when  # type: ignore[attr-defined]
        if when == "prepare":
            raise RuntimeError("this engine cannot prepare")
        programs = super().prepare_gradient_programs(f, x, contexts)
        calls = [0]

        def explode(program: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any) -> Any:
                calls[0] += 1
                if when == "call" or calls[0] > 1:  # "timing": only the first call works
                    raise RuntimeError("engine exploded")
                return program(*args)

            return run

        return {name: explode(program) for name, program in programs.items()}


register_backend(Sleepy, SleepyAdapter)
register_backend(Wrong, WrongAdapter)
register_backend(Failing, FailingAdapter)


def squares(x: Any, a: Any = 1.0) -> Any:
    return di.array_namespace(x).sum(a * x * x)


def elementwise_squares(x: Any, a: Any = 1.0) -> Any:
    return a * x * x


def statuses(plan: Plan) -> dict[str, str]:
    return {selector_label(row.backend): row.status for row in plan.rows}


def reason(plan: Plan, backend: di.AbstractBackend) -> str:
    return next(row.reason for row in plan.rows if row.backend == backend)


# --- choosing -----------------------------------------------------------------------------------


def test_picks_the_fastest_of_backends_with_known_costs() -> None:
    backend = di.AutoFastest([Sleepy(delay=0.004), Sleepy(delay=0.0), Sleepy(delay=0.002)], budget_s=BUDGET)
    prep = di.prepare_gradient(squares, backend, np.ones(3))
    assert prep.plan is not None
    assert prep.plan.chosen == Sleepy(delay=0.0)
    assert statuses(prep.plan) == {
        "Sleepy(delay=0.004)": "slower",
        "Sleepy()": "chosen",
        "Sleepy(delay=0.002)": "slower",
    }
    assert all(row.median_s is not None and row.samples >= timing.MIN_ROUNDS for row in prep.plan.rows)
    np.testing.assert_allclose(di.gradient(squares, prep, backend, np.array([1.0, -2.0, 3.0])), [2, -4, 6], rtol=1e-8)


def test_a_wrong_gradient_is_never_chosen_and_listed_as_disagreed() -> None:
    # the wrong backend is the fastest one: only the check keeps it out
    backend = di.AutoFastest([Wrong(), Sleepy(delay=0.001), Sleepy(delay=0.002)], budget_s=BUDGET)
    prep = di.prepare_gradient(squares, backend, np.array([1.0, 2.0, 3.0]))
    assert prep.plan is not None
    assert prep.plan.chosen == Sleepy(delay=0.001)
    assert prep.plan.status_of(Wrong()) == "disagreed"
    assert "differs from Sleepy(delay=0.001) by 3.3e-01 of the largest entry (rtol 1e-05, atol 1e-08)" in reason(
        prep.plan, Wrong()
    )
    row = next(row for row in prep.plan.rows if row.backend == Wrong())
    assert row.median_s is None and row.samples == 0  # never timed
    np.testing.assert_allclose(di.gradient(squares, prep, backend, np.array([1.0, 2.0, 3.0])), [2, 4, 6], rtol=1e-8)


def test_rounding_noise_around_a_zero_result_agrees() -> None:
    # at the minimum the gradient is zero: AD engines return 0 or rounding noise, which must agree
    noisy = [Wrong(factor=1.0, offset=1e-12), Wrong(factor=1.0, offset=-1e-12), di.AutoFiniteDiff()]
    prep = di.prepare_gradient(squares, di.AutoFastest(noisy, budget_s=BUDGET), np.zeros(2))
    assert prep.plan is not None
    assert {row.status for row in prep.plan.rows} <= {"chosen", "slower"}
    with pytest.raises(CandidatesDisagreeError):  # without the absolute allowance, noise is all there is to compare
        di.prepare_gradient(squares, di.AutoFastest(noisy, budget_s=BUDGET, atol=0), np.zeros(2))


def test_a_wrong_gradient_within_rtol_agrees() -> None:
    backend = di.AutoFastest([Wrong(factor=1.01), Sleepy(delay=0.001)], budget_s=BUDGET, rtol=0.05)
    prep = di.prepare_gradient(squares, backend, np.array([1.0, 2.0, 3.0]))
    assert prep.plan is not None
    assert prep.plan.chosen == Wrong(factor=1.01)  # within the tolerance the caller asked for, and faster


def test_failing_candidates_are_listed_as_failed_with_their_reason() -> None:
    backend = di.AutoFastest([Failing(when="call"), Failing(when="prepare"), di.AutoFiniteDiff()], budget_s=BUDGET)
    prep = di.prepare_gradient(squares, backend, np.ones(3))
    assert prep.plan is not None
    assert statuses(prep.plan) == {
        "Failing()": "failed",
        "Failing(when='prepare')": "failed",
        "AutoFiniteDiff()": "chosen",
    }
    assert reason(prep.plan, Failing(when="call")) == "first call: RuntimeError: engine exploded"
    assert reason(prep.plan, Failing(when="prepare")) == "preparing: RuntimeError: this engine cannot prepare"


def test_a_candidate_failing_while_being_timed_is_failed_and_another_chosen() -> None:
    backend = di.AutoFastest([Failing(when="timing"), di.AutoFiniteDiff()], budget_s=BUDGET)
    prep = di.prepare_gradient(squares, backend, np.ones(3))
    assert prep.plan is not None
    assert statuses(prep.plan) == {"Failing(when='timing')": "failed", "AutoFiniteDiff()": "chosen"}
    assert reason(prep.plan, Failing(when="timing")) == "timing: RuntimeError: engine exploded"
    row = next(row for row in prep.plan.rows if row.backend == Failing(when="timing"))
    assert row.median_s is None and row.samples == 0
    np.testing.assert_allclose(di.gradient(squares, prep, backend, np.array([1.0, 2.0, 3.0])), [2, 4, 6], rtol=1e-8)


def test_when_every_candidate_fails_while_being_timed_the_first_error_is_raised_with_the_plan() -> None:
    backend = di.AutoFastest([Failing(when="timing")], budget_s=BUDGET)
    with pytest.raises(RuntimeError, match="engine exploded") as caught:
        di.prepare_gradient(squares, backend, np.ones(2))
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "Every AutoFastest candidate failed" in notes and "timing: RuntimeError: engine exploded" in notes


def test_an_unsupported_context_fails_at_preparation() -> None:
    backend = di.AutoFastest([di.AutoAutograd(), di.AutoFiniteDiff()], budget_s=BUDGET)

    def with_cache(x: Any, buffer: Any) -> Any:
        buffer[:] = x
        return (buffer * x).sum()

    prep = di.prepare_gradient(with_cache, backend, np.ones(3), di.Cache(np.zeros(3)))
    assert prep.plan is not None
    assert prep.plan.chosen == di.AutoFiniteDiff()
    assert reason(prep.plan, di.AutoAutograd()).startswith("preparing: UnsupportedContextError: AutoAutograd()")


def test_two_candidates_that_disagree_cannot_be_trusted() -> None:
    backend = di.AutoFastest([Wrong(), di.AutoFiniteDiff()], budget_s=BUDGET)
    with pytest.raises(CandidatesDisagreeError, match="no majority") as caught:
        di.prepare_gradient(squares, backend, np.array([1.0, 2.0]))
    assert statuses(caught.value.plan) == {"Wrong()": "disagreed", "AutoFiniteDiff()": "disagreed"}
    assert isinstance(caught.value, di.DIError)


def test_when_every_candidate_fails_the_first_error_is_raised_unchanged() -> None:
    def broken(x: Any) -> Any:
        raise ZeroDivisionError("f is broken")

    backend = di.AutoFastest([di.AutoFiniteDiff(), Failing()], budget_s=BUDGET)
    with pytest.raises(ZeroDivisionError, match="f is broken") as caught:
        di.prepare_gradient(broken, backend, np.ones(2))
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "Every AutoFastest candidate failed" in notes and "engine exploded" in notes


def test_real_engines_on_each_array_family() -> None:
    torch = pytest.importorskip("torch")
    backend = di.AutoFastest(budget_s=BUDGET)
    x = np.array([1.0, -2.0, 0.5])
    for point in (x, torch.tensor(x, dtype=torch.float32)):
        prep = di.prepare_gradient(squares, backend, point, di.Constant(3.0))
        assert prep.plan is not None
        assert [row.backend for row in prep.plan.rows] == list(backend.default_candidates())
        assert {row.status for row in prep.plan.rows} <= {"chosen", "slower"}
        g = di.gradient(squares, prep, backend, point, di.Constant(3.0))
        assert family_of(g) == family_of(point) and g.dtype == point.dtype
        np.testing.assert_allclose(np.asarray(g), 6 * x, rtol=1e-6)


def test_default_candidates_leave_out_compiled_ones_when_asked() -> None:
    assert di.AutoJAX(jit=True) not in di.AutoFastest(include_compiled=False).default_candidates()
    assert di.AutoTorch(compile=True) not in di.AutoFastest().default_candidates()
    assert di.AutoFiniteDiff() not in di.AutoFastest().default_candidates()
    if di.AutoJAX().is_installed:
        assert di.AutoFastest().default_candidates()[0] == di.AutoJAX(jit=True)


# --- the prep behaves like the winner's ---------------------------------------------------------


def test_the_prep_runs_the_winners_programs_with_its_checks() -> None:
    backend = di.AutoFastest([Sleepy(delay=0.002), di.AutoFiniteDiff()], budget_s=BUDGET)
    c = di.Constant(np.array([1.0, 2.0, 3.0]))
    prep = di.prepare_gradient(squares, backend, np.zeros(3), c)
    assert prep.__class__ is di.Prep and prep.backend is backend and prep.strict
    assert prep.plan is not None and prep.plan.chosen == di.AutoFiniteDiff()
    direct = di.prepare_gradient(squares, di.AutoFiniteDiff(), np.zeros(3), c)
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_array_equal(
        di.gradient(squares, prep, backend, x, c), di.gradient(squares, direct, prep.plan.chosen, x, c)
    )
    y, g = di.value_and_gradient(
        squares, prep, di.AutoFastest([Sleepy(delay=0.002), di.AutoFiniteDiff()], budget_s=BUDGET), x, c
    )
    assert float(y) == pytest.approx(0.25 + 2.0 + 12.0)
    np.testing.assert_allclose(g, [1.0, -4.0, 12.0], rtol=1e-8)
    out = np.empty(3)
    assert di.gradient(squares, prep, backend, x, c, out=out) is out
    np.testing.assert_allclose(out, [1.0, -4.0, 12.0], rtol=1e-8)
    with pytest.raises(di.PreparationMismatchError, match=r"x +differs"):
        di.gradient(squares, prep, backend, np.zeros(4), c)
    with pytest.raises(di.PreparationMismatchError, match=r"backend +differs"):
        di.gradient(squares, prep, di.AutoFiniteDiff(), x, c)  # the prep answers to AutoFastest
    with pytest.raises(di.PreparationMismatchError, match=r"context 1 +differs"):
        di.gradient(squares, prep, backend, x, di.Cache(np.ones(3)))
    with pytest.raises(di.InvalidInputError, match="prepare_gradient, not prepare_hessian"):
        di.hessian(squares, prep, backend, x, c)


def test_strict_false_and_operators_with_tangents() -> None:
    # two candidates that agree to AutoFastest's tolerance (forward differences of
    # forward-difference gradients, an hvp, are about 1e-4 off: they would disagree)
    backend = di.AutoFastest([di.AutoFiniteDiff(), di.AutoFiniteDiff(step=1e-4)], budget_s=BUDGET)
    x, tx = np.array([1.0, 2.0]), (np.array([1.0, 0.0]),)

    def cubes(x: Any) -> Any:
        return (x**3).sum()

    prep = di.prepare_hvp(cubes, backend, x, tx, strict=False)
    assert not prep.strict and prep.plan is not None and prep.plan.operator == "hvp"
    assert prep.plan.signature == "x numpy float64 (2,), tx (numpy float64 (2,))"
    (hv,) = di.hvp(cubes, prep, backend, np.array([3.0, 1.0]), tx)
    np.testing.assert_allclose(hv, [18.0, 0.0], atol=1e-4)
    pullback_prep = di.prepare_pullback_same_point(elementwise_squares, backend, x, (np.ones(2),))
    (pb,) = di.pullback(elementwise_squares, pullback_prep, backend, x, (np.array([1.0, 1.0]),))
    np.testing.assert_allclose(pb, [2.0, 4.0], rtol=1e-6)


def test_unprepared_calls_plan_once_or_without_the_cache_are_refused_with_the_way_to_prepare() -> None:
    backend = di.AutoFastest([di.AutoFiniteDiff()])
    for value in (1.0, 2.0):  # planned at the first call, the plan kept by the preparation cache
        np.testing.assert_allclose(di.gradient(squares, backend, np.full(2, value)), [2 * value] * 2, rtol=1e-6)
    with di.caching(False):
        with pytest.raises(di.InvalidInputError, match=r"cache, which is off.*prep = di.prepare_gradient"):
            di.gradient(squares, backend, np.ones(2))
        with pytest.raises(di.InvalidInputError, match=r"di.prepare_hvp\(f, backend, x, tx, \*contexts\)"):
            di.hvp(squares, backend, np.ones(2), (np.ones(2),))


def test_it_cannot_be_nested_in_second_order() -> None:
    with pytest.raises(di.UnsupportedOperatorError, match="cannot be a part of SecondOrder"):
        di.prepare_hvp(squares, di.SecondOrder(di.AutoFiniteDiff(), di.AutoFastest()), np.ones(2), (np.ones(2),))


@pytest.mark.parametrize("operator", ["jacobian", "hessian", "gradient"])
def test_it_cannot_be_nested_in_sparse(operator: str) -> None:
    backend = di.AutoSparse(di.AutoFastest([di.AutoFiniteDiff()], budget_s=BUDGET))
    f = elementwise_squares if operator == "jacobian" else squares
    with pytest.raises(di.UnsupportedOperatorError, match="cannot be a part of AutoSparse") as caught:
        getattr(di, f"prepare_{operator}")(f, backend, np.ones(2))
    assert "Put AutoSparse backends among its candidates instead" in str(caught.value)


# --- no arrays held -----------------------------------------------------------------------------


@pytest.mark.parametrize("same_point", [False, True])
def test_the_prep_holds_no_arrays_beyond_the_winners(same_point: bool) -> None:
    candidates = [di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")]
    if di.AutoJAX().is_installed:
        candidates.append(di.AutoJAX(jit=True))
    backend = di.AutoFastest(candidates, budget_s=BUDGET)
    x, ty, c = np.array([1.0, 2.0]), (np.ones(2),), di.Constant(np.array([3.0, 4.0]))
    prepare = di.prepare_pullback_same_point if same_point else di.prepare_pullback
    prep = prepare(elementwise_squares, backend, x, ty, c)
    assert prep.plan is not None
    winner = prepare(elementwise_squares, prep.plan.chosen, x, ty, c)
    assert reachable_arrays(prep) == reachable_arrays(winner)
    assert reachable_arrays(prep.plan) == []
    assert (reachable_arrays(prep) != []) == same_point  # a same-point prep holds its point, as the winner's does


# --- the plan -------------------------------------------------------------------------------------


def test_the_plan_prints_as_a_table_and_renders_with_rich() -> None:
    plan = Plan(
        "gradient",
        "x numpy float64 (3,)",
        (
            PlanRow(di.AutoJAX(jit=True), "chosen", 8.0e-6, 40),
            PlanRow(di.AutoTorch(), "slower", 2.0e-5, 12),
            PlanRow(Wrong(), "disagreed", None, 0, "differs from AutoJAX(jit=True) by 3.3e-01"),
            PlanRow(Failing(), "failed", None, 0, "first call: RuntimeError: engine exploded " + "x" * 80),
        ),
    )
    lines = str(plan).splitlines()
    assert lines[0] == "AutoFastest plan: gradient, x numpy float64 (3,) (measured)"
    assert lines[1].split() == ["candidate", "status", "median", "vs", "chosen", "reason"]
    assert lines[2].split() == ["AutoJAX(jit=True)", "chosen", "8.0", "us", "1.00"]
    assert lines[3].split() == ["AutoTorch()", "slower", "20.0", "us", "2.50"]
    assert lines[4].split()[:3] == ["Wrong()", "disagreed", "-"]
    assert lines[5].endswith("engine exploded " + "x" * 25 + "...")  # reasons are cut at 70 characters
    rich_console = pytest.importorskip("rich.console")
    console = rich_console.Console(record=True, width=160)
    console.print(plan)
    text = console.export_text()
    assert "AutoJAX(jit=True)" in text and "disagreed" in text and "2.50" in text


def test_plan_json_roundtrip_matches_candidates_by_repr() -> None:
    plan = Plan(
        "gradient",
        "x numpy float64 (3,)",
        (PlanRow(Sleepy(delay=0.1), "slower", 0.1, 3), PlanRow(Sleepy(), "chosen", 1e-5, 30)),
        budget_s=0.5,
    )
    data = json.loads(json.dumps(plan.to_json()))
    again = Plan.from_json(data, [Sleepy(), Sleepy(delay=0.1)], "cache here")
    assert again.rows == plan.rows and again.source == "cache here" and again.budget_s == 0.5
    with pytest.raises(KeyError):
        Plan.from_json(data, [Sleepy()], "cache here")


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(np.float64, st.integers(1, 6), elements=st.floats(-1e6, 1e6)),
    st.floats(1e-3, 1e3),
)
def test_relative_difference_is_symmetric_scale_free_and_zero_on_itself(a: np.ndarray, scale: float) -> None:
    b = a * (1 + 1e-3) + 1e-3
    assert agreement.relative_difference([a], [a]) == 0.0
    assert agreement.relative_difference([a], [b]) == agreement.relative_difference([b], [a])
    assert agreement.relative_difference([a * scale], [b * scale]) == pytest.approx(
        agreement.relative_difference([a], [b]), rel=1e-6, abs=1e-12
    )
    assert agreement.relative_difference([a], [a[:-1]]) == float("inf")


def test_relative_difference_of_non_finite_entries() -> None:
    nan, inf = float("nan"), float("inf")
    assert agreement.relative_difference([np.array([nan, inf, 1.0])], [np.array([nan, inf, 1.0])]) == 0.0
    assert agreement.relative_difference([np.array([nan, 1.0])], [np.array([0.0, 1.0])]) == inf
    assert agreement.relative_difference([np.array([0.0])], [np.array([1e-300])]) == 1.0


# --- the selector ---------------------------------------------------------------------------------


def test_the_selector_is_a_hashable_value_and_checks_its_options(tmp_path: Path) -> None:
    a = di.AutoFastest([di.AutoTorch(), di.AutoJAX(), di.AutoTorch()], budget_s=0.5, cache=tmp_path / "p.json")
    b = di.AutoFastest((di.AutoTorch(), di.AutoJAX()), budget_s=0.5, cache=str(tmp_path / "p.json"))
    assert a == b and hash(a) == hash(b) and a.candidates == (di.AutoTorch(), di.AutoJAX())
    assert a.cache == str(tmp_path / "p.json")
    with pytest.raises(ValueError, match="at least one candidate"):
        di.AutoFastest([])
    with pytest.raises(TypeError, match="other than AutoFastest"):
        di.AutoFastest([di.AutoFastest()])
    with pytest.raises(TypeError, match="backend selectors"):
        di.AutoFastest(["jax"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="budget_s must be a positive number"):
        di.AutoFastest(budget_s=0)
    with pytest.raises(ValueError, match="rtol must be positive"):
        di.AutoFastest(rtol=-1.0)
    with pytest.raises(ValueError, match="atol must be >= 0"):
        di.AutoFastest(atol=-1.0)
    with pytest.raises(TypeError):
        di.AutoFastest(None, 1.0)  # type: ignore[misc]  # budget_s is keyword-only


# --- the JSON cache -------------------------------------------------------------------------------


def test_the_cache_skips_measuring_and_a_new_engine_version_invalidates_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "plans.json"
    candidates = [Sleepy(delay=0.003), Sleepy(delay=0.0)]
    first = di.prepare_gradient(squares, di.AutoFastest(candidates, budget_s=BUDGET, cache=path), np.ones(4))
    assert first.plan is not None and first.plan.source == "measured"
    (entry,) = json.loads(path.read_text())["plans"].values()
    assert entry["function"] == "tests.test_fastest:squares" or entry["function"].endswith("test_fastest:squares")
    assert entry["operator"] == "gradient" and entry["signature"] == "x numpy float64 (4,)"
    assert entry["engines"]["numpy"] == np.__version__

    PREPARED.clear()
    backend = di.AutoFastest(candidates, budget_s=BUDGET, cache=path)
    second = di.prepare_gradient(squares, backend, np.ones(4))
    assert second.plan is not None and second.plan.source == f"cache {path}"
    assert PREPARED == [Sleepy(delay=0.0)]  # only the remembered winner was prepared
    assert second.plan.rows == first.plan.rows
    np.testing.assert_allclose(di.gradient(squares, second, backend, np.arange(4.0)), [0, 2, 4, 6], rtol=1e-8)

    other = di.prepare_gradient(squares, backend, np.ones(5))  # another signature: another entry
    assert other.plan is not None and other.plan.source == "measured"
    assert len(json.loads(path.read_text())["plans"]) == 2

    versions = fastest.engine_versions

    def newer_numpy(candidates: Sequence[di.AbstractBackend] = ()) -> dict[str, str]:
        return {**versions(candidates), "numpy": "99.0"}

    monkeypatch.setattr(fastest, "engine_versions", newer_numpy)
    PREPARED.clear()
    third = di.prepare_gradient(squares, backend, np.ones(4))
    assert third.plan is not None and third.plan.source == "measured"
    assert sorted(PREPARED, key=repr) == sorted(candidates, key=repr)
    entries = json.loads(path.read_text())["plans"]
    assert len(entries) == 2 and sorted(e["engines"]["numpy"] for e in entries.values()) == sorted(
        ["99.0", np.__version__]
    )


def test_the_cache_key_covers_function_code_and_candidates(tmp_path: Path) -> None:
    path = tmp_path / "plans.json"
    x = np.ones(2)
    backend = di.AutoFastest([di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")], budget_s=BUDGET, cache=path)
    di.prepare_gradient(squares, backend, x)
    di.prepare_gradient(lambda x: (x * x).sum(), backend, x)
    di.prepare_gradient(lambda x: (x * x * x).sum(), backend, x)  # same qualified name, other code
    di.prepare_gradient(squares, di.AutoFastest([di.AutoFiniteDiff()], budget_s=BUDGET, cache=path), x)
    di.prepare_jacobian(lambda x: x * x, backend, x)
    for leaves in (2, 3):  # pytrees of one structure, leaves of other shapes
        di.prepare_gradient(lambda tree: (tree["w"] ** 2).sum(), backend, {"w": np.arange(1.0, leaves + 1)})
    di.prepare_derivative(lambda t, a: a * t**3, backend, 1.5, di.Constant(2.0))
    di.prepare_derivative(lambda t, a: a * t**3, backend, 2.5, di.Constant(3.0))  # a float's value is no key
    assert len(json.loads(path.read_text())["plans"]) == 8


def test_an_unreadable_cache_is_replaced_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "plans.json"
    path.write_text("{ not json")
    backend = di.AutoFastest([di.AutoFiniteDiff()], budget_s=BUDGET, cache=path)
    with pytest.warns(UserWarning, match="not a di plan cache"):
        prep = di.prepare_gradient(squares, backend, np.ones(2))
    assert prep.plan is not None and prep.plan.source == "measured"
    assert json.loads(path.read_text())["format"] == "di-plan-cache"
    assert not [p for p in tmp_path.iterdir() if p.name != "plans.json"]  # no temporary file left


def test_concurrent_writers_never_leave_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "plans.json"
    cache = PlanCache(path)
    cache.store("seed", {"engines": {}, "plan": {}})
    errors: list[BaseException] = []
    done = threading.Event()

    def write(writer: int) -> None:
        for index in range(15):
            PlanCache(path).store(f"{writer}-{index}", {"engines": {}, "plan": {"n": index}})

    def read() -> None:
        while not done.is_set():
            try:
                assert json.loads(path.read_text())["format"] == "di-plan-cache"
            except BaseException as err:
                errors.append(err)
                return

    reader = threading.Thread(target=read)
    reader.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
    done.set()
    reader.join()
    assert errors == []
    plans = json.loads(path.read_text())["plans"]
    assert any(key.endswith("-14") for key in plans)  # the last write is some writer's last entry
    assert not [p for p in tmp_path.iterdir() if p.name != "plans.json"]


PLANNED_MODULE = """
import sys
import numpy as np
import di

def loss(x):
    return (x * x).sum()

backend = di.AutoFastest([di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")], budget_s=0.02, cache=sys.argv[1])
prep = di.prepare_gradient(loss, backend, np.ones(3))
print(prep.plan.source.split()[0], di.gradient(loss, prep, backend, np.array([1.0, 2.0, 3.0])).round(6).tolist())
"""


def test_a_second_process_reuses_the_plan(tmp_path: Path) -> None:
    script = tmp_path / "planned.py"
    script.write_text(textwrap.dedent(PLANNED_MODULE))
    cache = tmp_path / "plans.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outputs = [
        subprocess.run(
            [sys.executable, str(script), str(cache)], capture_output=True, text=True, env=env, check=True, timeout=120
        ).stdout.strip()
        for _ in range(2)
    ]
    assert outputs == ["measured [2.0, 4.0, 6.0]", "cache [2.0, 4.0, 6.0]"]


# --- the benchmark runs ---------------------------------------------------------------------------


def test_bench_plan_smoke(tmp_path: Path) -> None:
    bench_plan = pytest.importorskip("bench.plan", reason="the bench/ directory is not importable")
    output = tmp_path / "plan_results.md"
    arguments = ["--sizes", "10", "--functions", "sum_of_squares", "--families", "numpy", "--threads", "0"]
    bench_plan.main([*arguments, "--budget", "0.02", "--remeasure", "0.05", "--output", str(output)])
    report = output.read_text()
    summary = next(line for line in report.splitlines() if line.startswith("| sum_of_squares | 10 | numpy |"))
    cells = [cell.strip() for cell in summary.strip("|").split("|")]
    assert cells[3] in {selector_label(b) for b in di.AutoFastest().default_candidates()}
    assert cells[6] in ("PASS", "MISS")  # speed is the report's business, not the test's
    assert float(cells[5]) >= 1.0
