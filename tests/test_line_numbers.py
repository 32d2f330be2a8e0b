"""Line numbers indexed ahead (:mod:`di.prep.line_numbers`): indexing runs none of the indexed code,
leaves the lines Python reports as they were, leaves a trace or profile function alone (and then
indexes nothing), serves threads, and a preparation asks for it exactly when one of its programs
records the Python stack at every operation."""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, as_family, backend_id, engine_family

import di
from di.prep import line_numbers, runners
from di.prep.finish import finish_steps
from di.prep.line_numbers import index_di_line_numbers, index_line_numbers

INDEXES = sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11)
"""Where indexing applies (elsewhere both functions do nothing and say 0)."""


def _functions_with_side_effects(ran: list[str]) -> list[Callable[..., Any]]:
    """Five functions of every kind of signature, one nested, one a closure, and a generator: each
    records that it ran."""
    cell = "closure"

    def positional(a: Any, b: Any = 1, /, *rest: Any, c: Any, d: Any = 2, **more: Any) -> None:
        ran.append("positional")

    def empty() -> None:
        ran.append("empty")

    def closure() -> None:
        ran.append(cell)

    def outer() -> Callable[[], None]:
        def inner() -> None:
            ran.append("inner")

        ran.append("outer")
        return inner

    def generator() -> Any:
        ran.append("generator")
        yield

    return [positional, empty, closure, outer, generator]


def test_indexing_runs_none_of_the_code_and_leaves_no_profile_function() -> None:
    ran: list[str] = []
    functions = _functions_with_side_effects(ran)
    count = index_line_numbers(function.__code__ for function in functions)
    assert ran == []
    assert count == (5 if INDEXES else 0)  # (the nested function counted; the generator skipped)
    assert sys.getprofile() is None
    for function in functions[1:4]:  # they still run, as before
        function()
    assert ran == ["empty", "closure", "outer"]


def _lines() -> tuple[int, int, int, int]:
    """The lines this frame reports: at its start, in a traceback, in an extracted stack, at its end."""
    first = sys._getframe().f_lineno
    try:
        raise ValueError("where")
    except ValueError as error:
        assert error.__traceback__ is not None
        raised = error.__traceback__.tb_lineno
    stacked = traceback.extract_stack()[-1].lineno
    last = sys._getframe().f_lineno
    assert stacked is not None
    return first, raised, stacked, last


def test_the_lines_python_reports_are_the_same_after_indexing() -> None:
    before = _lines()
    assert before[0] < before[1] < before[2] < before[3]
    index_line_numbers([_lines.__code__])
    assert _lines() == before


@pytest.mark.parametrize("which", ["profile", "trace"])
def test_a_trace_or_profile_function_is_left_alone_and_nothing_is_indexed(which: str, monkeypatch: Any) -> None:
    profile = which == "profile"
    set_function: Any = sys.setprofile if profile else sys.settrace
    get_function: Any = sys.getprofile if profile else sys.gettrace
    ran: list[str] = []

    def own(frame: Any, event: str, arg: Any) -> Any:
        return None

    monkeypatch.setattr(line_numbers, "_INDEXED_MODULES", set())
    monkeypatch.setattr(line_numbers, "_SEEN_MODULE_COUNT", [0])
    previous = get_function()
    set_function(own)
    try:
        counts = (index_line_numbers(f.__code__ for f in _functions_with_side_effects(ran)), index_di_line_numbers())
        current = get_function()
    finally:
        set_function(previous)
    assert current is own
    assert counts == (0, 0)
    assert ran == []
    # di's modules were not marked done: the next call, without the caller's function, indexes them
    assert (index_di_line_numbers() > 0) is INDEXES


def test_threads_index_at_once_and_run_none_of_the_code() -> None:
    ran: list[str] = []
    counts: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                counts.append(index_line_numbers(f.__code__ for f in _functions_with_side_effects(ran)))
        except BaseException as error:  # (reported below: a thread's failure is not the test's)
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert ran == []
    assert counts == [5 if INDEXES else 0] * 80


def weighted(x: Any) -> Any:
    """``sum(x**3)``: gradient ``3 x**2``."""
    xp = di.array_namespace(x)
    return xp.sum(x**3)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "loose"])
@pytest.mark.parametrize("backend", [pytest.param(b, id=backend_id(b)) for b in BACKENDS])
def test_a_preparation_indexes_dis_lines_when_its_program_records_the_python_stack(
    backend: di.AbstractBackend, strict: bool, monkeypatch: Any
) -> None:
    asked: list[int] = []

    def index_di_line_numbers() -> int:
        asked.append(1)
        return 0

    monkeypatch.setattr(runners, "index_di_line_numbers", index_di_line_numbers)
    monkeypatch.setattr(runners, "_INDEXED_FACTORIES", set())
    x = as_family(np.array([1.0, 2.0, 3.0]), engine_family(backend))
    prep = di.prepare_gradient(weighted, backend, x, strict=strict)
    np.testing.assert_allclose(np.asarray(di.gradient(weighted, prep, backend, x)), [3.0, 12.0, 27.0], rtol=1e-5)
    programs = [finish_steps(program)[0] for program in prep.programs.values()]  # (what a runner calls)
    records = any(getattr(program, "records_python_stack", False) is True for program in programs)
    assert bool(asked) is records
