"""How the TensorFlow adapter makes programs (:class:`ProgramBuilder`).

Each operator family is one computation of :mod:`di.engines.tensorflow.programs`,
giving the ``value_and_*`` result; the plain program returns its last element.
Eager (``compile=False``) each runs op by op at every call. Compiled
(``compile=True``) each is one ``tf.function(..., jit_compile=True)``: the plain
program traced at preparation, the ``value_and_*`` one on its first call
(swapped for a preparation of the combined form). ``x``, the tangents, array
contexts and Python floats are tensor inputs of the traced function (a new value
runs the same program); ints, strings and the other static contexts
(:func:`di.backends.compile.is_static_context`) are compiled in, one trace per
value. Every trace after the first is reported to a
:class:`~di.backends.compile.RecompileWatch`: a retrace storm warns
(:class:`di.RecompileWarning`) and stops at :data:`RETRACE_LIMIT`
(:class:`di.RecompileLimitError`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from di.backends.aux import AuxSplit, split_aux, split_output
from di.backends.compile import (
    RecompileWatch,
    combined_first,
    compiled_on_first_use,
    counting_static_values,
    static_positions,
)
from di.backends.outputs import SCALAR_OPERATORS, check_output, raise_translated
from di.backends.protocol import Adapter, Program, Programs
from di.contexts import Context
from di.engines.tensorflow.behavior import numpy_behavior
from di.engines.tensorflow.family import is_symbolic
from di.engines.tensorflow.rules import RULES, accepts_array, accepts_scalar, is_tensor
from di.engines.tensorflow.shapes import EAGER, eager_shape
from di.errors import RecompileLimitError
from di.families import converter, family_of
from di.pytrees import is_pytree, tree_map

__all__ = ["RETRACE_LIMIT", "ProgramBuilder"]

RETRACE_LIMIT = 16
"""Traces of one compiled program after which ``AutoTensorFlow(compile=True)``
stops with :class:`di.RecompileLimitError` (TensorFlow itself retraces without
limit): a warning comes before."""

_NAMES = {
    "gradient": ("gradient", "value_and_gradient"),
    "pullback": ("pullback", "value_and_pullback"),
    "pushforward": ("pushforward", "value_and_pushforward"),
    "derivative": ("derivative", "value_and_derivative"),
    "jacobian": ("jacobian", "value_and_jacobian"),
    "hvp": ("hvp", "gradient_and_hvp"),
    "hessian": ("hessian", "value_gradient_and_hessian"),
    "second_derivative": ("second_derivative", "value_derivative_and_second_derivative"),
}


def _as_tensor(value: Any) -> Any:
    """A tensor as the programs take it: a ``tf.Variable`` read as its value."""
    if value.__class__ is EAGER:  # (the common case, without isinstance's look through tf.Variable's ABC)
        return value
    return tf.convert_to_tensor(value) if isinstance(value, tf.Variable) else value


def _to_tensorflow(value: Any) -> Callable[[Any], Any]:
    """The converter of arrays like ``value`` into tensors (variables read)."""
    family = family_of(value)
    if family == "tensorflow":
        return _as_tensor
    if family is None:  # a Python number (a scalar output's cotangent)
        return tf.convert_to_tensor
    into = converter(family, "tensorflow")
    return lambda v: _as_tensor(into(v))


class _Tangents:
    """Tangents of any family as tensors of ``x``'s dtype, the converter chosen by
    class once per class met."""

    __slots__ = ("_converters",)

    def __init__(self) -> None:
        self._converters: dict[type, Callable[[Any], Any]] = {}

    def __call__(self, tangents: Sequence[Any], dtype: Any) -> tuple[Any, ...]:
        converted = []
        for t in tangents:
            convert = self._converters.get(t.__class__)
            if convert is None:
                convert = self._converters[t.__class__] = _to_tensorflow(t)
            t = convert(t)
            t_dtype = t.dtype
            converted.append(t if t_dtype is dtype or t_dtype == dtype else tf.cast(t, dtype))  # (interned dtypes)
        return tuple(converted)


def _describe(args: Sequence[Any]) -> str:
    """The signature a trace was made for, as a user reads it."""

    def one(value: Any) -> str:
        if is_tensor(value):
            return f"{value.dtype.name}{list(value.shape)}"
        if isinstance(value, (tuple, list)):
            return "(" + ", ".join(one(v) for v in value) + ")"
        return repr(value)

    return ", ".join(one(a) for a in args)


Fx = Callable[[Any], tuple[Any, Any]]
"""``fx(x) -> (y, aux's tensors)``, what a computation of :mod:`~di.engines.tensorflow.programs` calls."""


def _calling(f: Callable[..., Any], backend: Any, operator: str, has_aux: bool) -> Callable[..., Fx]:
    """How the programs call ``f``: ``calling(values, splits, key)`` is ``fx``,
    ``f`` at ``x`` with the contexts' ``values`` under TensorFlow's NumPy
    behavior, its output held to di's contract (the steps of
    :func:`di.backends.outputs.checking`, an eager tensor of the expected kind
    told at a glance) and, under ``has_aux``, ``aux`` split into its tensors
    (the rest kept in ``splits[key]``).

    ``fx`` calls ``f`` itself: TensorFlow records the Python stack at every
    eager operation (up to 30 frames, and for each its line number, which
    Python finds by reading the frame's line table from the start), so every
    frame between ``f``'s operations, or the tape's backward pass, and the
    caller is paid at each operation. The eager program calls the computation
    directly for the same reason (a wrapper's frame or two fewer: at n = 1e3 the
    pullback of a cubic runs about 40 operations)."""
    conversions = RULES.conversion_errors
    untraced = getattr(f, "checked_program", False)
    quick = accepts_scalar if operator in SCALAR_OPERATORS else accepts_array

    def calling(values: Sequence[Any], splits: dict[Any, AuxSplit], key: Any) -> Fx:
        def fx(x: Any) -> tuple[Any, Any]:
            with numpy_behavior():  # the array API's operators on the tensors f computes with
                try:
                    output = f(x, *values)
                except conversions as error:
                    raise_translated(error, backend, operator, RULES, values)
            if has_aux:
                output, aux = split_output(output, backend, operator)
            if not quick(output):
                output = check_output(output, x, backend, operator, RULES, untraced=untraced)
            if not has_aux:
                return output, None
            arrays, splits[key] = split_aux(aux, is_tensor)
            return output, arrays

        return fx

    return calling


class ProgramBuilder(Adapter):
    """What the TensorFlow adapter makes a program of a computation with: ``f``'s
    output checked, caller-family inputs converted to tensors, ``aux`` split into
    its tensors (which travel through a compiled program) and the rest (kept in
    Python), and with ``compile`` one ``tf.function(jit_compile=True)`` per
    program, its traces watched."""

    def programs(
        self,
        core: Callable[..., Any],
        f: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        operator: str,
        has_aux: bool,
    ) -> Programs:
        """Both programs of ``operator``'s family, from ``core(fx, x, [tangents])``
        returning ``(value_and_* result, aux's tensors)``."""
        calling = _calling(f, self.backend, operator, has_aux)
        plain_name, full_name = _NAMES[operator]
        plain = self._program(core, calling, x, tangents, contexts, has_aux, plain=True)
        full = self._program(core, calling, x, tangents, contexts, has_aux, plain=False)
        return {plain_name: plain, full_name: full}

    def _program(
        self,
        core: Callable[..., Any],
        calling: Callable[..., Fx],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        has_aux: bool,
        *,
        plain: bool,
    ) -> Program:
        values = [c.value for c in contexts]
        to_x = _to_tensorflow(x)
        value_converters = [_to_tensorflow(v) if family_of(v) is not None else None for v in values]
        pytree_values = [i for i, v in enumerate(values) if value_converters[i] is None and is_pytree(v)]
        tangents_of = _Tangents()
        has_tangents = tangents is not None
        splits: dict[Any, AuxSplit] = {}
        statics = static_positions(contexts, self.backend) if self.compiled else ()
        compiled = self.compiled

        def convert_values(values: Sequence[Any], dtype: Any) -> Sequence[Any]:
            if not values:
                return values
            converted = list(values)
            for i, convert in enumerate(value_converters):
                if convert is not None:
                    converted[i] = convert(values[i])
            for i in pytree_values:
                converted[i] = tree_map(lambda leaf: _leaf(leaf, dtype, compiled), values[i])
            if compiled:  # a Python float is traced (a tensor input), as on every compiled backend
                for i, value in enumerate(values):
                    if isinstance(value, float) and i not in statics:
                        converted[i] = tf.constant(value, dtype)
            return converted

        def finish(result: Any, arrays: Any) -> Any:
            if plain:
                result = result[-1]
            return (result, splits[()].join(arrays)) if has_aux else result

        if not compiled:
            # One frame between the runner and the computation, which it calls early in its code
            # (see _calling: TensorFlow looks up this frame's line at each operation)
            alone = calling((), splits, ())  # (f without contexts: made once)
            if has_tangents:

                def eager_with_tangents(x: Any, tangents: Any, *values: Any) -> Any:
                    x = to_x(x)
                    fx = calling(convert_values(values, x.dtype), splits, ()) if values else alone
                    return finish(*core(fx, x, tangents_of(tangents, x.dtype)))

                eager_with_tangents.records_python_stack = True  # type: ignore[attr-defined]
                return eager_with_tangents

            def eager(x: Any, *values: Any) -> Any:
                x = to_x(x)
                return finish(*core(calling(convert_values(values, x.dtype), splits, ()) if values else alone, x))

            eager.records_python_stack = True  # type: ignore[attr-defined]
            return eager

        def body(x: Any, tangents: Sequence[Any] | None, *values: Any) -> Any:
            key = tuple(values[i] for i in statics)
            fx = calling(values, splits, key)
            result, arrays = core(fx, x) if tangents is None else core(fx, x, tangents)
            if plain:
                result = result[-1]
            return (result, arrays) if has_aux else result

        function: Any = self._traced(body, statics)
        if not statics:  # (a static context is a Python value the concrete function baked in)
            function = _ConcreteFirst(function)

        def run(x: Any, tangents: Any, values: Sequence[Any]) -> Any:
            x = to_x(x)
            values = convert_values(values, x.dtype)
            if has_tangents:
                tangents = tangents_of(tangents, x.dtype)
            output = function(x, tangents, *values)
            if not has_aux:
                return output
            result, arrays = output
            return result, splits[tuple(values[i] for i in statics)].join(arrays)

        program: Program
        if has_tangents:

            def with_tangents(x: Any, tangents: Any, *values: Any) -> Any:
                return run(x, tangents, values)

            program = with_tangents
        else:

            def without_tangents(x: Any, *values: Any) -> Any:
                return run(x, None, values)

            program = without_tangents

        first = combined_first() != plain  # the program the preparation asked for traces now
        if first and not _symbolic([x, *values, *(tangents or ())]):
            engine_x = to_x(x)
            engine_tangents = tangents_of(tangents, engine_x.dtype) if tangents is not None else None
            function.get_concrete_function(engine_x, engine_tangents, *convert_values(values, engine_x.dtype))
        elif not first:
            program = compiled_on_first_use(program)
        lead = 1 if has_tangents else 0
        return counting_static_values(
            program,
            tuple(lead + i for i in statics),
            self.backend,
            prepared=[values[i] for i in statics],
            first_context=lead,
        )

    def _traced(self, body: Callable[..., Any], statics: tuple[int, ...]) -> Callable[..., Any]:
        """``body`` as one ``tf.function(jit_compile=True)``, every trace after the
        first reported to a :class:`RecompileWatch`, stopping at
        :data:`RETRACE_LIMIT`."""
        backend = self.backend
        watch = RecompileWatch(backend, tuple(2 + i for i in statics), RETRACE_LIMIT, skip=("di", "tensorflow"))
        traces = [0]
        lock = threading.Lock()

        def traced(x: Any, tangents: Any, *values: Any) -> Any:
            with lock:
                traces[0] += 1
                count = traces[0]
            if count >= RETRACE_LIMIT:
                raise RecompileLimitError(
                    f"{backend!r} traced f {count} times since preparation (the last for {_describe([x, tangents])}); "
                    f"it stops at {RETRACE_LIMIT}. A prepared call with strict=True never retraces: each new shape or "
                    f"dtype of x, a tangent or a context, and each new value of a static context (a Python int or "
                    f"string), is a trace of its own. Prepare once per shape, pass changing numbers as floats or "
                    f"arrays (traced), or use AutoTensorFlow() (eager)."
                )
            args = (x, tangents, *values)
            if count == 1:
                if statics:
                    watch.recompiled(args, "")  # the prepared static values: expected
            else:
                watch.recompiled(args, f"a new input signature ({_describe([x, tangents])})")
            return body(x, tangents, *values)

        return tf.function(traced, jit_compile=True, reduce_retracing=True, autograph=False)


def _spec(value: Any) -> Any:
    """What a concrete function was traced for: each eager tensor's shape and
    dtype, and the rest by identity (``None`` tangents); ``False`` for a symbolic
    tensor or a value of another kind (never the fast path)."""
    if value.__class__ is EAGER:
        return eager_shape(value), value.dtype
    if value is None:
        return None
    if value.__class__ is tuple:
        specs = tuple(_spec(v) for v in value)
        return False if False in specs else specs
    return False


class _ConcreteFirst:
    """A ``tf.function`` called through the concrete function of the signature it
    first ran with (eager tensors of the same shapes and dtypes) and as itself
    otherwise: a concrete function skips the polymorphic function's argument
    binding and cache lookup, half of the Python a compiled call costs (about
    260 of its 520 function calls per call in TensorFlow 2.21)."""

    __slots__ = ("_concrete", "_function", "_spec")

    def __init__(self, function: Any) -> None:
        self._function = function
        self._concrete: Any = None
        self._spec: Any = False

    def __call__(self, *args: Any) -> Any:
        spec = tuple(_spec(a) for a in args)
        if spec == self._spec:
            return self._concrete(*args)
        output = self._function(*args)
        if self._concrete is None and False not in spec:
            self._concrete = self._function.get_concrete_function(*args)
            self._spec = spec
        return output

    def get_concrete_function(self, *args: Any) -> Any:
        return self._function.get_concrete_function(*args)


def _leaf(leaf: Any, dtype: Any, compiled: bool) -> Any:
    """A leaf of a pytree context as the programs take it: arrays as tensors, and
    compiled, Python floats as tensors of ``x``'s dtype (traced)."""
    if family_of(leaf) is not None:
        return _to_tensorflow(leaf)(leaf)
    if compiled and isinstance(leaf, float):
        return tf.constant(leaf, dtype)
    return leaf


def _symbolic(values: Sequence[Any]) -> bool:
    """Whether a value is symbolic (a preparation inside an outer ``tf.function``
    trace), where tracing now would trace a program no call runs."""
    return any(is_symbolic(v) for v in values)
