"""Every operator function's body: the prepared fast path, written once.

``di.gradient(f, prep, backend, x, *contexts)`` and its seventeen siblings are
written in their operator modules as documented stubs; :func:`operator_function`
replaces each by its dispatcher, so a call enters one Python function before the
prep's runner. A prepared call of the right operator with no ``out=`` goes
straight to the prep's runner (its strict check and its program, one closure
specialised at preparation). An unprepared call tries the last cached prep
that served it, inline, then the rest of the implicit cache
(:mod:`di.operators.cache`). Everything else (``out=``, same-point preps, wrong
preps, and unprepared calls that the cache does not serve) takes
:func:`run_operator`, which checks and explains.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from di.backends.selectors import AbstractBackend, check_flag
from di.errors import InvalidInputError, PreparationMismatchError, type_label
from di.operators.cache import cached_prep, unprepared_call
from di.operators.prepare import check_tangents
from di.operators.table import OPERATORS
from di.prep.base import Prep
from di.prep.out import check_out, write_out
from di.prep.runners import Missed

__all__ = ["operator_function", "run_operator"]

F = TypeVar("F", bound=Callable[..., Any])


def operator_function(family: str) -> Callable[[F], F]:
    """Replace a documented stub of operator ``family`` by its dispatcher.

    The stub (``def gradient(f, *args, out=None, has_aux=False): ...``) gives
    the public function its name, signature (``inspect.signature`` follows
    ``__wrapped__``) and docstring; its body never runs. Keywords the stub does
    not declare are refused as Python would refuse them.

    Examples:
        >>> import numpy as np, di
        >>> from di.operators.call import operator_function
        >>> @operator_function("gradient")
        ... def gradient(f, *args, out=None, has_aux=False):
        ...     "The gradient."
        >>> gradient(lambda x: (x * x).sum(), di.AutoFiniteDiff(), np.array([1.0, 2.0])).round(6)
        array([2., 4.])
        >>> gradient.__doc__
        'The gradient.'
    """

    def replace(stub: F) -> F:
        name = stub.__name__
        keywords = inspect.signature(stub).parameters
        takes_out, takes_aux = "out" in keywords, "has_aux" in keywords
        lead = 3 if OPERATORS[family].tangents is None else 4

        def slow(f: Callable[..., Any], args: tuple[Any, ...], out: Any, has_aux: Any) -> Any:
            if out is not None and not takes_out:
                raise TypeError(f"{name}() got an unexpected keyword argument 'out'")
            if has_aux is not False and not takes_aux:
                raise TypeError(f"{name}() got an unexpected keyword argument 'has_aux'")
            return run_operator(family, name, f, args, out, has_aux)

        with_tangents = lead == 4
        least = lead - 1  # (an unprepared call's least number of arguments: the backend, x[, tangents])
        # One closure variable, a plain tuple read by index: each closure variable is copied into
        # the frame at every call, prepared or not, and an index of an exact tuple is the cheapest read.
        # Its order is fixed here, by name, and read below by these indices.
        call = unprepared_call(family, name, with_tangents, takes_aux, slow)
        unprepared = (call.memo, call.scoped, call.count_hit, call.used, call.failed, call.keyed)

        def dispatch(f: Callable[..., Any], *args: Any, out: Any = None, has_aux: Any = False) -> Any:
            # Both common calls come early in this code, before every other path: TensorFlow's
            # eager operations read the line of each frame on the stack, finding it by reading
            # the frame's line table from the start up to the frame's current instruction (about
            # 28 ns per byte per eager gradient at n = 1e3, measured on a synthetic frame: the
            # unprepared hit, when it came last, 575 bytes in, about 16 us of such a call).
            # Failure handling and the slow paths come after them.
            count = len(args)  # (read once: each len() call is a visible part of this path)
            if out is None and count >= least:
                first = args[0]
                if first.__class__ is Prep:
                    if (
                        count >= lead
                        and first.operator == family
                        and first.has_aux is has_aux
                        and first.same_point is None
                    ):
                        # (no slice without contexts: a slice object is made and freed at each call)
                        try:  # (free until something raises: the failure path only)
                            if with_tangents:
                                return first.runners[name](f, args[1], args[2], args[3], args[4:] if count > 4 else ())
                            return first.runners[name](f, args[1], args[2], args[3:] if count > 3 else ())
                        except Exception as error:
                            _explain_failure(first, name, args[1:], lead, error)
                            raise
                    # (another operator's prep, a same-point prep, has_aux differing: the slow path)
                else:
                    # unprepared: the last hit, inline (di.operators.cache.UnpreparedCall), then the keyed
                    # cache; unprepared = (memo, scoped, count_hit, used, failed, keyed), as built above
                    hit = unprepared[0][0]  # (selector, f's weak reference, has_aux, probe, token, entry)
                    if hit[0] is first and hit[1]() is f and hit[2] is has_aux and unprepared[1]():
                        try:
                            if not with_tangents:
                                result = hit[3](args[1], args[2:] if count > 2 else ())
                            else:
                                result = hit[3](args[1], args[2], args[3:] if count > 3 else ())
                        except Missed:
                            pass
                        except Exception as error:
                            unprepared[4](hit[5], args, error)
                            raise
                        else:
                            unprepared[2]()
                            try:
                                unprepared[3](hit[4])
                            except KeyError:  # (evicted meanwhile)
                                pass
                            return result
                    return unprepared[5](f, args, has_aux)
            return slow(f, args, out, has_aux)

        return functools.update_wrapper(dispatch, stub)  # type: ignore[return-value]

    return replace


def _explain_failure(prep: Prep, name: str, args: tuple[Any, ...], lead: int, error: Exception) -> None:
    """On a prepared call's failure path (its check or its program raised
    ``error``): raise the error its arguments explain, chained to ``error``, or
    return and let ``error`` through. ``args`` is ``(backend, x, [tangents,]
    *contexts)``.

    Raises:
        InvalidInputError: the backend is no selector (x and the backend swapped),
            or an argument is traced by another engine's transform.
    """
    backend = args[0]
    if not isinstance(backend, AbstractBackend):
        raise _not_a_selector(prep, name, backend, args[1] if len(args) > 1 else None) from error
    tangents, contexts = (args[2], args[3:]) if lead == 4 else (None, args[2:])
    prep.refuse_foreign_traces(args[1], tangents, contexts, error)


def _not_a_selector(prep: Prep, name: str, backend: Any, x: Any) -> InvalidInputError:
    """The error for a prepared call whose third argument is no backend selector."""
    swapped = isinstance(x, AbstractBackend)
    why = ": x and the backend look swapped" if swapped else ""
    return InvalidInputError(
        f"{name}(f, prep, backend, x, ...): argument 3, the backend, must be a backend selector such as "
        f"{prep.backend!r} (the prep's), not {type_label(backend)}{why}; call di.{name}(f, prep, "
        f"{prep.backend!r}, x, ...)."
    )


def _split_call(name: str, args: tuple[Any, ...]) -> tuple[Prep | None, Any, Any, tuple[Any, ...]]:
    """Split ``(prep, backend, x, *rest)`` or ``(backend, x, *rest)``.

    Raises:
        InvalidInputError: too few arguments, naming the missing one.
    """
    prepared = bool(args) and isinstance(args[0], Prep)
    given = args[1:] if prepared else args
    if len(given) < 2:
        if not given:
            missing = "backend and x are missing"
        elif isinstance(given[0], AbstractBackend):
            missing = "x is missing"
        else:  # (one argument that is no selector: x, the backend left out)
            missing = "backend is missing"
            if prepared:
                missing += f" (the prep's is {args[0].backend!r})"
        form = f"{name}(f, prep, backend, x, *contexts)" if prepared else f"{name}(f, backend, x, *contexts)"
        raise InvalidInputError(f"{form}: {missing}")
    return (args[0] if prepared else None), given[0], given[1], given[2:]


def run_operator(family: str, name: str, f: Callable[..., Any], args: tuple[Any, ...], out: Any, has_aux: Any) -> Any:
    """Run program ``name`` of operator ``family`` for a prepared or unprepared call.

    ``out`` receives the operator's own result (the last element of a
    ``value_and_*`` tuple, the first of a plain operator's ``(result, aux)``)
    after it has been checked against it.

    Raises:
        InvalidInputError: missing arguments, a prep of another operator, an
            unprepared call on a backend that serves prepared calls only.
        PreparationMismatchError: a strict prep called with other arguments.
        OutBufferError: ``out`` does not fit the result.
    """
    label = OPERATORS[family].tangents
    has_aux = check_flag(name, "has_aux", has_aux)  # bool("no") is True: a string would quietly mean yes
    prep, backend, x, rest = _split_call(name, args)
    if label is not None:
        if not rest:  # (two arguments where three are due: the backend left out, or the tangents)
            missing = label if isinstance(backend, AbstractBackend) else "backend"
            raise InvalidInputError(f"{name}(f, [prep,] backend, x, {label}, *contexts): {missing} is missing")
        tangents, contexts = rest[0], rest[1:]
    else:
        tangents, contexts = None, rest
    if prep is None:  # a cached prep these arguments fit, or a new one (di.operators.cache)
        if isinstance(tangents, list):
            tangents = tuple(tangents)
        prep = cached_prep(family, name, f, backend, x, tangents, contexts, has_aux)
    else:
        prep.check_operator(family)
        prep.check_has_aux(has_aux)
        if not isinstance(backend, AbstractBackend):
            raise _not_a_selector(prep, name, backend, x)
        if label is not None and not isinstance(tangents, (tuple, list)):
            check_tangents(tangents, label, family)  # raises: say to wrap it in a tuple
        try:
            if prep.strict:
                prep.check(f, backend, x, contexts)
                if label is not None:
                    prep.check_tangents(tangents)
                if prep.same_point is not None:
                    prep.check_same_point(x, contexts)
            elif not prep.serves(f, backend):
                prep.check(f, backend, x, contexts)  # (not strict: another f or backend is still refused)
        except PreparationMismatchError as error:
            prep.refuse_foreign_traces(x, tangents, contexts, error)  # what a traced argument's mismatch means
            raise
    if out is not None and family == "gradient":
        check_out(prep, out, name)  # shaped like x: refuse a bad buffer before computing
    program = prep.programs[name]
    values = [c.value for c in contexts]
    try:
        result = program(x, tangents, *values) if label is not None else program(x, *values)
    except Exception as error:
        prep.refuse_foreign_traces(x, tangents, contexts, error)  # (an unprepared call's were refused already)
        raise
    if out is None:
        return result
    if prep.has_aux and name == family:
        own, aux = result
        return _write_result(prep, out, name, own), aux
    return _write_result(prep, out, name, result)


def _write_result(prep: Prep, out: Any, name: str, result: Any) -> Any:
    """Check ``out`` against the operator's own result and copy it there."""
    if isinstance(result, tuple):
        check_out(prep, out, name, result[-1])
        return (*result[:-1], write_out(out, result[-1]))
    check_out(prep, out, name, result)
    return write_out(out, result)
