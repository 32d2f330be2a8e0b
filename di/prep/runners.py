"""The runners of a prep: for each of its programs, the one function a prepared
call enters (``run(f, backend, x, contexts)``, or ``run(f, backend, x, tangents,
contexts)`` for the operators with tangents), which compares the call's
arguments with the prepared ones, runs the program and finishes its result.

They are the hot path of a prepared call, whose own cost is a few hundred
nanoseconds: every Python call and every branch is a visible part of it. So each
runner is generated at preparation from one template (:func:`_source`) for its
shape (strict or not; how many contexts and tangents; whether the program checks
``x`` itself; whether its result is finished; which arguments are compared field
by field inline and which by their matcher), and holds no branch or call its
shape does not need. The comparison of ``f`` and the backend, which every runner
makes, strict or not, is written once (:data:`_SAME_F_AND_BACKEND`); so is each
other part of the template. The source of each shape is compiled once per
process; a runner is a closure over the prep's constants, like a hand-written
one. What a runner does when its comparison fails (the report, or the program on
the arguments as the prep sees them) is ordinary Python, in :mod:`di.prep.slow_paths`.

A program marked ``records_python_stack = True`` (its engine records the Python
stack, with each frame's line, at every operation it runs) gets a
runner whose call of it comes first in the code, ahead of the comparison, since
Python finds a frame's line by reading its line table from the start.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from di.families import get_family
from di.prep.finish import Step, composed_steps, finish_steps
from di.prep.line_numbers import index_di_line_numbers, index_line_numbers
from di.prep.matching import Matcher, same_selector
from di.prep.own_checks import ArgumentsRejected, checks_arguments
from di.prep.slow_paths import Missed, mismatched, mismatched_with_tangents, rejected

__all__ = ["Compared", "Missed", "Prepared", "probe", "runner"]


class Compared:
    """How a runner compares one argument of a call with the prepared one: by its
    class, shape and dtype read inline when its family's matcher compares exactly
    those (:meth:`di.Family.fields`: a Python call fewer), else by the matcher.

    Args:
        value: the prepared argument, as the prep sees it (:func:`~di.prep.traced.plain`).
        matcher: the predicate recognising arguments like it.
        family: its array family's name, ``None`` for other values.

    Examples:
        >>> import numpy as np
        >>> from di.prep.runners import Compared
        >>> Compared(np.zeros(3), lambda given: False, "numpy").fields
        (<class 'numpy.ndarray'>, (3,), dtype('float64'))
    """

    __slots__ = ("fields", "matcher", "shortcut")

    def __init__(self, value: Any, matcher: Matcher, family: str | None) -> None:
        self.fields: tuple[type, Any, Any] | None = None if family is None else get_family(family).fields(value)
        self.matcher = matcher
        # (class, attribute, object) tested inline before the matcher (Family.shortcut)
        self.shortcut: tuple[type, str, Any] | None = None
        if family is not None and self.fields is None:
            self.shortcut = get_family(family).shortcut(value)


class Prepared(Protocol):
    """What a runner reads of its prep (:class:`di.prep.base.Prep`)."""

    f: Callable[..., Any]
    backend: Any
    strict: bool
    same_point: Callable[[Any, Sequence[Any]], bool] | None
    x_spec: Any
    tangent_check: Any
    x_test: Compared
    tangent_tests: tuple[Compared, ...]
    context_tests: tuple[tuple[type, Compared], ...]

    def check(self, f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> None:
        """Raise the report when the arguments differ from the prepared ones."""

    def refuse_tangent_call(self, f: Any, backend: Any, x: Any, tangents: Any, contexts: Sequence[Any]) -> None:
        """The same with tangents (and tangents that are no tuple)."""

    def explain_error(self, error: Exception, x: Any, tangents: Any, contexts: Sequence[Any]) -> None:
        """Raise the error the arguments explain when the program raised ``error``."""

    def matches(self, x: Any, contexts: Sequence[Any], tangents: Any = None) -> bool:
        """Whether the arguments fit the prepared signature (as a strict call compares them)."""


def runner(prep: Prepared, program: Callable[..., Any]) -> Callable[..., Any]:
    """The runner of ``program`` on ``prep``: its strict check (or, not strict, the
    comparison of ``f`` and the backend), the program and the conversion of its
    result for the caller, in one function specialised at preparation. A
    same-point prep's runner is the program itself (its call path checks the
    point).

    Args:
        prep: the prep, whose signature and selector the runner compares with.
        program: one of its programs.

    Returns:
        ``run(f, backend, x, contexts)``, or ``run(f, backend, x, tangents,
        contexts)`` when the prep has tangents.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x * x).sum()
        >>> prep = di.prepare_gradient(f, di.AutoFiniteDiff(), np.zeros(2))
        >>> run = prep.runners["gradient"]
        >>> run(f, di.AutoFiniteDiff(), np.array([1.0, 2.0]), ()).round(6)
        array([2., 4.])
    """
    if prep.same_point is not None:
        return program
    return _made(prep, program, probing=False)


def probe(prep: Prepared, program: Callable[..., Any]) -> Callable[..., Any]:
    """A strict prep's runner of ``program`` for the implicit cache of unprepared
    calls (:mod:`di.operators.cache`): the same comparison and program, in one
    call, but arguments that differ from the prepared ones raise :class:`Missed`
    (the cache then looks further or prepares) where the runner reports them. It
    compares neither ``f`` nor the selector: the cache found its entry by them.

    Args:
        prep: a strict prep (not a same-point one).
        program: one of its programs.

    Returns:
        ``run(x, contexts)``, or ``run(x, tangents, contexts)`` when the prep has
        tangents.

    Examples:
        >>> import numpy as np, di
        >>> from di.prep.runners import Missed, probe
        >>> f = lambda x: (x * x).sum()
        >>> prep = di.prepare_gradient(f, di.AutoFiniteDiff(), np.zeros(2))
        >>> run = probe(prep, prep.programs["gradient"])
        >>> run(np.array([1.0, 2.0]), ()).round(6)
        array([2., 4.])
        >>> try:
        ...     run(np.zeros(3), ())
        ... except Missed:
        ...     print("another signature")
        another signature
    """
    return _made(prep, program, probing=True)


def _miss(*args: Any) -> Any:
    raise Missed()


def _made(prep: Prepared, program: Callable[..., Any], probing: bool) -> Callable[..., Any]:
    """A runner (:func:`runner`), or with ``probing`` a :func:`probe`."""
    checked = checks_arguments(program)
    program, steps = finish_steps(program)
    # (the engine records the Python stack at every operation: the runner calls the program first
    # in its code, and di's line numbers are indexed, see di.prep.line_numbers)
    records_python_stack = getattr(program, "records_python_stack", False) is True
    if prep.tangent_check is not None:
        kind = _WITH_TANGENTS
    elif checked and prep.x_spec is None:  # a pytree x, compared by the program itself
        kind = _CHECKED_BY_PROGRAM
    else:
        kind = _PLAIN
    key, constants = _shape_and_constants(prep, kind, program, steps, probing, records_python_stack)
    factory = _FACTORIES.get(key)
    if factory is None:
        shape = _Shape(*key)
        factory = _FACTORIES[key] = _compiled(_source(shape), shape.name)
    if records_python_stack:
        # (the frames between the caller and the engine's operations: this runner's, the dispatcher's,
        # the program's and f's wrappers, all di's; a module loaded since is indexed now)
        index_di_line_numbers()
        if key not in _INDEXED_FACTORIES and index_line_numbers([factory.__code__]):
            _INDEXED_FACTORIES.add(key)
    return factory(*constants)


# --- the template --------------------------------------------------------------------------------

_SAME_F_AND_BACKEND = "f is f0 and (backend is backend0 or same_selector(backend, backend0))"
"""The comparison every runner makes, strict or not: a ``strict=False`` prep leaves
``x``, the contexts and the tangents to the engine, never the function it runs
(:meth:`di.prep.base.Prep.serves`, inline)."""

_PLAIN, _CHECKED_BY_PROGRAM, _WITH_TANGENTS = "", "checked_by_program", "with_tangents"
"""The kinds of runner: of a program taking ``x`` and the context values; of one
that compares a pytree ``x`` with the prepared one itself (an ahead-of-time
compiled executable); of one taking tangents too."""


class _Shape(NamedTuple):
    """What a runner's source depends on (the key of its compiled factory)."""

    strict: bool
    kind: str
    finish: tuple[bool, ...]  # the steps finishing the program's result (di.prep.finish): each a cell?
    tangents: int
    contexts: int
    inline: tuple[bool | str, ...]  # each argument compared (x, tangents, context values): how (_inline)
    through_cell: bool  # a program checking its arguments: its executable called through its cell
    boxed: bool  # a strict form whose one result the runner puts in a tuple (_boxed_form)
    call_first: bool  # the program's call first in the code (a program marked records_python_stack)
    probe: bool  # a probe (:func:`probe`): f and the selector neither passed nor compared

    @property
    def compares(self) -> bool:
        """Whether the runner compares ``x``, the tangents and the context values."""
        return self.strict and self.kind != _CHECKED_BY_PROGRAM

    @property
    def name(self) -> str:
        strictness = "strict" if self.strict else "loose"
        return "_".join(filter(None, ("probe" if self.probe else "run", strictness, self.kind, f"{self.contexts}c")))


def _shape_and_constants(
    prep: Prepared,
    kind: str,
    program: Callable[..., Any],
    steps: tuple[Step, ...],
    probing: bool,
    records_python_stack: bool,
) -> tuple[tuple[Any, ...], list[Any]]:
    """The fields of a runner's :class:`_Shape` (a plain tuple: the key of its
    factory) and the constants it closes over, in the order of the parameters of
    its factory (:func:`_parameters`); asked at each preparation, so it builds no
    source. A probe's constants differ only in what a failed comparison calls."""
    strict = prep.strict
    finish = composed_steps(steps) if steps else None  # (for the slow paths)
    constants: list[Any] = [prep.f, prep.backend, same_selector, _miss if probing else prep.check]
    through_cell = boxed = False
    if kind == _CHECKED_BY_PROGRAM:
        # The executable itself when the program exposes it (a Python call fewer): it
        # refuses other arguments with a TypeError, which the program turns into
        # ArgumentsRejected (or, within compiling_again, into a new compile). One
        # compiled by its first call is read from its cell, where it puts the compiled one.
        executable = getattr(program, "executable", None)
        refused = (ArgumentsRejected,) if executable is None else (TypeError, ArgumentsRejected)
        cell = getattr(executable, "cell", None)
        through_cell = cell is not None
        called = program if executable is None else cell if through_cell else executable
        constants += (called, refused, rejected(prep.check, prep.strict, prep.matches, program, probing))
    elif kind == _WITH_TANGENTS:
        boxed_form = _boxed_form(prep, program) if strict else None
        boxed = boxed_form is not None
        fast = boxed_form if boxed_form is not None else _strict_form(program) if strict else program
        refuse, explain = prep.refuse_tangent_call, prep.explain_error
        constants += (fast, _miss if probing else refuse, explain)
        if strict:
            constants.append(_miss if probing else mismatched_with_tangents(refuse, explain, program, finish))
    else:
        constants.append(_strict_form(program) if strict else program)
        if strict:
            constants.append(_miss if probing else mismatched(prep.check, program, finish))
    constants.extend(steps)
    compares = strict and kind != _CHECKED_BY_PROGRAM
    inline: list[bool | str] = []
    tests = (prep.x_test, *prep.tangent_tests) if compares else ()
    for test in (*tests, *[test for _, test in prep.context_tests]) if compares else ():
        inline.append(_inline(test))
    marks = iter(inline)
    for test in tests:
        constants.extend(_test_constants(test, next(marks)))
    for wrapper, test in prep.context_tests:
        constants.append(wrapper)
        if compares:
            constants.extend(_test_constants(test, next(marks)))
    cells = tuple(step.__class__ is list for step in steps)
    key: tuple[Any, ...] = (
        strict,
        kind,
        cells,
        len(prep.tangent_tests),
        len(prep.context_tests),
        tuple(inline),
        through_cell,
        boxed,
        compares and records_python_stack,  # (call_first)
        probing,
    )
    return key, constants


_TREE = "*tree"
"""How a runner compares a pytree argument whose matcher is its structure's leaves
and a predicate of them (:func:`di.prep.matching` ``tree_parts``): both called inline."""


def _inline(test: Compared) -> bool | str:
    """How a runner compares an argument: ``True``, its fields inline; an attribute's
    name, that attribute's identity inline, else its matcher; :data:`_TREE`, a
    pytree's leaves and their predicate inline; ``False``, its matcher."""
    if test.fields is not None:
        return True
    if test.shortcut is not None:
        return test.shortcut[1]
    return _TREE if getattr(test.matcher, "tree_parts", None) is not None else False


def _test_constants(test: Compared, inline: bool | str) -> tuple[Any, ...]:
    """The constants of an argument's comparison, in the order of :func:`_parameters`."""
    if inline is True:
        return test.fields  # type: ignore[return-value]
    if inline is False:
        return (test.matcher,)
    if inline == _TREE:
        return test.matcher.tree_parts  # type: ignore[attr-defined,no-any-return]
    cls, _, same = test.shortcut  # type: ignore[misc]
    return cls, same, test.matcher


def _strict_form(program: Callable[..., Any]) -> Callable[..., Any]:
    """What a strict runner calls once its comparison has passed: the program's
    ``strict_form`` where it has one (a form that leaves out the questions that
    comparison has answered: the classes, shapes and dtypes of ``x`` and the
    tangents, and the count of contexts, are the prepared ones), else the program.
    The comparison's slow path (a difference, or arguments the prep takes as
    something else) calls the program itself."""
    return getattr(program, "strict_form", None) or program


def _boxed_form(prep: Prepared, program: Callable[..., Any]) -> Callable[..., Any] | None:
    """What a strict runner with one tangent calls once its comparison has passed,
    when the program offers it (``boxed_strict_form``: a function taking the one
    tangent bare and returning its one result bare, and which classes of tangent it
    takes) and the prepared tangent is
    of such a class: the runner puts the result in the tuple the program would
    have built (a Python call fewer). ``None`` otherwise."""
    form = getattr(program, "boxed_strict_form", None)
    if form is None or len(prep.tangent_tests) != 1:
        return None
    function, takes = form
    test = prep.tangent_tests[0]
    found = test.fields if test.fields is not None else test.shortcut
    return function if found is not None and takes(found[0]) else None


def _passed(shape: _Shape) -> str:
    """What a runner with tangents passes its program: the tangents, or to a boxed
    form the one tangent bare (bound by its comparison, unless the call comes first)."""
    if not shape.boxed:
        return "tangents"
    return "tangents[0]" if shape.call_first else "tangent0"


def _parameters(shape: _Shape) -> tuple[list[str], list[str]]:
    """The names of a runner's constants (the parameters of its factory, in the
    order of :func:`_shape_and_constants`), and its strict comparison of ``x``, the
    tangents and the context values, one test each."""
    names = ["f0", "backend0", "same_selector", "fail"]
    if shape.kind == _CHECKED_BY_PROGRAM:
        names += ["call", "refused", "rejected"]
    elif shape.kind == _WITH_TANGENTS:
        names += ["program", "refuse", "explain", *(["mismatched"] if shape.strict else [])]
    else:
        names += ["program", *(["mismatched"] if shape.strict else [])]
    names.extend(f"finish{index}" for index in range(len(shape.finish)))
    tests: list[str] = []
    inline = iter(shape.inline)

    def compare(name: str, expression: str) -> None:
        # bound to name where it is read again: a context's value (the call passes it
        # on), fields read inline
        mode = next(inline)
        bound = expression if name == expression else f"({name} := {expression})"
        if mode is True:
            names.extend(f"{name}_{field}" for field in ("cls", "shape", "dtype"))
            tests.append(
                f"{bound}.__class__ is {name}_cls and {name}.shape == {name}_shape and {name}.dtype == {name}_dtype"
            )
        elif mode == _TREE:  # a pytree: its leaves (None: another structure), then their predicate
            names.extend((f"{name}_leaves_of", f"{name}_leaves_match"))
            tests.append(
                f"({name}_leaves := {name}_leaves_of({bound})) is not None and {name}_leaves_match({name}_leaves)"
            )
        elif mode:  # the family's shortcut (an attribute's identity), else its matcher
            names.extend((f"{name}_cls", f"{name}_same", f"{name}_matches"))
            tests.append(
                f"({bound}.__class__ is {name}_cls and {name}.{mode} is {name}_same or {name}_matches({name}))"
            )
        else:
            names.append(f"{name}_matches")
            tests.append(f"{name}_matches({f'{name} := ' if name.startswith('value') else ''}{expression})")

    if shape.compares:
        compare("x", "x")
        for index in range(shape.tangents):
            compare(f"tangent{index}", f"tangents[{index}]")
    for index in range(shape.contexts):
        names.append(f"wrapper{index}")
        if shape.compares:
            tests.append(f"contexts[{index}].__class__ is wrapper{index}")
            compare(f"value{index}", f"contexts[{index}].value")
    return names, tests


def _source(shape: _Shape) -> str:
    """The source of a runner of ``shape``: ``make(*constants)``, returning the runner."""
    names, tests = _parameters(shape)
    tangents = shape.kind == _WITH_TANGENTS
    arguments = "x, tangents, contexts" if tangents else "x, contexts"
    if not shape.probe:
        arguments = "f, backend, " + arguments
    same = [] if shape.probe else [_SAME_F_AND_BACKEND]
    count = "not contexts" if shape.contexts == 0 else f"len(contexts) == {shape.contexts}"
    values = _values(shape)
    body: list[str] = []
    if shape.compares:
        # one comparison of everything; any difference (or a comparison that raises)
        # goes to the slow path, which reports it or runs the arguments as the prep sees them
        checks = ["tangents.__class__ is tuple", f"len(tangents) == {shape.tangents}"] if tangents else []
        tests = [*same, *checks, count, *tests]
        comparison = [
            "try:",
            "    ok = " + " and ".join(tests),
            "except Exception:",
            "    ok = False",
            "if not ok:",
            f"    return mismatched({arguments})",
        ]
    else:
        if tangents:
            body += ["if tangents.__class__ is not tuple:", f"    refuse({arguments})"]
        if shape.strict:  # (a program that compares x and the values itself: here, the contexts' wrappers)
            same += [count, *[f"contexts[{index}].__class__ is wrapper{index}" for index in range(shape.contexts)]]
        elif shape.contexts:  # (fewer contexts than prepared: the report says so, not an IndexError)
            same.append(f"len(contexts) >= {shape.contexts}")
        body += [f"if not ({' and '.join(same)}):", f"    fail({'' if shape.probe else 'f, backend, '}x, contexts)"]
    result = _finishing(shape, "result")
    if shape.kind == _CHECKED_BY_PROGRAM:
        callee = "call[0]" if shape.through_cell else "call"
        call = f"{callee}(x{values})"
        if not shape.strict and shape.contexts == 0:  # (contexts the prep was not made with: passed on)
            call += f" if contexts else {callee}(x)"
        body += [
            "try:",
            f"    result = {call}",
            "except refused:",
            f"    result = rejected({'None, None' if shape.probe else 'f, backend'}, x, contexts, "
            f"({values[2:]}{',' if values else ''}))",
            f"return {result}",
        ]
    elif tangents:
        body += [
            "try:",
            f"    result = {'(' if shape.boxed else ''}program(x, {_passed(shape)}{values})"
            f"{',)' if shape.boxed else ''}",
            "except Exception as error:",
            "    explain(error, x, tangents, contexts)",
            "    raise",
            f"return {result}",
        ]
    else:
        body.append(f"return {_finishing(shape, f'program(x{values})')}")
    if shape.call_first:
        # The program's call first in the code, the comparison after it (run on the loop's
        # first pass): the program's engine records the Python stack at each of its
        # operations, and Python finds each frame's line by reading its line table from
        # the start, so a call deep in this frame's code is paid at every operation
        # (about 1 % of such an engine's eager pullback at n = 1e3: 12-18 us of 1.2-1.5 ms).
        call_lines = body
        body = ["ok = False", "while True:", "    if ok:"]
        body += [f"        {line}" for line in call_lines]
        body += [f"    {line}" for line in comparison]
    elif shape.compares:
        body = comparison + body
    lines = [f"def make({', '.join(names)}):", f"    def {shape.name}({arguments}):"]
    lines += [f"        {line}" for line in body]
    lines.append(f"    return {shape.name}")
    return "\n".join(lines) + "\n"


def _finishing(shape: _Shape, result: str) -> str:
    """The expression finishing ``result``: each step called on the last one's result
    (a cell's function read from it)."""
    for index, cell in enumerate(shape.finish):
        result = f"finish{index}{'[0]' if cell else ''}({result})"
    return result


def _values(shape: _Shape) -> str:
    """The context values a runner passes the program, after ``x`` (and the tangents).

    Strict, they are the values it compared (bound as it compared them; a program
    that checks its own arguments reads them from the contexts). A ``strict=False``
    prep leaves the contexts to the engine and passes what the hand-written runners
    passed: the first value for a prep of one context (without tangents), none for
    a prep of none (without tangents, or with one tangent), every value given
    otherwise (and, for a program that checks its own arguments, whenever the call
    gives any)."""
    if shape.strict:
        read = "value{}" if shape.compares else "contexts[{}].value"
        return "".join(f", {read.format(index)}" for index in range(shape.contexts))
    if shape.kind != _WITH_TANGENTS and shape.contexts == 1:
        return ", contexts[0].value"
    if shape.contexts == 0 and (shape.kind == _PLAIN or (shape.kind == _WITH_TANGENTS and shape.tangents == 1)):
        return ""
    return ", *[context.value for context in contexts]"


_FACTORIES: dict[tuple[Any, ...], Callable[..., Callable[..., Any]]] = {}
"""The compiled factory of each runner shape met in this process, by the shape's fields."""

_INDEXED_FACTORIES: set[tuple[Any, ...]] = set()
"""The shapes whose factory's line numbers are indexed (:mod:`di.prep.line_numbers`)."""


def _compiled(source: str, name: str) -> Callable[..., Callable[..., Any]]:
    """Compile a runner's source; its lines are given to :mod:`linecache` under a
    name beside this module, so a traceback through a runner shows them."""
    filename = os.path.join(os.path.dirname(__file__), f"<{name} {len(_FACTORIES)}>")
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"__name__": __name__}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["make"]  # type: ignore[no-any-return]
