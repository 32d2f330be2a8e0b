"""The pieces of MLX programs: output rules, ``aux``, and the wrapper that makes
a program of a pure MLX function, eager or under ``mx.compile``
(:class:`ProgramMaker`).

A program converts the caller's inputs into MLX arrays (keeping float64: on the
CPU stream), runs the function and evaluates its results (``mx.eval``: MLX is
lazy, and a result handed back unevaluated would be computed later, by whoever
reads it, which makes timings lie). With ``AutoMLX(compile=True)`` the function
runs under ``mx.compile``, traced on its first call and again only for a new
shape or dtype; array and float contexts are inputs of the compiled function
(a new value runs the same program), the others (ints, strings, hashable
values: :func:`di.backends.compile.is_static_context`) are compiled in, one
compiled function per distinct value.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from di.backends.aux import AuxSplit, split_aux
from di.backends.compile import RecompileWatch, counting_static_values, is_static_context
from di.backends.outputs import OutputRules, is_real_floating_array, untraced_output_error
from di.backends.protocol import Program
from di.backends.selectors import AbstractBackend
from di.contexts import Cache, Context
from di.engines.mlx.family import FAMILY, mlx_dtype
from di.errors import InvalidInputError, InvalidOutputError, RecompileLimitError
from di.families import converter, family_of, get_family, identity

__all__ = [
    "RETRACE_LIMIT",
    "RULES",
    "AuxHolder",
    "ProgramMaker",
    "array_output",
    "as_mlx",
    "cast_like",
    "evaluated",
    "scalar_output",
]

RETRACE_LIMIT = 16
"""Traces of one compiled program (beyond its first) after which a call stops
with :class:`di.RecompileLimitError`: each is a compile of its own."""

_EVAL_IN_TRANSFORM = "Attempting to eval an array during function transformations"
_IN_TRANSFORM = "inside a graph transformation"


class _Rules(OutputRules):
    """MLX outputs: ``mx.array`` (one class, traced or not). Eagerly, MLX's
    transforms run on values, so ``float(x[0])`` and ``if x[0] > 0`` go through
    (the first silently drops a derivative, as in eager PyTorch); under
    ``mx.compile`` and ``mx.vmap`` they raise MLX's ``ValueError``."""

    traces = True
    conversion_errors = (ValueError,)

    def is_traced(self, y: Any, x: Any) -> bool:
        return isinstance(y, mx.array)

    def scalar(self, y: Any) -> Any:
        return mx.reshape(y, ())

    def accepts_array(self, y: Any) -> bool:
        return isinstance(y, mx.array) and is_real_floating_array(y)

    def translate(
        self, error: BaseException, backend: AbstractBackend, operator: str, values: Sequence[Any]
    ) -> BaseException | None:
        if _EVAL_IN_TRANSFORM not in str(error):
            return None
        base = untraced_output_error(None, backend, operator, "float(), .item(), .tolist() or an if on a value")
        return InvalidOutputError(
            f"{base} Under mx.compile and mx.vmap a NumPy call on x (np.asarray, np.sin) fails alike. For Python "
            f"control flow on values, use AutoMLX() (compile=False), which runs f op by op, or xp.where(cond, a, b)."
        )

    def foreign_output(self, y: Any) -> str:
        return "numpy" if isinstance(y, (np.ndarray, np.generic)) else ""


RULES = _Rules()

_FLOATING = frozenset({mx.float16, mx.bfloat16, mx.float32, mx.float64})


def scalar_output(y: Any) -> bool:
    """The common output of gradient, hvp and hessian, told at once: a 0-d
    floating MLX array (anything else gets the full check)."""
    return y.__class__ is mx.array and y.ndim == 0 and y.dtype in _FLOATING


def array_output(y: Any) -> bool:
    """The common output of the other operators: a floating MLX array of at least
    one dimension (a 0-d one gets the full check, which makes it a scalar)."""
    return y.__class__ is mx.array and y.ndim > 0 and y.dtype in _FLOATING


def in_transform(x: Any) -> bool:
    """Whether ``x`` (an input of a program) is traced by a caller's MLX transform
    (``mx.grad``, ``mx.vmap``, ``mx.compile``): ``mx.async_eval`` refuses to run
    inside one, and evaluating an input changes nothing."""
    try:
        mx.async_eval(x)
    except ValueError as err:
        if _IN_TRANSFORM not in str(err):
            raise
        return True
    return False


def evaluated(result: Any) -> Any:
    """``result`` (arrays, or tuples of them) with its arrays computed; inside a
    caller's MLX transform, as it is (the caller's transform computes it).

    Evaluating inside ``mx.grad``, ``mx.vjp`` or ``mx.jvp`` would cut the arrays
    from the caller's graph, silently (their derivatives would be zero):
    ``mx.async_eval`` refuses to run inside any transform, and so tells where we
    are before anything is evaluated."""
    try:
        mx.async_eval(result)
    except ValueError as err:
        if _IN_TRANSFORM not in str(err):
            raise
        return result
    mx.eval(result)
    return result


def as_mlx(value: Any) -> Any:
    """A tangent (or cotangent) of any family as an MLX array, keeping its dtype."""
    if isinstance(value, mx.array):
        return value
    family = family_of(value)
    if family is None:
        return mx.array(value)
    return converter(family, "mlx")(value)


def cast_like(value: Any, like: Any) -> Any:
    """``value`` as an MLX array with ``like``'s dtype."""
    value = as_mlx(value)
    return value if value.dtype == like.dtype else value.astype(like.dtype)


class AuxHolder:
    """``aux`` beside a traced function: its MLX arrays travel as outputs (through
    the transforms and ``mx.compile``), the rest (structure, strings, numbers,
    other families' arrays, constants of the trace) is kept here by the
    evaluation or trace that made it, and joined again after the call."""

    def __init__(self) -> None:
        self._split: AuxSplit | None = None

    def split(self, aux: Any, values: Sequence[Any]) -> tuple[Any, ...]:
        """What a checked ``f`` returns beside ``y``: ``aux``'s MLX arrays."""
        arrays, self._split = split_aux(aux, lambda leaf: isinstance(leaf, mx.array))
        return arrays

    def join(self, arrays: Sequence[Any]) -> Any:
        """The ``aux`` pytree of the latest evaluation, with these arrays."""
        assert self._split is not None
        return self._split.join([mx.stop_gradient(a) for a in arrays])


def _key(value: Any) -> Hashable:
    return value


class ProgramMaker:
    """Makes programs of pure MLX functions for one adapter: caller-family inputs
    converted, the CPU stream entered for 64-bit inputs, results evaluated; with
    ``compile``, the function under ``mx.compile`` (traces counted in
    :attr:`traces`)."""

    def __init__(self, backend: AbstractBackend, compiled: bool, input_converters: Callable[..., Any]) -> None:
        self.backend = backend
        self.compiled = compiled
        self._input_converters = input_converters
        self.traces = 0
        """How many times the compiled functions made by this maker were traced."""

    def program(
        self,
        core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        *,
        aux: AuxHolder | None = None,
    ) -> Program:
        """``core(x, [tangents,] *values)`` as a program taking the caller's inputs.
        With ``aux``, ``core`` returns ``(result, aux's arrays)`` and the program
        ``(result, aux)``."""
        values = [c.value for c in contexts]
        inputs = [x, *values]
        converters = self._input_converters(inputs)
        dtypes = [getattr(v, "dtype", None) for v in inputs if hasattr(v, "dtype")]
        scope = _scope(dtypes)
        lead = 1 if tangents is None else 2
        caches = tuple(i for i, c in enumerate(contexts) if isinstance(c, Cache))
        if caches:
            core = _returning_caches(core, lead, caches)
        run = self._compiled(core, contexts, lead, x) if self.compiled else core
        convert_x, convert_values = converters[0], converters[1:]
        plain = all(convert is identity for convert in converters) and not caches
        x_dtype = getattr(x, "dtype", None)
        x_name = FAMILY.describe_dtype(x_dtype) if x_dtype is not None else ""

        def convert_inputs(x: Any, values: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
            # An MLX array passes as it is, whatever the prep was made with: inside an outer MLX
            # transform (SecondOrder's outer AutoMLX, mx.grad around di) it is traced, and a
            # round trip through NumPy would drop its derivative.
            if x.__class__ is not mx.array:
                x = convert_x(x)
            values = tuple(v if v.__class__ is mx.array else convert(v) for convert, v in zip(convert_values, values))
            if caches:  # f writes into scratch arrays of its own: a Cache's initial value never matters
                values = tuple(_scratch(v) if i in caches else v for i, v in enumerate(values))
            return x, values

        def finish(output: Any, given: tuple[Any, ...], x: Any, values: tuple[Any, ...], inside: bool) -> Any:
            if caches:
                output, written = output
            if not inside:  # (inside a caller's MLX transform, evaluating would cut the graph)
                mx.eval(output)
            if caches and not inside:  # f's last writes land in the caller's buffers
                mx.eval(written)
                for i, array in zip(caches, written):
                    _write_back(given[i], array)
            output = _unaliased(output, (x, *values))
            if aux is None:
                return output
            result, arrays = output
            return result, aux.join(arrays)

        if tangents is None:

            def program(x: Any, *values: Any) -> Any:
                with scope():
                    given = values
                    if not plain:
                        x, values = convert_inputs(x, values)
                    inside = x.__class__ is mx.array and in_transform(x)
                    output = core(x, *values) if inside else run(x, *values)
                    return finish(output, given, x, values, inside)

        else:

            def program(x: Any, tangents: Sequence[Any], *values: Any) -> Any:  # type: ignore[misc]
                with scope():
                    given = values
                    if not plain:
                        x, values = convert_inputs(x, values)
                    dtype = x.dtype if isinstance(x, mx.array) else mlx_dtype(x_name)
                    engine_tangents = [
                        t if isinstance(t, mx.array) and t.dtype == dtype else _cast(t, dtype) for t in tangents
                    ]
                    inside = x.__class__ is mx.array and in_transform(x)
                    output = core(x, engine_tangents, *values) if inside else run(x, engine_tangents, *values)
                    return finish(output, given, x, values, inside)

        if plain and aux is None and not contexts and scope() is _NO_SCOPE:
            # the common call (an MLX x, no context, no aux): one Python function around the engine's
            program = _direct(program, run, tangents is not None, self.compiled, x, tangents)
        if not self.compiled:
            return program
        statics = tuple(i for i, c in enumerate(contexts) if is_static_context(c))
        return counting_static_values(
            program,
            tuple(lead - 1 + i for i in statics),
            self.backend,
            prepared=[values[i] for i in statics],
            first_context=lead - 1,
        )

    def _compiled(self, core: Callable[..., Any], contexts: Sequence[Context], lead: int, x: Any) -> Callable[..., Any]:
        """``core`` under ``mx.compile``: one compiled function per distinct set of
        static context values, float contexts passed as MLX arrays of ``x``'s
        dtype (a Python float would be compiled in, once per value)."""
        statics = tuple(i for i, c in enumerate(contexts) if is_static_context(c))
        for i in statics:
            if not isinstance(contexts[i].value, Hashable):
                raise InvalidInputError(
                    f"{self.backend!r}: context {i + 1} is compiled in (static) but its "
                    f"{type(contexts[i].value).__name__} value is not hashable: pass Constant(value, static=False) "
                    f"to trace it, or make it hashable."
                )
        floats = tuple(i for i, c in enumerate(contexts) if i not in statics and isinstance(c.value, float))
        count = len(contexts)  # (the closures below hold no context: a prep keeps no caller's array alive)
        compiled: dict[Any, Callable[..., Any]] = {}
        lock = threading.Lock()  # (making a compiled function for a new static value)
        trace_lock = threading.RLock()  # (reentrant: a trace that calls this program again, in its thread)
        watch = RecompileWatch(self.backend, statics=(), limit=RETRACE_LIMIT + 1, skip=("di", "mlx"))
        maker = self
        x_dtype = getattr(x, "dtype", None)
        float_dtype = (
            x_dtype
            if isinstance(x_dtype, mx.Dtype)
            else mlx_dtype(FAMILY.describe_dtype(x_dtype) if x_dtype is not None else "float32")
        )

        traced_count = count - len(statics)  # (the context values the compiled function takes)

        def compile_for(static_values: tuple[Any, ...]) -> Callable[..., Any]:
            traces = [0]
            signatures: set[Any] = set()

            def traced(*args: Any) -> Any:
                # MLX keeps compiled functions per thread (each calling thread traces once, in
                # itself): the lock makes traces and their count one at a time across threads; a
                # call that finds its trace made runs no Python of di's and takes no lock
                with trace_lock:
                    return count_trace(args)

            def count_trace(args: tuple[Any, ...]) -> Any:
                maker.traces += 1
                signature = _signature(args)
                if not signatures or signature in signatures:
                    # the first trace; or one MLX makes again for the same signature (once in each
                    # thread that calls the function): no change of f's inputs to report
                    signatures.add(signature)
                    return call_core(args)
                signatures.add(signature)
                traces[0] += 1
                if traces[0] > RETRACE_LIMIT:
                    raise RecompileLimitError(
                        f"{maker.backend!r}: mx.compile traced f again {traces[0]} times for one preparation (a new "
                        f"shape or dtype of x, a tangent or an array context each time); it stops after "
                        f"{RETRACE_LIMIT}. Prepare once per signature (strict preps refuse another), and pass values "
                        f"that change as arrays or floats, which are traced."
                    )
                watch.recompiled((), "a new shape or dtype of x, a tangent or an array context")
                return call_core(args)

            def call_core(args: tuple[Any, ...]) -> Any:
                # (the tangents come as arguments of their own, between x and the context values)
                end = len(args) - traced_count
                head = [args[0], list(args[1:end])] if lead == 2 else [args[0]]
                rest = list(args[end:])
                full = []
                for i in range(count):
                    full.append(static_values[statics.index(i)] if i in statics else rest.pop(0))
                return core(*head, *full)

            return mx.compile(traced)

        if not statics and not floats:  # one compiled function: called as it is (_direct)
            only = compiled[()] = compile_for(())

            if lead == 1:

                def run_only(*args: Any) -> Any:
                    return only(*args)

            else:

                def run_only(x: Any, tangents: Sequence[Any], *values: Any) -> Any:  # type: ignore[misc]
                    return only(x, *tangents, *values)

            run_only.only = only  # type: ignore[attr-defined]
            return run_only

        def run(*args: Any) -> Any:
            head, values = args[:lead], list(args[lead:])
            key = tuple(_key(values[i]) for i in statics)
            function = compiled.get(key)
            if function is None:
                with lock:
                    function = compiled.setdefault(key, compile_for(key))
            for i in floats:
                if isinstance(values[i], float):
                    values[i] = mx.array(values[i], dtype=float_dtype)
            traced_values = [v for i, v in enumerate(values) if i not in statics]
            if lead == 2:
                return function(head[0], *head[1], *traced_values)
            return function(*head, *traced_values)

        return run


def _signature(args: Sequence[Any]) -> tuple[Any, ...]:
    """The shapes and dtypes of the MLX arrays among a traced function's arguments
    (``x``, each tangent, the traced context values; a list's elements, where an
    argument is one)."""
    leaves: list[Any] = []
    for arg in args:
        leaves.extend(arg if isinstance(arg, (list, tuple)) else [arg])
    return tuple((tuple(a.shape), str(a.dtype)) if isinstance(a, mx.array) else type(a) for a in leaves)


_NO_SCOPE = contextlib.nullcontext()
"""The scope of a call that needs none (:func:`_scope`'s, shared)."""


def _direct(
    program: Callable[..., Any],
    run: Callable[..., Any],
    takes_tangents: bool,
    compiled: bool,
    x: Any = None,
    tangents: Sequence[Any] | None = None,
) -> Callable[..., Any]:
    """``program`` with its common call made directly: an MLX ``x`` (and one
    MLX tangent of ``x``'s dtype), no context, outside any MLX transform of the
    caller's. That call is the engine's function (the compiled one, its tangent
    an argument of its own; eagerly, the operator's function, its tangents a
    list) and one ``mx.eval`` of its outputs, nothing else of ``program``'s
    general path (conversions, the scope, the static-value lookup); every other
    call is ``program``'s. ``mx.async_eval(x)`` tells a caller's transform, as
    :func:`in_transform` does, inline."""
    call: Callable[..., Any] | None = getattr(run, "only", None) if compiled else run
    if call is None:  # (compiled: one compiled function per static value)
        return program

    if not takes_tangents:

        def direct(x: Any, *values: Any) -> Any:
            if values or x.__class__ is not mx.array:
                return program(x, *values)
            try:
                mx.async_eval(x)
            except ValueError:  # inside a caller's transform (or MLX's own refusal): the general path
                return program(x)
            output = call(x)
            mx.eval(output)
            if output.__class__ is mx.array:
                return output if output is not x else mx.array(output)
            if output.__class__ is tuple and len(output) == 2:  # (a value and a gradient, told without a walk)
                first, second = output
                if first.__class__ is mx.array and second.__class__ is mx.array and x is not first and x is not second:
                    return output
            return _unaliased(output, (x,))

        return direct

    def strict_with_tangents(x: Any, tangents: Any) -> Any:
        # (the strict form: a strict runner has found an MLX x and one MLX tangent of
        # x's dtype, and no context, as prepared)
        try:
            mx.async_eval(x)
        except ValueError:
            return program(x, tangents)
        output = call(x, tangents[0]) if compiled else call(x, [tangents[0]])
        mx.eval(output)
        if output.__class__ is tuple and len(output) == 1 and output[0].__class__ is mx.array and output[0] is not x:
            return output
        return _unaliased(output, (x,))

    def direct_with_tangents(x: Any, tangents: Any, *values: Any) -> Any:
        if (
            values
            or x.__class__ is not mx.array
            or tangents.__class__ is not tuple
            or len(tangents) != 1
            or (t := tangents[0]).__class__ is not mx.array
            or t.dtype != x.dtype
        ):
            return program(x, tangents, *values)
        try:
            mx.async_eval(x)
        except ValueError:
            return program(x, tangents)
        output = call(x, t) if compiled else call(x, [t])
        mx.eval(output)
        if output.__class__ is tuple and len(output) == 1 and output[0].__class__ is mx.array and output[0] is not x:
            return output  # (the common result: one product)
        return _unaliased(output, (x,))

    one = tangents is not None and len(tangents) == 1 and tangents[0].__class__ is mx.array
    if x.__class__ is mx.array and one and tangents[0].dtype == x.dtype:  # type: ignore[index]
        direct_with_tangents.strict_form = strict_with_tangents  # type: ignore[attr-defined]
    return direct_with_tangents


def _returning_caches(core: Callable[..., Any], lead: int, caches: tuple[int, ...]) -> Callable[..., Any]:
    """``core`` returning, beside its result, the ``Cache`` arrays as ``f`` left
    them (``buf[...] = v`` rebinds the array ``f`` was given: under
    ``mx.compile`` they are outputs of the compiled function)."""

    def with_caches(*args: Any) -> Any:
        result = core(*args)
        return result, tuple(args[lead + i] for i in caches)

    return with_caches


def _scratch(value: Any) -> Any:
    """Zeros like a ``Cache`` buffer, for ``f`` to write into (MLX differentiates
    a write into an array through the array's old values: a NaN there would
    make the derivative NaN)."""
    return mx.zeros(tuple(value.shape), dtype=value.dtype)


def _write_back(buffer: Any, array: Any) -> None:
    """``array`` (MLX) copied into the caller's ``Cache`` buffer, of any family."""
    family = family_of(buffer)
    if family is None:
        return
    record = get_family(family)
    if record.mutable:  # (an immutable family's buffer, JAX's, is f's input only)
        record.write_out(buffer, converter("mlx", family)(array))


def _unaliased(output: Any, inputs: tuple[Any, ...]) -> Any:
    """``output`` with any MLX array that is one of ``inputs`` (``f`` returned ``x``)
    replaced by a new array: a caller writing into a result must not write ``x``."""
    if output.__class__ is mx.array:
        for value in inputs:
            if output is value:
                return mx.array(output)
        return output
    if output.__class__ is tuple:
        # (the common case, nothing aliased, found in one walk: no call per element)
        pending = list(output)
        while pending:
            item = pending.pop()
            if item.__class__ is tuple:
                pending.extend(item)
            elif item.__class__ is mx.array:
                for value in inputs:
                    if item is value:
                        return tuple(_unaliased(item, inputs) for item in output)
        return output
    return output


def _scope(dtypes: Sequence[Any]) -> Callable[[], Any]:
    """The factory of the scope a call with inputs of ``dtypes`` runs in (MLX's
    CPU stream for 64-bit ones, where the default device is another)."""
    scope = FAMILY.scope(dtypes)
    if isinstance(scope, contextlib.nullcontext):
        return lambda: _NO_SCOPE  # reusable
    return lambda: FAMILY.scope(dtypes)


def _cast(value: Any, dtype: Any) -> Any:
    value = as_mlx(value)
    return value if value.dtype == dtype else value.astype(dtype)
