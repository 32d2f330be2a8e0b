"""The preparation object returned by every ``prepare_<operator>``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from di.contexts import Context
from di.errors import DIError, InvalidInputError
from di.families import ArraySpec, family_of
from di.prep.facts import ArgumentFacts
from di.prep.info import NO_INFO, StrategyInfo
from di.prep.matching import key_function, matcher_for, same_selector
from di.prep.report import has_aux_error, other_point_error, refuse_arguments, refuse_tangents
from di.prep.runners import Compared, runner
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
        "_explain_failure",
        "_traces",
        "backend",
        "checks",
        "context_tests",
        "f",
        "has_aux",
        "info",
        "operator",
        "programs",
        "runners",
        "same_point",
        "strict",
        "tangent_check",
        "tangent_tests",
        "x_is_float",
        "x_spec",
        "x_test",
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
        facts: ArgumentFacts | None = None,
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
        if facts is None:
            facts = ArgumentFacts.of(x, contexts)
        self.x_spec: ArraySpec | None = facts.x.spec
        self.x_is_float = isinstance(x, float)  # its results are 0-d NumPy float64 arrays, writable
        x_check = ArgumentCheck.of("x", x, facts=facts.x)
        context_checks = [
            ArgumentCheck.of(f"context {i}", c.value, type(c), value)
            for i, (c, value) in enumerate(zip(contexts, facts.values), start=1)
        ]
        self.checks = (x_check, *context_checks)
        # how the runners compare each argument with the prepared one (see di.prep.runners)
        self.x_test = Compared(facts.x.plain, x_check.matcher, facts.x.family)
        self.context_tests = tuple(
            (type(c), Compared(value.plain, check.matcher, value.family))
            for c, value, check in zip(contexts, facts.values, context_checks)
        )
        self.tangent_check = None if tangents is None else ArgumentCheck.of(tangent_label, tangents)
        self.tangent_tests = tuple(
            Compared(t, matcher_for(t, key_function(t)), family_of(t)) for t in map(plain, tangents or ())
        )
        self.same_point = same_point
        self.info = info
        self.runners = {name: runner(self, program) for name, program in programs.items()}

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
        prep.runners = {name: runner(prep, program) for name, program in self.programs.items()}
        return prep

    @property
    def plan(self) -> Any:
        """For a prep made with :class:`di.AutoFastest`: the :class:`di.fastest.plan.Plan`
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

    def serves(self, f: Any, backend: Any) -> bool:
        """Whether a call of ``f`` on ``backend`` may use this prep at all, strict or
        not: the prepared ``f`` and the prepared selector (or one equal to it). The
        runners make the same comparison inline (:mod:`di.prep.runners`).

        Examples:
            >>> import numpy as np, di
            >>> f = lambda x: (x * x).sum()
            >>> prep = di.prepare_gradient(f, di.AutoFiniteDiff(), np.zeros(2), strict=False)
            >>> prep.serves(f, di.AutoFiniteDiff()), prep.serves(f, di.AutoFiniteDiff(method="forward"))
            (True, False)
        """
        return f is self.f and same_selector(backend, self.backend)

    def check(self, f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> None:
        """Check a call's arguments against the prepared signature.

        Costs a few hundred nanoseconds: it compares precomputed tuples. A
        ``strict=False`` prep asks it only when ``f`` or the backend differ.

        Raises:
            PreparationMismatchError: with one line per argument.
            InvalidInputError: a raw value where a context is expected.
        """
        if self.serves(f, backend) and self.matches(x, contexts):
            return
        prepared = {"f": self.f, "backend": self.backend}
        refuse_arguments(self.operator, self.checks, prepared, self.strict, f, backend, x, contexts)

    def matches(self, x: Any, contexts: Sequence[Any], tangents: Any = None) -> bool:
        """Whether ``x``, the contexts and (for a prep with tangents, unless
        ``None``) the tangents fit the prepared signature, as a strict call
        compares them: what :meth:`check` asks once ``f`` and the backend are the
        prepared ones (tangents are :meth:`check_tangents`'), and what the
        implicit cache of unprepared calls asks of each prep it holds.

        Examples:
            >>> import numpy as np, di
            >>> prep = di.prepare_gradient(lambda x: (x * x).sum(), di.AutoFiniteDiff(), np.zeros(3))
            >>> prep.matches(np.ones(3), ()), prep.matches(np.ones(4), ()), prep.matches(np.ones(3, "f4"), ())
            (True, False, False)
        """
        try:
            # An engine's traced value that is no array (autograd's boxes) is compared
            # by the array inside: a prep made outside its transform serves calls inside.
            x_matches = self.x_test.matcher
            if not (x_matches(x) or x_matches(concrete(x))) or len(contexts) != len(self.context_tests):
                return False
            for context, (wrapper, test) in zip(contexts, self.context_tests):
                value = context.value
                if context.__class__ is not wrapper or not (test.matcher(value) or test.matcher(concrete(value))):
                    return False
            tests = self.tangent_tests
            if self.tangent_check is None or tangents is None:
                return True
            if tangents.__class__ is not tuple or len(tangents) != len(tests):
                return False
            for tangent, test in zip(tangents, tests):
                if not (test.matcher(tangent) or test.matcher(concrete(tangent))):
                    return False
            return True
        except Exception:  # a key function failing means the argument differs
            return False

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

    def explain_error(self, error: Exception, x: Any, tangents: Any, contexts: Sequence[Any]) -> None:
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

    def refuse_tangent_call(self, f: Any, backend: Any, x: Any, tangents: Any, contexts: Sequence[Any]) -> None:
        """Raise the error that explains why a call with tangents does not fit: tangents
        that are no tuple, or (strict) arguments that differ from the prepared ones."""
        assert self.tangent_check is not None
        label = self.tangent_check.label
        if not isinstance(tangents, (tuple, list)):
            raise InvalidInputError(
                f"{label} must be a tuple of arrays for {self.operator} (one result per element), not "
                f"{type(tangents).__name__}; pass a single one as a tuple of one, (v,)."
            )
        # (before the strict comparison: a list of the prepared tangents would otherwise read as
        # "made for other arguments", its structure differing)
        if tangents.__class__ is not tuple:
            raise InvalidInputError(f"{label} must be a tuple, not a {type(tangents).__name__}: pass tuple({label}).")
        if self.strict:
            self.check(f, backend, x, contexts)
            self.check_tangents(tangents)

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
