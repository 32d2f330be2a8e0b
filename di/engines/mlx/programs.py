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
from di.backends.outputs import OutputRules, is_real_floating_array
from di.backends.protocol import Program
from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.engines.mlx.family import FAMILY, mlx_dtype
from di.errors import InvalidInputError, InvalidOutputError, RecompileLimitError
from di.families import converter, family_of, identity

__all__ = ["RETRACE_LIMIT", "RULES", "AuxHolder", "ProgramMaker", "as_mlx", "cast_like", "evaluated"]

RETRACE_LIMIT = 16
"""Traces of one compiled program (beyond its first) after which a call stops
with :class:`di.RecompileLimitError`: each is a compile of its own."""

_EVAL_IN_TRANSFORM = "Attempting to eval an array during function transformations"


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
        return InvalidOutputError(
            f"{operator} cannot differentiate f with {backend!r}: f turned a value MLX traces into a Python value or "
            f"a NumPy array (float(), .item(), .tolist(), an if on an array's value, np.asarray, np.sin), which "
            f"mx.compile and mx.vmap cannot trace. Keep the computation in array operations on x (xp = "
            f"di.array_namespace(x); xp.where(cond, a, b) for a branch on values); for Python control flow on "
            f"values, use AutoMLX() (compile=False), which runs f op by op."
        )

    def foreign_output(self, y: Any) -> str:
        return "numpy" if isinstance(y, (np.ndarray, np.generic)) else ""


RULES = _Rules()


def evaluated(result: Any) -> Any:
    """``result`` (arrays, or tuples of them) with its arrays computed."""
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
        run = self._compiled(core, contexts, lead, x) if self.compiled else core
        convert_x, convert_values = converters[0], converters[1:]
        plain = all(convert is identity for convert in converters)
        x_dtype = getattr(x, "dtype", None)
        x_name = FAMILY.describe_dtype(x_dtype) if x_dtype is not None else ""

        def finish(output: Any) -> Any:
            if aux is None:
                return evaluated(output)
            result, arrays = evaluated(output)
            return result, aux.join(arrays)

        if tangents is None:

            def program(x: Any, *values: Any) -> Any:
                with scope():
                    if not plain:
                        x = convert_x(x)
                        values = tuple(convert(v) for convert, v in zip(convert_values, values))
                    return finish(run(x, *values))

        else:

            def program(x: Any, tangents: Sequence[Any], *values: Any) -> Any:  # type: ignore[misc]
                with scope():
                    if not plain:
                        x = convert_x(x)
                        values = tuple(convert(v) for convert, v in zip(convert_values, values))
                    dtype = x.dtype if isinstance(x, mx.array) else mlx_dtype(x_name)
                    engine_tangents = [
                        t if isinstance(t, mx.array) and t.dtype == dtype else _cast(t, dtype) for t in tangents
                    ]
                    return finish(run(x, engine_tangents, *values))

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
        compiled: dict[Any, Callable[..., Any]] = {}
        lock = threading.Lock()
        watch = RecompileWatch(self.backend, statics=(), limit=RETRACE_LIMIT + 1, skip=("di", "mlx"))
        maker = self
        x_dtype = getattr(x, "dtype", None)
        float_dtype = (
            x_dtype
            if isinstance(x_dtype, mx.Dtype)
            else mlx_dtype(FAMILY.describe_dtype(x_dtype) if x_dtype is not None else "float32")
        )

        def compile_for(static_values: tuple[Any, ...]) -> Callable[..., Any]:
            traces = [0]

            def traced(*args: Any) -> Any:
                traces[0] += 1
                maker.traces += 1
                if traces[0] > 1:
                    if traces[0] > RETRACE_LIMIT + 1:
                        raise RecompileLimitError(
                            f"{maker.backend!r}: mx.compile traced f {traces[0]} times for one preparation (a new "
                            f"shape or dtype of x, a tangent or an array context each time, or a new value compiled "
                            f"in); it stops at {RETRACE_LIMIT + 1}. Prepare once per signature (strict preps refuse "
                            f"another), and pass values that change as arrays or floats, which are traced."
                        )
                    watch.recompiled((), "a new shape or dtype of x, a tangent or an array context")
                head, rest = list(args[:lead]), list(args[lead:])
                full = []
                for i in range(len(contexts)):
                    full.append(static_values[statics.index(i)] if i in statics else rest.pop(0))
                return core(*head, *full)

            return mx.compile(traced)

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
            return function(*head, *traced_values)

        return run


def _scope(dtypes: Sequence[Any]) -> Callable[[], Any]:
    """The factory of the scope a call with inputs of ``dtypes`` runs in (MLX's
    CPU stream for 64-bit ones, where the default device is another)."""
    scope = FAMILY.scope(dtypes)
    if isinstance(scope, contextlib.nullcontext):
        return lambda: scope  # reusable
    return lambda: FAMILY.scope(dtypes)


def _cast(value: Any, dtype: Any) -> Any:
    value = as_mlx(value)
    return value if value.dtype == dtype else value.astype(dtype)
