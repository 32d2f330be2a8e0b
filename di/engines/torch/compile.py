"""``torch.compile`` for ``AutoTorch(compile=True)``: compiling, graph breaks, recompiles.

Programs are compiled with ``fullgraph=True`` unless ``compile_options`` says
otherwise; a graph break under that default becomes a :class:`di.RecompileWarning`
and the program is compiled again with graph breaks. Each compiled program gets
its own dynamo cache and recompile count (``isolate_recompiles``, where torch has
it): ``di`` compiles closures whose code object every prep shares, and dynamo
counts per code object. Recompiles are watched with the shared policy
(:class:`di.backends.compile.RecompileWatch`): warnings from the second
unexpected recompile, and before the limit whatever the cause; at dynamo's limit
:class:`di.RecompileLimitError` says what to change, naming the limit dynamo hit
(:func:`limit_hit`). Each compiled program compiles a copy of its function's code
(:func:`own_code`): dynamo's overall cap counts compiles per code object. When
dynamo fails to trace (at preparation or at a recompile) or refuses to compile
again at a limit, the same program runs once uncompiled on the same arguments:
an error ``f`` raises there reaches the caller as ``f`` raised it (dynamo reports
it as its own "Observed exception"); only a program that runs eagerly gets
dynamo's refusal.
"""

from __future__ import annotations

import inspect
import operator
import os
import re
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from di.backends.compile import RecompileWatch, caller_stacklevel, compiled_on_first_use
from di.engines.torch import leaked_state
from di.engines.torch.selector import AutoTorch
from di.errors import InvalidInputError, RecompileLimitError, RecompileWarning, UnsupportedOperatorError
from di.pytrees.structure import nesting_depth

__all__ = [
    "FALLS_BACK",
    "ClosedOverNumpyError",
    "TorchCompiler",
    "TraceFailedError",
    "break_in_di",
    "limit_hit",
    "own_code",
    "specializing",
]

_ISOLATES_RECOMPILES = "isolate_recompiles" in inspect.signature(torch.compile).parameters
# dynamo records each failed guard under the compiled function's code object: di
# compares the record's length before and after a call to see recompiles.
_GUARD_FAILURES: Any = getattr(torch._dynamo.utils, "guard_failures", None)
_RECOMPILE_LIMIT_HIT: type[BaseException] = getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", RuntimeError)
_SKIPPED_FRAMES = ("di", "torch")  # warnings point past di's frames and torch's compiled wrappers
UNSUPPORTED: type[BaseException] = torch._dynamo.exc.Unsupported
"""What dynamo raises when it cannot trace a function as one graph."""
DYNAMO_ERROR: type[BaseException] = torch._dynamo.exc.TorchDynamoException
"""The base of what dynamo raises when it cannot trace a call (an exception ``f``
raised while traced comes out as one of these)."""
RECURSION_LIMITS: tuple[type[BaseException], ...] = (RecursionError, DYNAMO_ERROR)
"""What dynamo raises when tracing exhausts Python's recursion (its own error
around a ``RecursionError``, or that error itself)."""


_NUMPY_GUARD = re.compile(r"Guard failed on the same frame it was created.*tensor '___from_numpy\((.*?)\)'", re.S)
"""dynamo's failure on a NumPy array ``f`` reads from a global or a closure inside a
``torch.func`` transform: the tensor it builds from the array there carries the
transform's dispatch keys, which its own guard then refuses (torch's bug, also
for ``torch.compile(torch.func.grad(f))`` without ``di``)."""


class ClosedOverNumpyError(UnsupportedOperatorError):
    """A ``torch.func`` transform of an ``f`` that reads a NumPy array it closes
    over cannot be compiled (:data:`_NUMPY_GUARD`). The reverse-mode programs
    compile ``f`` alone instead, which dynamo traces; the others raise it."""


class TraceFailedError(UnsupportedOperatorError):
    """dynamo failed tracing a call that runs uncompiled (an error of its own
    fake tensors, not of ``f``: a ``torch.func`` transform of some ``f`` gives
    ``autograd.grad`` a gradient on the meta device). The reverse-mode programs
    compile ``f`` alone instead; the others raise it, chained to dynamo's error."""


_FAKE_TENSOR_REASON = re.compile(r"\): got (\w+\(.*\))\s*$", re.M)
"""The error dynamo's fake tensors raised, as its ``TorchRuntimeError`` quotes it."""


FALLS_BACK: tuple[type[BaseException], ...] = (UNSUPPORTED, ClosedOverNumpyError, TraceFailedError)
"""dynamo's refusals of a ``torch.func`` transform of ``f`` after which ``f``
compiled alone and differentiated eagerly still runs."""


_DEEP = 20  # an x nested this deep is named as the likely cause (dynamo stops near 50)


def _ran_out_of_recursion(error: BaseException) -> bool:
    return any(isinstance(e, RecursionError) for e in (error, error.__cause__, error.__context__))


class TorchCompiler:
    """``torch.compile`` with the selector's options, and the watch on its recompiles.

    Args:
        selector: the ``AutoTorch(compile=True, ...)`` selector.
    """

    def __init__(self, selector: AutoTorch) -> None:
        self.selector = selector

    def options(self) -> dict[str, Any]:
        """``torch.compile``'s keyword arguments: the selector's, with ``fullgraph=True``
        and ``isolate_recompiles=True`` unless it says otherwise."""
        options = self.selector.compile_kwargs
        options.setdefault("fullgraph", True)
        if _ISOLATES_RECOMPILES:
            options.setdefault("isolate_recompiles", True)
        return options

    def compile_now(
        self,
        function: Callable[..., Any],
        warm_up: Callable[[Callable[..., Any]], Any],
        static_argnums: tuple[int, ...] = (),
        graph_breaks: bool = True,
        x: Any = None,
        operator: str | None = None,
    ) -> tuple[Callable[..., Any], dict[str, Any]]:
        """``torch.compile(function)``, compiled now by ``warm_up(compiled)``, watched
        for recompiles; and the options it was compiled with. A graph break under
        the default ``fullgraph=True`` becomes a :class:`di.RecompileWarning`, and
        ``function`` is compiled with graph breaks.

        ``static_argnums``: the arguments of ``function`` that are compiled in, so
        that compiling for a new value of one is not taken for a recompile.
        ``graph_breaks=False``: ``function`` cannot run with graph breaks (a
        ``torch.func`` transform of ``f``), so dynamo's refusal is raised as is.
        ``x``: the prepared ``x``, named in the error for one nested deeper than
        dynamo traces. ``operator``: the operator whose program ``function`` is, named
        in the errors (``None``: ``function`` is ``f`` alone).

        When dynamo fails, ``warm_up(function)`` runs the uncompiled function on
        the same arguments first: what ``f`` raises there reaches the caller
        unchanged (its type, message and traceback, nothing chained).

        Raises:
            InvalidInputError: dynamo ran out of Python recursion tracing the call
                (it follows nested containers recursively: an ``x`` nested about
                50 levels deep), with dynamo's error as its cause.
            TraceFailedError: dynamo failed otherwise than refusing a graph break
                (its fake tensors' error) on a call that runs uncompiled, with
                dynamo's error as its cause; a :class:`di.UnsupportedOperatorError`."""
        options = self.options()
        fullgraph_default = "fullgraph" not in self.selector.compile_kwargs
        traced = own_code(specializing(function, static_argnums))
        compiled = torch.compile(traced, **options)
        # dynamo's warnings while it traces are held back: where the trace fails and the
        # eager run raises (di's own refusal of f's output, whose message formats the
        # selector's dataclass repr with _thread.get_ident, which dynamo warns it cannot
        # trace), they describe a trace nobody will use, printed before the real error.
        # (The caller's filters still apply; like any catch_warnings, this is process-wide
        # for the time of the trace.)
        held = warnings.catch_warnings(record=True)
        caught = held.__enter__()
        try:
            with _specialized_to_the_prep():
                leaked_state.restoring(warm_up)(compiled)
        except RECURSION_LIMITS as err:
            failure: BaseException | None = err
        except AssertionError as err:
            found = _NUMPY_GUARD.search(str(err))
            if found is None:
                raise
            raise ClosedOverNumpyError(
                f"{self.selector!r}: torch.compile cannot trace a torch.func transform of an f that reads a NumPy "
                f"array it closes over (dynamo's source: {found.group(1)}; torch's own bug, which fails its guard "
                f"on the array). Pass the array as a di.Constant (f receives it as a tensor, traced) or as a torch "
                f"tensor, or use AutoTorch() (eager)."
            ) from err
        else:
            failure = None
        finally:
            held.__exit__(None, None, None)
        if failure is not None:
            # handled outside the except clause: an error f raises below has nothing chained onto it
            self.raise_own_error(failure, lambda: warm_up(function), x)
        _replay(caught)
        if failure is not None:
            if not isinstance(failure, UNSUPPORTED):
                raise self.trace_failed_error(operator, failure) from failure
            if not (fullgraph_default and graph_breaks):
                raise failure
            reason = str(failure).strip().splitlines()[0]
            own = break_in_di(failure)
            if own:
                advice = (
                    f"The break is in di's own code ({own}), not in f: please report it. Pass "
                    f"compile_options={{'fullgraph': False}} to accept graph breaks silently."
                )
            else:
                advice = (
                    "Remove the data-dependent Python control flow, or pass compile_options={'fullgraph': False} "
                    "to accept graph breaks silently."
                )
            warnings.warn(
                f"{self.selector!r}: f cannot be compiled as one graph ({reason}); it runs with graph breaks, "
                f"partly eagerly. {advice}",
                RecompileWarning,
                stacklevel=caller_stacklevel(_SKIPPED_FRAMES),
            )
            options["fullgraph"] = False
            compiled = torch.compile(traced, **options)
            try:
                with _specialized_to_the_prep():
                    leaked_state.restoring(warm_up)(compiled)
            except RECURSION_LIMITS as err:
                if not _ran_out_of_recursion(err):
                    raise
                raise self.too_deep_error(x) from err
        return self.watching(compiled, traced, static_argnums, options), options

    def raise_own_error(self, failure: BaseException, run_eagerly: Callable[[], Any], x: Any) -> None:
        """After dynamo's ``failure`` to trace a call: raise the error ``f`` raises
        when the call runs uncompiled (``run_eagerly()``), unchanged, if it raises
        one; :class:`di.InvalidInputError` if dynamo ran out of Python recursion;
        else return, for the caller to report dynamo's refusal. Call it outside an
        ``except`` clause, so that nothing is chained onto ``f``'s error."""
        if _ran_out_of_recursion(failure):
            raise self.too_deep_error(x) from failure
        run_eagerly()

    def trace_failed_error(self, operator: str | None, failure: BaseException) -> TraceFailedError:
        """The error for dynamo's ``failure`` to trace a call that ran uncompiled
        (``operator``'s program, or ``f`` alone for ``None``)."""
        quoted = _FAKE_TENSOR_REASON.search(str(failure))
        reason = quoted.group(1) if quoted else str(failure).strip().splitlines()[0]
        what = "f" if operator is None else f"{operator} of f"
        return TraceFailedError(
            f"{self.selector!r}: torch.compile failed tracing {what} at the prepared arguments ({reason}), although "
            f"the same call runs uncompiled: a failure of dynamo's own tracing, not of f. Use AutoTorch() (eager) "
            f"for this operator, or rewrite f around the operation dynamo fails on."
        )

    def too_deep_error(self, x: Any) -> InvalidInputError:
        """The error for a call dynamo could not trace for want of Python recursion."""
        depth = nesting_depth(x)
        nested = f"x nests {depth} containers deep" if depth >= _DEEP else "f, or what it calls, recurses deeply"
        return InvalidInputError(
            f"{self.selector!r}: torch.compile ran out of Python recursion tracing f at the prepared arguments "
            f"({nested}; dynamo follows containers and calls recursively, as torch.compile does on its own). "
            f"Use AutoTorch() (eager), which takes far deeper ones, or pass x as a flatter pytree (a dict of tensors)."
        )

    def one_graph_error(self, operator: str, error: BaseException) -> UnsupportedOperatorError:
        """The error for a ``torch.func`` program of ``operator`` that dynamo cannot
        compile as one graph (``error``, dynamo's): such a program cannot run with
        graph breaks."""
        reason = str(error).strip().splitlines()[0]
        own = break_in_di(error)
        if own:
            cause = f"the break is in di's own code ({own}), not in f: please report it"
        else:
            cause = "remove the data-dependent Python control flow from f"
        return UnsupportedOperatorError(
            f"{self.selector!r} cannot compile {operator} of f as one graph ({reason}): a torch.func transform "
            f"of f cannot run with graph breaks. To compile it, {cause}; or use AutoTorch() (eager), which runs "
            f"any f."
        )

    def compile_on_first_use(
        self, function: Callable[..., Any], options: dict[str, Any], static_argnums: tuple[int, ...] = ()
    ) -> Callable[..., Any]:
        """``torch.compile(function)`` with the options another program of the prep
        was compiled with, compiling on its first call (once, under a lock), that
        first trace specialized to the prep's signature as :meth:`compile_now`'s is
        (:func:`_specialized_to_the_prep`): traced with automatic dynamic shapes,
        after a prep of another size had compiled the same code, it took symbolic
        sizes, which forward mode's ``make_dual`` and ``f``'s own ``x.shape[0] // 2``
        could not take (an ``AutoSparse`` hessian failed inside dynamo)."""
        traced = own_code(specializing(function, static_argnums))
        compiled = torch.compile(traced, **options)
        watched = self.watching(compiled, traced, static_argnums, options)
        return compiled_on_first_use(watched, while_compiling=_specialized_to_the_prep)

    def watching(
        self,
        compiled: Callable[..., Any],
        function: Callable[..., Any],
        static_argnums: tuple[int, ...],
        options: dict[str, Any],
    ) -> Callable[..., Any]:
        """``compiled``, its recompiles reported to a :class:`RecompileWatch` (with
        dynamo's failing guard), and dynamo's hard stop at its recompile limit
        turned into :class:`di.RecompileLimitError`."""
        backend, failures_by_code, code = self.selector, _GUARD_FAILURES, getattr(function, "__code__", None)

        def limit() -> int:
            return int(options.get("recompile_limit") or torch._dynamo.config.recompile_limit)

        if failures_by_code is None or code is None:
            return compiled
        watch = RecompileWatch(backend, static_argnums, limit, skip=_SKIPPED_FRAMES, advice=grad_mode_advice)

        def watched(*args: Any) -> Any:
            # dynamo appends to its record for the compiled function's code object at each
            # recompile; looked up at each call (torch._dynamo.reset() replaces it), and read
            # without creating one: a record holds its code object until dynamo is reset.
            before = len(failures_by_code.get(code, ()))
            failure: BaseException
            try:
                result = compiled(*args)
            except DYNAMO_ERROR as err:  # a recompile failed: f may have raised while traced
                failure = err
            except _RECOMPILE_LIMIT_HIT as err:  # dynamo refused to compile again
                failure = err
            else:
                failures = failures_by_code.get(code, ())
                if len(failures) != before:
                    watch.recompiled(args, guard_reason(failures[before]))
                return result
            # f's own error first, as at any failed trace: the calls that led to the limit may
            # have failed in f (each counts toward dynamo's cap), and this one may fail the same way
            self.raise_own_error(failure, lambda: function(*args), args[0] if args else None)
            if isinstance(failure, _RECOMPILE_LIMIT_HIT):
                failures = failures_by_code.get(code, ())
                reason = guard_reason(failures[before]) if len(failures) > before else "unknown"
                raise self.limit_error(failure, reason, limit, bool(static_argnums)) from failure
            raise failure

        if options.get("backend") == "eager":  # (its failed graphs leave torch's state changed)
            return leaked_state.restoring(watched)
        return watched

    def limit_error(
        self, error: BaseException, reason: str, limit: Callable[[], int], static: bool
    ) -> RecompileLimitError:
        """The error for dynamo's refusal to compile a program again (``error``), naming
        the limit that refused it (:func:`limit_hit`) and what to do about it.
        ``reason``: the guard that failed; ``limit()``: the per-program limit in force;
        ``static``: whether the program has static contexts, compiled in per value."""
        name, value = limit_hit(error)
        backend = self.selector
        if name == "accumulated_recompile_limit":
            return RecompileLimitError(
                f"{backend!r}: torch.compile refused to compile f's program again: dynamo's cap on the compiles of "
                f"one program (torch._dynamo.config.accumulated_recompile_limit, {value}) is reached. It counts "
                f"every compile since the program was prepared, failed ones included (each call that failed while "
                f"traced, as at shapes f cannot take), and with fullgraph=True dynamo cannot fall back to eager. "
                f"The last guard that failed: {reason}. Prepare again (a new prep starts its own count), raise "
                f"torch._dynamo.config.accumulated_recompile_limit, or use AutoTorch() (eager)."
            )
        statics = (
            "A static context (an int, bool or string Constant) is compiled in, one program per value: pass "
            "di.Constant(value, static=False) for one that takes many values and is only used in arithmetic. "
            if static
            else ""
        )
        return RecompileLimitError(
            f"{backend!r}: torch.compile reached its recompile limit ({value or limit()}) for f, and with "
            f"fullgraph=True it cannot fall back to eager. The guard that failed at each call: {reason}. "
            f"{statics}Keep Python side effects out of f (a global call counter, attributes it modifies) and pass "
            f"values that change as contexts (di.Constant(value) is traced), or use AutoTorch() (eager); "
            f"compile_options={{'recompile_limit': n}} raises the limit."
        )


def grad_mode_advice(reason: str) -> str:
    """The advice for a recompile whose failed guard is the grad mode (a call under
    ``torch.no_grad()`` or ``torch.inference_mode()`` after one outside, or the
    other way round), or ``""`` for another guard.

    Examples:
        >>> from di.engines.torch.compile import grad_mode_advice
        >>> "no_grad" in grad_mode_advice("tensor 'x' dispatch key set mismatch. expected ...AutogradCPU...")
        True
        >>> grad_mode_advice("len(L['x']) == 3")
        ''
    """
    if "dispatch key set mismatch" not in reason and "grad_mode" not in reason.lower():
        return ""
    return (
        "The grad mode changed between calls: a call under torch.no_grad() or torch.inference_mode() after one "
        "outside (or the other way round) makes torch.compile compile f again for that mode, since the "
        "tensors it receives then carry no autograd. di's derivative is the same in every mode; keep the calls "
        "of one prep in one grad mode (call it outside torch.no_grad(), or prepare one prep per mode)."
    )


_LIMIT_HIT = re.compile(r"exceeding the (\w+) cache size limit \(currently set to (\d+)\)")
_LIMIT_TYPE = re.compile(r"Limit type: (\w+)")


def _replay(caught: list[warnings.WarningMessage]) -> None:
    """Warn again what :meth:`TorchCompiler.compile_now` held back while dynamo traced,
    now that the trace is used (the caller's filters decide, as they would have)."""
    for message in caught:
        warnings.warn_explicit(
            message.message, message.category, message.filename, message.lineno, source=message.source
        )


def limit_hit(error: BaseException) -> tuple[str, int | None]:
    """Which of dynamo's limits refused a compile (``error``, its
    ``FailOnRecompileLimitHit``): ``"recompile_limit"`` (per program, what
    ``compile_options={'recompile_limit': n}`` sets) or
    ``"accumulated_recompile_limit"`` (its cap on all compiles of one code object,
    failed ones included), with its value when dynamo says it. dynamo names it
    only in the message of the ``Unsupported`` error the refusal is raised from;
    without one, the per-program limit.

    Examples:
        >>> from di.engines.torch.compile import limit_hit
        >>> cause = RuntimeError("exceeding the accumulated_recompile_limit cache size limit (currently set to 256).")
        >>> error = RuntimeError("Hard failure due to fullgraph=True")
        >>> error.__cause__ = cause
        >>> limit_hit(error)
        ('accumulated_recompile_limit', 256)
    """
    seen: BaseException | None = error
    while seen is not None:
        text = str(seen)
        found = _LIMIT_HIT.search(text)
        if found is not None:
            return found.group(1), int(found.group(2))
        named = _LIMIT_TYPE.search(text)
        if named is not None:
            return named.group(1), None
        seen = seen.__cause__
    return "recompile_limit", None


def specializing(function: Callable[..., Any], static_argnums: tuple[int, ...]) -> Callable[..., Any]:
    """``function``, its static arguments' ints (alone or in tuples) compiled in as
    constants whatever dynamo's automatic dynamic shapes decided: from an int's
    second value on, dynamo passes it as a ``SymInt``, on which plain Python
    (``"%d" % n``, ``range(n)`` in a list, a dict key) fails or guards oddly.
    ``operator.index`` makes dynamo specialize it (a guard on its value), so each
    value is one compile, as for any static context. Traced only: the compiled
    program runs none of this Python; ``function`` itself when nothing is static.

    Examples:
        >>> from di.engines.torch.compile import specializing
        >>> specializing(lambda x, n: x * n, (1,))(2.0, 3)
        6.0
    """
    if not static_argnums:
        return function
    positions = frozenset(static_argnums)

    def specialized(*args: Any) -> Any:
        return function(*[_constant(a) if i in positions else a for i, a in enumerate(args)])

    return specialized


def _specialized_to_the_prep() -> Any:
    """dynamo's automatic dynamic shapes off while a prep's program is first traced.

    dynamo remembers the shapes each function was compiled for by its file, line
    and name (not by code object: :func:`own_code`'s copies share them), and marks
    a size dynamic once a second compile sees another value. Two preps of one ``f``
    at two sizes then compiled the second for symbolic sizes: a prep made for one
    signature traced as for any, and a ``di.DifferentiateWith`` inside ``f``
    (registered for concrete shapes) broke the graph. The first trace of a prep is
    specialized to its signature; later recompiles (a ``strict=False`` prep given
    another shape) follow torch's defaults.
    """
    return torch._dynamo.config.patch(automatic_dynamic_shapes=False)


def own_code(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with a code object of its own (a copy), for one compiled program.

    dynamo counts compiles per code object, failed ones included, against
    ``torch._dynamo.config.accumulated_recompile_limit`` (256), for the life of the
    process, and ``isolate_recompiles`` separates only the per-program limit. Every
    prep compiles closures of the same few code objects, so without a copy the
    257th program compiled in a process (a prep, a recompile, a call that failed
    while traced) was refused with that limit, whichever prep asked. A callable
    that is not a Python function is returned as it is.

    Examples:
        >>> from di.engines.torch.compile import own_code
        >>> def double(x):
        ...     return 2 * x
        >>> copy = own_code(double)
        >>> copy(3), copy.__code__ is double.__code__
        (6, False)
    """
    if type(function) is not types.FunctionType:
        return function
    code = function.__code__.replace()  # an equal, distinct code object
    cells = function.__closure__
    copy = types.FunctionType(code, function.__globals__, function.__name__, function.__defaults__, cells)
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = function.__qualname__
    copy.__dict__.update(function.__dict__)
    return copy


def _constant(value: Any) -> Any:
    """``value``, an int in it made a constant of the trace (see :func:`specializing`)."""
    kind = type(value)
    if kind is int or kind is torch.SymInt:
        return operator.index(value)
    if kind is tuple:
        return tuple(_constant(item) for item in value)
    return value


_DI_FOLDER = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def break_in_di(error: BaseException) -> str:
    """Where dynamo's graph break ``error`` happened (``"di/pytrees/structure.py:120 in
    unflatten"``) when it happened in ``di``'s own code rather than in ``f`` or a
    library ``f`` calls; ``""`` otherwise (or when dynamo does not say)."""
    stack = getattr(error, "real_stack", None) or []
    if not stack:
        return ""
    frame = stack[-1]  # the innermost frame dynamo was tracing
    filename = os.path.abspath(frame.filename)
    if not filename.startswith(_DI_FOLDER + os.sep):
        return ""
    return f"{os.path.relpath(filename, os.path.dirname(_DI_FOLDER))}:{frame.lineno} in {frame.name}"


def guard_reason(failure: str) -> str:
    """dynamo's record of a failed guard (``"0/3: G['T']['n'] == 3  # source ...``
    and a user stack) as one line: the guard and the source line it came from."""
    first = failure.strip().splitlines()[0] if failure.strip() else "unknown"
    return re.sub(r"\s{2,}", "  ", re.sub(r"^\[?\d+/\d+\]?:\s*", "", first))
