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
the arguments as the prep sees them) is ordinary Python, below the template.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from di.families import family_of, get_family
from di.prep.finish import Finish, split_finish
from di.prep.matching import Matcher, same_selector
from di.prep.own_checks import ArgumentsRejected, checks_arguments, compiling_again
from di.prep.traced import plain

__all__ = ["Compared", "Prepared", "runner"]


class Compared:
    """How a runner compares one argument of a call with the prepared one: by its
    class, shape and dtype read inline when its family's matcher compares exactly
    those (:meth:`di.Family.fields`: a Python call fewer), else by the matcher.

    Args:
        value: the prepared argument, as the prep sees it (:func:`~di.prep.traced.plain`).
        matcher: the predicate recognising arguments like it.

    Examples:
        >>> import numpy as np
        >>> from di.prep.runners import Compared
        >>> Compared(np.zeros(3), lambda given: False).fields
        (<class 'numpy.ndarray'>, (3,), dtype('float64'))
    """

    __slots__ = ("fields", "matcher")

    def __init__(self, value: Any, matcher: Matcher) -> None:
        family = family_of(value)
        self.fields: tuple[type, Any, Any] | None = None if family is None else get_family(family).fields(value)
        self.matcher = matcher


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
    checked = checks_arguments(program)
    program, finish = split_finish(program)
    shape = _Shape(prep, program, finish, checked)
    factory = _FACTORIES.get(shape.key)
    if factory is None:
        factory = _FACTORIES[shape.key] = _compiled(_source(shape), shape.name)
    return factory(*shape.constants)  # type: ignore[no-any-return]


# --- the template --------------------------------------------------------------------------------

_SAME_F_AND_BACKEND = "f is f0 and (backend is backend0 or same_selector(backend, backend0))"
"""The comparison every runner makes, strict or not: a ``strict=False`` prep leaves
``x``, the contexts and the tangents to the engine, never the function it runs."""


class _Shape:
    """What a runner's source depends on (:attr:`key`), the names it gives the
    constants it closes over (:attr:`names`) and their values (:attr:`constants`),
    gathered in one pass over the prep."""

    __slots__ = ("checked", "constants", "contexts", "finish", "key", "name", "names", "strict", "tangents", "tests")

    def __init__(self, prep: Prepared, program: Callable[..., Any], finish: Finish | None, checked: bool) -> None:
        self.strict, self.finish = prep.strict, finish is not None
        self.contexts = len(prep.context_tests)
        self.tangents = None if prep.tangent_check is None else len(prep.tangent_tests)
        # a program that compares a pytree x itself (an ahead-of-time compiled executable)
        self.checked = checked and self.tangents is None and prep.x_spec is None
        self.names: list[str] = []
        self.constants: list[Any] = []
        self.tests: list[str] = []  # the strict comparison of x, the tangents and the contexts
        self._constant("f0", prep.f)
        self._constant("backend0", prep.backend)
        self._constant("same_selector", same_selector)
        self._constant("fail", prep.check)
        if finish is not None:
            self._constant("finish", finish)
        if self.checked:
            self._checked_by_program(prep, program, finish)
        elif self.tangents is not None:
            self._with_tangents(prep, program, finish)
        else:
            self._constant("program", program)
            if self.strict:
                self._constant("mismatched", _mismatched(prep, program, finish))
        if self.strict and not self.checked:
            self._test("x", "x", prep.x_test)
            for index, tangent in enumerate(prep.tangent_tests):
                self._test(f"tangent{index}", f"tangents[{index}]", tangent)
        for index, (wrapper, value) in enumerate(prep.context_tests):
            self._constant(f"wrapper{index}", wrapper)
            if self.strict and not self.checked:
                self.tests.append(f"contexts[{index}].__class__ is wrapper{index}")
                self._test(f"value{index}", f"contexts[{index}].value", value)
        kind = "checked_by_program" if self.checked else "with_tangents" if self.tangents is not None else ""
        self.name = "_".join(filter(None, ("run", "strict" if self.strict else "loose", kind, f"{self.contexts}c")))
        self.key = (self.name, self.tangents, self.finish, tuple(self.tests))

    def _constant(self, name: str, value: Any) -> None:
        self.names.append(name)
        self.constants.append(value)

    def _test(self, name: str, expression: str, compared: Compared) -> None:
        """Compare the argument ``expression`` with the prepared one, as ``compared``
        says, as ``name``: bound to it where it is read again (a context's value,
        which the call passes on; fields read inline)."""
        if compared.fields is None:
            self._constant(f"{name}_matches", compared.matcher)
            read = f"{name} := {expression}" if name.startswith("value") else expression
            self.tests.append(f"{name}_matches({read})")
            return
        bound = expression if name == expression else f"({name} := {expression})"
        for field, value in zip(("cls", "shape", "dtype"), compared.fields):
            self._constant(f"{name}_{field}", value)
        self.tests.append(
            f"{bound}.__class__ is {name}_cls and {name}.shape == {name}_shape and {name}.dtype == {name}_dtype"
        )

    def _checked_by_program(self, prep: Prepared, program: Callable[..., Any], finish: Finish | None) -> None:
        # The executable itself when the program exposes it (a Python call fewer): it
        # refuses other arguments with a TypeError, which the program turns into
        # ArgumentsRejected (or, within compiling_again, into a new compile).
        executable = getattr(program, "executable", None)
        refused: tuple[type[Exception], ...] = (ArgumentsRejected,)
        if executable is not None:
            refused = (TypeError, ArgumentsRejected)
        self._constant("call", program if executable is None else executable)
        self._constant("refused", refused)
        self._constant("rejected", _rejected(prep, program))

    def _with_tangents(self, prep: Prepared, program: Callable[..., Any], finish: Finish | None) -> None:
        self._constant("program", program)
        self._constant("refuse", prep.refuse_tangent_call)
        self._constant("explain", prep.explain_error)
        if self.strict:
            self._constant("mismatched", _mismatched_with_tangents(prep, program, finish))


def _source(shape: _Shape) -> str:
    """The source of a runner of ``shape``: ``make(*constants)``, returning the runner."""
    tangents = shape.tangents is not None
    arguments = "f, backend, x, tangents, contexts" if tangents else "f, backend, x, contexts"
    count = "not contexts" if shape.contexts == 0 else f"len(contexts) == {shape.contexts}"
    values = _values(shape)
    body: list[str] = []
    if shape.strict and not shape.checked:
        # one comparison of everything; any difference (or a comparison that raises)
        # goes to the slow path, which reports it or runs the arguments as the prep sees them
        tests = [_SAME_F_AND_BACKEND, count, *shape.tests]
        if tangents:
            tests[1:1] = ["tangents.__class__ is tuple", f"len(tangents) == {shape.tangents}"]
        body += [
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
        same = _SAME_F_AND_BACKEND
        if shape.strict:  # (a program that compares x and the values itself: here, the contexts' wrappers)
            wrappers = [f"contexts[{index}].__class__ is wrapper{index}" for index in range(shape.contexts)]
            same = " and ".join([same, count, *wrappers])
        body += [f"if not ({same}):", "    fail(f, backend, x, contexts)"]
    result = "finish(result)" if shape.finish else "result"
    if shape.checked:
        call = f"call(x{values})"
        if not shape.strict and shape.contexts == 0:  # (contexts the prep was not made with: passed on)
            call += " if contexts else call(x)"
        body += [
            "try:",
            f"    result = {call}",
            "except refused:",
            f"    result = rejected(f, backend, x, contexts, ({values[2:]}{',' if values else ''}))",
            f"return {result}",
        ]
    elif tangents:
        body += [
            "try:",
            f"    result = program(x, tangents{values})",
            "except Exception as error:",
            "    explain(error, x, tangents, contexts)",
            "    raise",
            f"return {result}",
        ]
    else:
        call = f"program(x{values})"
        body.append(f"return finish({call})" if shape.finish else f"return {call}")
    lines = [f"def make({', '.join(shape.names)}):", f"    def {shape.name}({arguments}):"]
    lines += [f"        {line}" for line in body]
    lines.append(f"    return {shape.name}")
    return "\n".join(lines) + "\n"


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
        read = "contexts[{}].value" if shape.checked else "value{}"
        return "".join(f", {read.format(index)}" for index in range(shape.contexts))
    every = ", *[context.value for context in contexts]"
    if shape.tangents is None and shape.contexts == 1:
        return ", contexts[0].value"
    if shape.contexts == 0 and shape.tangents in (None, 1) and not shape.checked:
        return ""
    return every


_FACTORIES: dict[tuple[Any, ...], Callable[..., Callable[..., Any]]] = {}
"""The compiled factory of each runner shape met in this process."""


def _compiled(source: str, name: str) -> Callable[..., Callable[..., Any]]:
    """Compile a runner's source; its lines are given to :mod:`linecache` under a
    name beside this module, so a traceback through a runner shows them."""
    filename = os.path.join(os.path.dirname(__file__), f"<{name} {len(_FACTORIES)}>")
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"__name__": __name__}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["make"]  # type: ignore[no-any-return]


# --- the slow paths ------------------------------------------------------------------------------


def _mismatched(prep: Prepared, program: Callable[..., Any], finish: Finish | None) -> Callable[..., Any]:
    """What a strict runner does when its comparison fails: the prep's check raises
    the report, or finds that the arguments fit after all (a memmap where an
    ndarray was prepared, an engine's traced value holding an array like the
    prepared one), and the program runs on them as the prep sees them."""
    check = prep.check

    def mismatched(f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Any:
        check(f, backend, x, contexts)
        result = program(plain(x), *[plain(context.value) for context in contexts])
        return result if finish is None else finish(result)

    return mismatched


def _mismatched_with_tangents(prep: Prepared, program: Callable[..., Any], finish: Finish | None) -> Callable[..., Any]:
    """:func:`_mismatched` for a runner with tangents."""
    refuse, explain = prep.refuse_tangent_call, prep.explain_error

    def mismatched(f: Any, backend: Any, x: Any, tangents: Any, contexts: Sequence[Any]) -> Any:
        refuse(f, backend, x, tangents, contexts)
        x, tangents = plain(x), tuple(plain(t) for t in tangents)
        values = [plain(context.value) for context in contexts]
        try:
            result = program(x, tangents, *values)
        except Exception as error:
            explain(error, x, tangents, [_Value(value) for value in values])
            raise
        return result if finish is None else finish(result)

    return mismatched


def _rejected(prep: Prepared, program: Callable[..., Any]) -> Callable[..., Any]:
    """What a runner does when a program that checks its own arguments refuses a
    call's: a strict prep reports the difference its check sees, and a difference
    only the compiler sees (such as a weak type), or any for a non-strict prep,
    is compiled again."""
    check, strict = prep.check, prep.strict

    def rejected(f: Any, backend: Any, x: Any, contexts: Sequence[Any], values: Sequence[Any]) -> Any:
        if strict:
            check(f, backend, x, contexts)
        with compiling_again():
            return program(x, *values)

    return rejected


class _Value:
    """A context's value, for :meth:`di.prep.base.Prep.explain_error` on the slow
    path (only the value is read there)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value
