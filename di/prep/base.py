"""The preparation object returned by every ``prepare_<operator>``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from di.contexts import Context
from di.errors import DIError, InvalidInputError
from di.families import ArraySpec, family_of, get_family, spec_of
from di.prep.finish import Finish, split_finish
from di.prep.info import NO_INFO, StrategyInfo
from di.prep.matching import key_function, matcher_for, one_family_matcher, same_selector
from di.prep.own_checks import ArgumentsRejected, checks_arguments, compiling_again
from di.prep.report import has_aux_error, other_point_error, refuse_arguments, refuse_tangents
from di.prep.signature import ArgumentCheck
from di.prep.traced import concrete, plain
from di.prep.traces import refuse_foreign_traces

if TYPE_CHECKING:
    from di.backends.selectors import AbstractBackend

__all__ = ["Prep"]


class Prep:
    """What ``prepare_<operator>`` returns: the programs for one operator family
    and the signature of the arguments they were built for.

    A prep holds the user's ``f``, the backend selector, the engine programs
    (compiled functions for compiled backends) and metadata (classes, shapes,
    dtypes, devices). It holds none of the caller's arrays. It is immutable after
    preparation except for bookkeeping counters, so one prep may be shared across
    threads.

    Attributes:
        operator: the operator family it serves (``"gradient"`` serves
            ``gradient`` and ``value_and_gradient``).
        f: the function it was prepared for.
        backend: the selector it was prepared with.
        strict: whether each call checks its arguments against the signature.
        has_aux: whether ``f`` returns ``(y, aux)`` (see ``has_aux`` of the
            first-order operators); every call must say the same.
        info: what a strategy (:class:`di.AutoSparse`, :class:`di.AutoFastest`,
            ...) found at preparation, a :class:`di.prep.info.StrategyInfo`;
            :attr:`plan`, :attr:`sparsity` and :attr:`colors` read it.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x * x).sum()
        >>> prep = di.prepare_gradient(f, di.AutoFiniteDiff(), np.zeros(3))
        >>> prep
        Prep(gradient, AutoFiniteDiff(method='central', step=None), x=numpy float64 (3,), strict=True)
    """

    __slots__ = (
        "_context_matchers",
        "_explain_failure",
        "_n_contexts",
        "_traces",
        "_values_matcher",
        "_x_fields",
        "_x_matcher",
        "backend",
        "checks",
        "f",
        "has_aux",
        "info",
        "operator",
        "programs",
        "runners",
        "same_point",
        "strict",
        "tangent_check",
        "tangent_matchers",
        "x_is_float",
        "x_spec",
    )

    def __init__(
        self,
        operator: str,
        f: Callable[..., Any],
        backend: AbstractBackend,
        x: Any,
        contexts: Sequence[Context],
        programs: dict[str, Callable[..., Any]],
        strict: bool,
        tangents: tuple[Any, ...] | None = None,
        tangent_label: str = "tx",
        same_point: Callable[[Any, Sequence[Any]], bool] | None = None,
        info: StrategyInfo = NO_INFO,
        has_aux: bool = False,
        explain_failure: Callable[..., str] | None = None,
        traces: tuple[AbstractBackend, tuple[str, ...]] | None = None,
    ) -> None:
        self.operator = operator
        # (the engine's selector, what it takes): which traced values a failed call names
        # (refuse_foreign_traces); a strict check matches an autograd box by the array inside
        self._traces = traces
        # explain_failure(x, values, tangents) -> why these arguments failed the program
        # ("" when it cannot tell): asked only when a program raises
        self._explain_failure = explain_failure
        self.has_aux = has_aux
        self.f = f
        self.backend = backend
        self.strict = strict
        self.programs = programs
        family = family_of(x)
        self.x_spec: ArraySpec | None = spec_of(x) if family is not None else None
        self.x_is_float = isinstance(x, float)  # its results are 0-d NumPy float64 arrays, writable
        x_check = ArgumentCheck.of("x", x)
        context_checks = [ArgumentCheck.of(f"context {i}", c.value, type(c)) for i, c in enumerate(contexts, start=1)]
        self.checks = (x_check, *context_checks)
        self._x_matcher = x_check.matcher
        self._x_fields: tuple[Any, Any, Any] | None = None if family is None else get_family(family).fields(plain(x))
        self._n_contexts = len(contexts)
        self._context_matchers = tuple((check.wrapper, check.matcher) for check in context_checks)
        # two or more context values of one family: compared in one loop of their family
        self._values_matcher = one_family_matcher([plain(c.value) for c in contexts]) if len(contexts) > 1 else None
        self.tangent_check = None if tangents is None else ArgumentCheck.of(tangent_label, tangents)
        self.tangent_matchers = (
            () if tangents is None else tuple(matcher_for(plain(t), key_function(plain(t))) for t in tangents)
        )
        self.same_point = same_point
        self.info = info
        self.runners = {name: self._runner(program) for name, program in programs.items()}

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise InvalidInputError(
            f"a prep cannot be pickled: it holds the programs {self.backend!r} built in this process (compiled "
            f"code, closures over f). Pickle the selector (and f, if it pickles) instead and prepare in each "
            f"process, di.prepare_{self.operator}(f, backend, x, ...)."
        )

    def __copy__(self) -> Prep:
        # (copy's default goes through __reduce_ex__, which refuses pickling)
        prep = object.__new__(self.__class__)
        for name in Prep.__slots__:
            setattr(prep, name, getattr(self, name))
        return prep

    def __deepcopy__(self, memo: dict[int, Any]) -> Prep:
        prep = object.__new__(self.__class__)
        memo[id(self)] = prep
        for name in Prep.__slots__:
            setattr(prep, name, copy.deepcopy(getattr(self, name), memo))
        return prep

    def __repr__(self) -> str:
        return f"Prep({self.operator}, {self.backend!r}, x={self.checks[0].description}, strict={self.strict})"

    def with_backend(self, backend: AbstractBackend, info: StrategyInfo | None = None) -> Prep:
        """A copy of this prep that answers to another selector: calls pass
        ``backend`` and run this prep's programs, checks and all. It shares every
        attribute with this prep except ``backend``, the runners (which check the
        selector) and, when given, ``info``. Strategies hand out the prep of the
        backend they chose or wrap this way.

        Examples:
            >>> import numpy as np, di
            >>> f = lambda x: (x * x).sum()
            >>> prep = di.prepare_gradient(f, di.AutoFiniteDiff(), np.zeros(2))
            >>> other = di.AutoFiniteDiff(method="forward")
            >>> di.gradient(f, prep.with_backend(other), other, np.array([1.0, 2.0])).round(6)
            array([2., 4.])
        """
        prep = copy.copy(self)
        prep.backend = backend
        if info is not None:
            prep.info = info
        prep.runners = {name: prep._runner(program) for name, program in self.programs.items()}
        return prep

    @property
    def plan(self) -> Any:
        """For a prep made with :class:`di.AutoFastest`: the :class:`di.plan.Plan`
        saying which candidate backend it runs and why; ``None`` otherwise."""
        return self.info.plan

    @property
    def sparsity(self) -> Any:
        """For an :class:`di.AutoSparse` jacobian or hessian prep: the sparsity pattern
        it computes (a boolean ``scipy.sparse.csr_array`` of shape ``(f(x).size,
        x.size)``); ``None`` for other preps."""
        return self.info.sparsity

    @property
    def colors(self) -> int | None:
        """For an :class:`di.AutoSparse` jacobian or hessian prep: the number of colors,
        i.e. of pushforwards, pullbacks or hvps per call; ``None`` for other preps."""
        return self.info.colors

    def check(self, f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> None:
        """Check a call's arguments against the prepared signature.

        Costs a few hundred nanoseconds: it compares precomputed tuples. A
        ``strict=False`` prep asks it only when ``f`` or the backend differ.

        Raises:
            PreparationMismatchError: with one line per argument.
            InvalidInputError: a raw value where a context is expected.
        """
        try:
            # An engine's traced value that is no array (autograd's boxes) is compared
            # by the array inside: a prep made outside its transform serves calls inside.
            if (
                f is self.f
                and same_selector(backend, self.backend)
                and (self._x_matcher(x) or self._x_matcher(concrete(x)))
                and len(contexts) == self._n_contexts
            ):
                for context, (wrapper, matches) in zip(contexts, self._context_matchers):
                    value = context.value  # type: ignore[attr-defined]
                    if context.__class__ is not wrapper or not (matches(value) or matches(concrete(value))):
                        break
                else:
                    return
        except Exception:  # a key function failing means the argument differs
            pass
        prepared = {"f": self.f, "backend": self.backend}
        refuse_arguments(self.operator, self.checks, prepared, self.strict, f, backend, x, contexts)

    def _runner(self, program: Callable[..., Any]) -> Callable[..., Any]:
        """``run(f, backend, x, contexts)``: the strict check, the program and the
        conversion of its result for the caller (see :func:`finished`) in one
        closure, specialised at preparation (the hot path of a prepared call).
        Operators with tangents call the program themselves."""
        if self.same_point is not None:
            return program
        checked = checks_arguments(program)
        program, finish = split_finish(program)
        f0, backend0, x_matches = self.f, self.backend, self._x_matcher
        context_matchers, count, strict, fail = self._context_matchers, self._n_contexts, self.strict, self.check
        if self.tangent_check is not None:
            return self._tangent_runner(program, finish)
        if checked and self.x_spec is None:
            return self._checked_by_program(program, finish)

        if count == 0:
            # x compared inline when its family's matcher is class, shape and dtype (a
            # Python call fewer), else by the matcher
            inline = self._x_fields is not None
            cls, shape, dtype = self._x_fields or (None, None, None)

            def run_without_contexts(f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Any:
                if strict:
                    try:
                        ok = f is f0 and (backend is backend0 or backend == backend0) and not contexts
                        if inline:
                            ok = ok and x.__class__ is cls and x.shape == shape and x.dtype == dtype
                        else:
                            ok = ok and x_matches(x)
                    except Exception:
                        ok = False
                    if not ok:
                        fail(f, backend, x, contexts)
                        x = plain(x)  # (accepted as the class the program was made for: a memmap as an ndarray)
                elif f is not f0 or not (backend is backend0 or same_selector(backend, backend0)):
                    fail(f, backend, x, contexts)  # (not strict: another f or backend is still refused)
                if finish is None:
                    return program(x)
                return finish(program(x))

            return run_without_contexts

        if count == 1:
            ((wrapper1, matches1),) = context_matchers

            def run_with_one_context(f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Any:
                if strict:
                    try:
                        ok = f is f0 and (backend is backend0 or backend == backend0) and len(contexts) == 1
                        ok = ok and x_matches(x) and contexts[0].__class__ is wrapper1
                        ok = ok and matches1(contexts[0].value)
                    except Exception:
                        ok = False
                    if not ok:
                        fail(f, backend, x, contexts)
                        result = program(plain(x), plain(contexts[0].value))  # (as above)
                        return result if finish is None else finish(result)
                elif f is not f0 or not (backend is backend0 or same_selector(backend, backend0)):
                    fail(f, backend, x, contexts)  # (as above)
                if finish is None:
                    return program(x, contexts[0].value)
                return finish(program(x, contexts[0].value))

            return run_with_one_context

        # Values that are arrays of one family: the wrappers compared as one list, the
        # values in one loop of their family (torch reads each tensor's fields inline);
        # otherwise one loop over both.
        wrappers, values_match = [wrapper for wrapper, _ in context_matchers], self._values_matcher

        def run(f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Any:
            if strict:
                try:
                    ok = f is f0 and (backend is backend0 or backend == backend0) and len(contexts) == count
                    if values_match is None:
                        ok = ok and x_matches(x) and _contexts_match(contexts, context_matchers)
                    else:
                        values = [context.value for context in contexts]
                        ok = ok and list(map(type, contexts)) == wrappers and x_matches(x) and values_match(values)
                except Exception:
                    ok = False
                if not ok:
                    fail(f, backend, x, contexts)
                    result = program(plain(x), *[plain(context.value) for context in contexts])  # (as above)
                    return result if finish is None else finish(result)
            elif f is not f0 or not (backend is backend0 or same_selector(backend, backend0)):
                fail(f, backend, x, contexts)  # (as above)
            if values_match is None or not strict:
                values = [context.value for context in contexts]
            result = program(x, *values)
            return result if finish is None else finish(result)

        return run

    def _checked_by_program(self, program: Callable[..., Any], finish: Finish | None) -> Callable[..., Any]:
        """The runner of a program that compares a pytree ``x`` with the prepared one
        itself (an ahead-of-time compiled executable): the strict check compares the
        rest, and a refused ``x`` gets the mismatch report (strict) or a new compile."""
        f0, backend0, strict, fail = self.f, self.backend, self.strict, self.check
        # The program compares the context values too (they are its arguments): the
        # check here is their wrappers'.
        wrappers, count = tuple(wrapper for wrapper, _ in self._context_matchers), self._n_contexts

        # The executable itself when the program exposes it (a Python call fewer): it
        # refuses other arguments with a TypeError, which the program turns into
        # ArgumentsRejected (or, within compiling_again, into a new compile).
        executable = getattr(program, "executable", None)
        refused: tuple[type[Exception], ...]
        if executable is not None:
            call, refused = executable, (TypeError, ArgumentsRejected)
        else:
            call, refused = program, (ArgumentsRejected,)

        def rejected(f: Any, backend: Any, x: Any, contexts: Sequence[Any], values: Sequence[Any]) -> Any:
            if strict:
                fail(f, backend, x, contexts)  # the report, when an argument differs as the check sees it
            with compiling_again():  # (a difference only the compiler sees, such as a weak type)
                return program(x, *values)

        def run_checked_by_program(f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Any:
            # f and the backend compared strict or not; the contexts' wrappers when strict
            if not (f is f0 and (backend is backend0 or same_selector(backend, backend0))) or (
                strict
                and not (
                    len(contexts) == count
                    and all(context.__class__ is wrapper for context, wrapper in zip(contexts, wrappers))
                )
            ):
                fail(f, backend, x, contexts)
            values = [context.value for context in contexts]
            try:
                result = call(x, *values)
            except refused:
                result = rejected(f, backend, x, contexts, values)
            return result if finish is None else finish(result)

        if count == 0:  # the common case, unrolled: no generator, no list of values

            def run_without_contexts_checked_by_program(f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Any:
                if contexts:  # contexts the prep was not made with: the general runner's answer
                    return run_checked_by_program(f, backend, x, contexts)
                if f is not f0 or not (backend is backend0 or same_selector(backend, backend0)):
                    fail(f, backend, x, contexts)  # (strict or not)
                try:
                    result = call(x)
                except refused:
                    result = rejected(f, backend, x, contexts, ())
                return result if finish is None else finish(result)

            return run_without_contexts_checked_by_program

        if count == 1:
            (wrapper1,) = wrappers

            def run_with_one_context_checked_by_program(f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Any:
                if not (f is f0 and (backend is backend0 or same_selector(backend, backend0))) or (
                    strict and not (len(contexts) == 1 and contexts[0].__class__ is wrapper1)
                ):
                    fail(f, backend, x, contexts)
                value = contexts[0].value
                try:
                    result = call(x, value)
                except refused:
                    result = rejected(f, backend, x, contexts, (value,))
                return result if finish is None else finish(result)

            return run_with_one_context_checked_by_program
        return run_checked_by_program

    def _tangent_runner(self, program: Callable[..., Any], finish: Finish | None) -> Callable[..., Any]:
        """``run(f, backend, x, tangents, contexts)`` for operators with tangents:
        the same one-closure hot path, the tangents checked element by element."""
        f0, backend0, x_matches = self.f, self.backend, self._x_matcher
        context_matchers, count, strict = self._context_matchers, self._n_contexts, self.strict
        tangent_matchers = self.tangent_matchers
        n_tangents = len(tangent_matchers)
        explain = self._explain
        if n_tangents == 1 and count == 0:  # the common case, unrolled: no generator, no context list
            ((tangent_matches),) = tangent_matchers

            def run_with_one_tangent(f: Any, backend: Any, x: Any, tangents: Any, contexts: Sequence[Any]) -> Any:
                if tangents.__class__ is not tuple:
                    self._refuse(f, backend, x, tangents, contexts)
                if strict:
                    try:
                        ok = f is f0 and (backend is backend0 or backend == backend0) and not contexts
                        ok = ok and x_matches(x) and len(tangents) == 1 and tangent_matches(tangents[0])
                    except Exception:
                        ok = False
                    if not ok:
                        self._refuse(f, backend, x, tangents, contexts)
                        x, tangents = plain(x), tuple(plain(t) for t in tangents)  # (as the runners above)
                elif f is not f0 or not (backend is backend0 or same_selector(backend, backend0)):
                    self.check(f, backend, x, contexts)  # (not strict: another f or backend is still refused)
                try:
                    result = program(x, tangents)
                except Exception as error:
                    explain(error, x, tangents, contexts)
                    raise
                return result if finish is None else finish(result)

            return run_with_one_tangent

        def run_with_tangents(f: Any, backend: Any, x: Any, tangents: Any, contexts: Sequence[Any]) -> Any:
            if tangents.__class__ is not tuple:
                self._refuse(f, backend, x, tangents, contexts)
            if strict:
                try:
                    ok = f is f0 and (backend is backend0 or backend == backend0) and len(contexts) == count
                    ok = ok and x_matches(x) and len(tangents) == n_tangents
                    ok = ok and all(matches(t) for t, matches in zip(tangents, tangent_matchers))
                    ok = ok and _contexts_match(contexts, context_matchers)
                except Exception:
                    ok = False
                if not ok:
                    self._refuse(f, backend, x, tangents, contexts)
                    x, tangents = plain(x), tuple(plain(t) for t in tangents)  # (as the runners above)
                    contexts = [_Value(plain(context.value)) for context in contexts]
            elif f is not f0 or not (backend is backend0 or same_selector(backend, backend0)):
                self.check(f, backend, x, contexts)  # (as above)
            try:
                result = program(x, tangents, *[context.value for context in contexts])
            except Exception as error:
                explain(error, x, tangents, contexts)
                raise
            return result if finish is None else finish(result)

        return run_with_tangents

    def refuse_foreign_traces(
        self, x: Any, tangents: Any, contexts: Sequence[Any], error: BaseException | None = None
    ) -> None:
        """On a failed call's path (``error``, the check's or the engine's): refuse
        an argument traced by another engine's transform as preparation refuses it
        (the strict check matches an autograd box by the array inside, a torch.func
        tensor by its class, and lets it through to the engine).

        Raises:
            InvalidInputError: naming the argument, the transform and what to do,
                chained to ``error``.
        """
        if self._traces is None:
            return
        label = "tx" if self.tangent_check is None else self.tangent_check.label
        tangents = tangents if isinstance(tangents, (tuple, list)) else ()
        arguments = [("x", x), *((f"{label}[{i}]", t) for i, t in enumerate(tangents))]
        arguments += [(f"context {i}", getattr(c, "value", c)) for i, c in enumerate(contexts, start=1)]
        try:
            refuse_foreign_traces(*self._traces, arguments)
        except InvalidInputError as refusal:
            raise refusal from error
        except Exception:  # an argument it cannot look into (one holding itself): the call's error says why
            return

    def _explain(self, error: Exception, x: Any, tangents: Any, contexts: Sequence[Any]) -> None:
        """On the failure path of a call with tangents: raise
        :class:`InvalidInputError` (chained to the engine's ``error``) when the
        arguments explain it (cotangents no longer shaped like ``f``'s output,
        whose shape an int ``Constant`` can change); else return, and the
        engine's error comes through. ``di``'s own errors are left as they are."""
        if self._explain_failure is None or isinstance(error, DIError):
            return
        message = self._explain_failure(x, [context.value for context in contexts], tangents)
        if message:
            raise InvalidInputError(message) from error

    def _refuse(self, f: Any, backend: Any, x: Any, tangents: Any, contexts: Sequence[Any]) -> None:
        """Raise the error that explains why a call with tangents does not fit."""
        assert self.tangent_check is not None
        label = self.tangent_check.label
        if not isinstance(tangents, (tuple, list)):
            raise InvalidInputError(
                f"{label} must be a tuple of arrays for {self.operator} (one result per element), not "
                f"{type(tangents).__name__}; pass a single one as a tuple of one, (v,)."
            )
        if self.strict:
            self.check(f, backend, x, contexts)
            self.check_tangents(tangents)
        if tangents.__class__ is not tuple:
            raise InvalidInputError(f"{label} must be a tuple, not a {type(tangents).__name__}: pass tuple({label}).")

    def check_tangents(self, tangents: Any) -> None:
        """Check the tangents (or cotangents) of a call against the prepared ones.

        Raises:
            InvalidInputError: one holds complex numbers or no numbers.
            PreparationMismatchError: their number, family, shape or dtype differ.
        """
        check = self.tangent_check
        if check is None or check.matches(tangents):
            return
        if isinstance(tangents, tuple) and check.matches(tuple(concrete(t) for t in tangents)):
            return  # traced tangents (autograd's boxes), compared by the arrays inside
        refuse_tangents(self.operator, check, {"f": self.f, "backend": self.backend}, tangents)

    def check_same_point(self, x: Any, contexts: Sequence[Any]) -> None:
        """For same-point preps: refuse another ``x`` or other ``Constant`` values.

        Raises:
            PreparationMismatchError: the point differs (compared by value).
        """
        if self.same_point is not None and not self.same_point(x, contexts):
            raise other_point_error(self.operator)

    def check_has_aux(self, has_aux: Any) -> None:
        """Refuse a call whose ``has_aux`` differs from the prepared one (the
        programs, and the shape of their results, depend on it). Checked on every
        call, strict or not.

        Raises:
            PreparationMismatchError: with a ``has_aux`` row.
        """
        if bool(has_aux) != self.has_aux:
            raise has_aux_error(self.operator, self.has_aux, bool(has_aux))

    def check_operator(self, operator: str) -> None:
        """Refuse a prep made for another operator family."""
        if self.operator != operator:
            tangents = {"pushforward": "tx, ", "pullback": "ty, ", "hvp": "tx, "}.get(operator, "")
            raise InvalidInputError(
                f"this prep was made by prepare_{self.operator}, not prepare_{operator}; "
                f"call di.prepare_{operator}(f, backend, x, {tangents}*contexts) for {operator}."
            )


class _Value:
    """A context's value, for the program call of a runner's slow path (only the
    value is read there)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _contexts_match(contexts: Sequence[Any], matchers: Sequence[tuple[type | None, Any]]) -> bool:
    """Whether each context has the prepared wrapper class and a matching value."""
    for context, (wrapper, matches) in zip(contexts, matchers):
        if context.__class__ is not wrapper or not matches(context.value):  # type: ignore[attr-defined]
            return False
    return True
