"""How PyTensor programs are made: ``f`` applied once to symbolic variables, the
derivative graph built, and the whole compiled with ``pytensor.function``, once
per signature (:class:`SymbolicProgram`).

A program's arguments are ``(x, [tangents,] *context_values)``. At each new
signature (shapes and dtypes of ``x``, the tangents and the traced contexts, the
values of the contexts compiled in) it makes symbolic inputs of exactly those
types, applies the operator's *core* to them (which applies ``f``), and compiles
the core's outputs; a call whose signature is the last one's runs the compiled
function directly. ``f``'s Python runs only while a graph is built.
"""

from __future__ import annotations

from di.engines.pytensor.imported import graph_recursion  # first: PyTensor imported, its recursion limit undone

# isort: split
import threading
import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.gradient import NullTypeGradError
from pytensor.graph.basic import Variable
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.variable import TensorVariable

from di.backends.aux import split_aux
from di.backends.compile import RECOMPILE_WARNING_THRESHOLD, caller_stacklevel, is_static_context, is_static_value
from di.backends.selectors import AbstractBackend
from di.contexts import Constant, Context
from di.engines.pytensor.direct import direct_call
from di.errors import InvalidInputError, RecompileLimitError, RecompileWarning, UnsupportedOperatorError
from di.families import converter, family_of
from di.pytrees import tree_flatten, tree_map

__all__ = [
    "COMPILE_LIMIT",
    "Core",
    "StaticShapeVariable",
    "SymbolicProgram",
    "float_dtype",
    "refuse_extended",
    "symbolic_like",
]

COMPILE_LIMIT = 64
"""Signatures one program compiles for before it stops with :class:`di.RecompileLimitError`."""

_FLOATS = ("float16", "float32", "float64")

Core = Callable[[Callable[[Any], Any], Any, Sequence[tuple[tuple[int, ...], str]]], tuple[Any, list[Any]]]
"""``core(fx, x, tangent_specs) -> (result, tangent_inputs)``: the operator's graph.
``fx`` applies ``f`` (with its contexts bound) to a symbolic ``x``; the core
makes one symbolic input per tangent spec (``(shape, dtype)``) and returns them
with the result (a tuple of symbolic variables, nested)."""


def float_dtype(dtype: Any) -> str:
    """The floating dtype PyTensor computes an ``x`` of ``dtype`` in: its own for
    float16, float32 and float64; float32 for the floats PyTensor lacks
    (bfloat16), which the operator layer casts back.

    Examples:
        >>> import numpy as np
        >>> from di.engines.pytensor.graphs import float_dtype
        >>> float_dtype(np.float32), float_dtype(np.float64)
        ('float32', 'float64')
    """
    name = np.dtype(dtype).name
    if name in _FLOATS:
        return name
    return "float32" if "float" in name else name


def refuse_extended(array: Any, backend: AbstractBackend | None, what: str) -> None:
    """Refuse a float wider than float64 (``np.longdouble``), which PyTensor has no
    type for: converting it would drop its extra digits silently.

    Raises:
        InvalidInputError: ``array`` is of such a dtype.
    """
    if array.dtype.kind != "f" or array.dtype.itemsize <= 8:
        return
    who = repr(backend) if backend is not None else "AutoPyTensor"
    raise InvalidInputError(
        f"{who}: {what} is {array.dtype} (np.longdouble), a precision PyTensor has no type for; converting it to "
        f"float64 would drop its extra digits. Pass it as float64 (.astype(np.float64)) to compute in float64, or "
        f"use AutoAutograd() or AutoFiniteDiff(), which compute in NumPy's longdouble."
    )


class StaticShapeVariable(TensorVariable):  # type: ignore[misc]
    """A symbolic input whose ``shape`` and ``size`` are Python ints, as the array
    API says (and JAX's tracers give): ``f`` may compute with ``x.shape[0]`` in
    Python (``math.isqrt``, ``range``). Variables computed from it have PyTensor's
    symbolic shapes."""

    @property
    def shape(self) -> Any:
        static = self.type.shape
        return super().shape if None in static else tuple(int(d) for d in static)

    @property
    def size(self) -> Any:
        static = self.type.shape
        return super().size if None in static else int(np.prod(static, dtype=np.int64))


def symbolic_like(shape: Sequence[int], dtype: str, name: str | None = None) -> Any:
    """A symbolic tensor input of this static shape and dtype (its shape in Python ints)."""
    return StaticShapeVariable(pt.TensorType(dtype, shape=tuple(shape)), None, None, name)


def _static_number(leaf: Any) -> Any:  # (Any: PyTensor's stubs type variables without dtype)
    """A 0-d integer or boolean variable of ``f``'s ``aux`` that no input decides
    (``x.size``, ``x.shape[0]``: known from the static shapes) as the Python number
    it is, as JAX gives it under ``jax.jit``; any other leaf as it is."""
    if not isinstance(leaf, Variable):
        return leaf
    dtype = str(getattr(leaf.type, "dtype", ""))
    if getattr(leaf.type, "ndim", None) != 0 or dtype[:1] not in ("i", "u", "b"):
        return leaf
    try:
        value = pt.get_underlying_scalar_constant_value(leaf)
    except NotScalarConstantError:
        return leaf
    return bool(value) if dtype == "bool" else int(value)


def _spec(value: Any) -> tuple[tuple[int, ...], str]:
    return tuple(value.shape), value.dtype.name


class _ContextSlot:
    """How one context reaches ``f``: compiled in (its value is part of the
    signature), or symbolic (its leaves are inputs of the compiled function)."""

    __slots__ = ("converter", "dtype", "static", "tree")

    def __init__(self, static: bool, tree: bool, converter: Callable[[Any], Any], x_dtype: str) -> None:
        self.converter = converter
        self.static = static
        self.tree = tree
        self.dtype = x_dtype  # a traced Python float takes x's precision, as a weak-typed scalar does on JAX

    @staticmethod
    def kind(context: Context) -> tuple[bool, bool]:
        """``(static, tree)`` for a context: compiled in, or a pytree of traced and compiled-in leaves."""
        # PyTensor's graphs hold arrays as constants too: Constant(array, static=True) compiles one in
        static = is_static_context(context) or (
            isinstance(context, Constant) and context.static is True and not isinstance(context.value, Hashable)
        )
        return static, isinstance(context.value, (list, dict, tuple)) and not static

    def key(self, value: Any) -> Hashable:
        """What of ``value`` the compiled function depends on."""
        if self.static:
            return _static_key(value)
        if self.tree:
            leaves, spec = tree_flatten(value)
            return spec, tuple(_leaf_key(leaf) for leaf in leaves)
        return _leaf_key(value)

    def symbolic(self, value: Any) -> tuple[Any, list[Any], Callable[[Any], list[Any]]]:
        """``(what f receives, the symbolic inputs, the call's arguments from a value)``."""
        if self.static:
            return value, [], _no_inputs
        if not self.tree:
            leaf, inputs = self._leaf(value)
            return leaf, inputs, (lambda v: [self._argument(v)]) if inputs else _no_inputs
        leaves, spec = tree_flatten(value)
        made = [self._leaf(leaf) for leaf in leaves]
        traced = [i for i, (_, inputs) in enumerate(made) if inputs]

        def arguments(value: Any) -> list[Any]:
            values = tree_flatten(value)[0]
            return [self._argument(values[i]) for i in traced]

        inputs = [made[i][1][0] for i in traced]
        return spec.unflatten([leaf for leaf, _ in made]), inputs, arguments

    def _leaf(self, value: Any) -> tuple[Any, list[Any]]:
        if isinstance(value, float):
            variable = pt.scalar(dtype=self.dtype)
            return variable, [variable]
        if family_of(value) is None or is_static_value(value):
            return value, []
        array = np.asarray(self.converter(value) if family_of(value) != "numpy" else value)
        refuse_extended(array, None, "a context")
        variable = symbolic_like(array.shape, float_dtype(array.dtype) if array.dtype.kind == "f" else array.dtype.name)
        return variable, [variable]

    def _argument(self, value: Any) -> Any:
        if isinstance(value, float):
            return np.asarray(value, dtype=self.dtype)
        array = np.asarray(value if family_of(value) == "numpy" else converter(family_of(value), "numpy")(value))
        if array.dtype.kind == "f" and array.dtype.name not in _FLOATS:
            refuse_extended(array, None, "a context")
            array = array.astype(float_dtype(array.dtype))
        return array


def _no_inputs(value: Any) -> list[Any]:
    return []


def _leaf_key(leaf: Any) -> Hashable:
    if isinstance(leaf, float):
        return float
    shape = getattr(leaf, "shape", None)
    if shape is not None and family_of(leaf) is not None:
        return tuple(shape), str(leaf.dtype)
    return _static_key(leaf)


def _static_key(value: Any) -> Hashable:
    if isinstance(value, Hashable):
        return type(value), value
    if family_of(value) is not None:  # an array compiled in: its bytes decide
        array = np.asarray(value if family_of(value) == "numpy" else converter(family_of(value), "numpy")(value))
        return "array", array.shape, array.dtype.str, array.tobytes()
    return "object", id(value)


class _Compiled:
    """One compiled function and how to call it and read its results."""

    __slots__ = (
        "aux",
        "build",
        "copies",
        "direct",
        "function",
        "has_aux",
        "inputs",
        "lock",
        "n_result",
        "owner",
        "single",
        "spec",
        "tangent_dtypes",
    )

    def __init__(
        self,
        function: Any,
        inputs: list[Callable[[Any], list[Any]]],
        spec: Any,
        n_result: int,
        tangent_dtypes: list[str],
        aux: Any,
        has_aux: bool,
    ) -> None:
        self.function = function
        # the compiled program without the function's Python around it (di.engines.pytensor.direct), where found
        self.direct = direct_call(function)
        self.inputs = inputs
        self.spec = spec
        self.n_result = n_result
        self.tangent_dtypes = tangent_dtypes
        self.aux = aux
        self.has_aux = has_aux
        # A PyTensor function holds its inputs' and outputs' storage, so two threads must not run
        # one at once: the thread that compiled it calls it, every other thread a copy of its own
        self.owner = threading.get_ident()
        self.copies = threading.local()
        self.lock = threading.Lock()
        self.build = _builder(spec, n_result)
        self.single = spec.is_leaf() and not has_aux

    def run(self, *arguments: Any) -> Any:
        """The compiled program called on ``arguments`` (directly, or through the
        function: this thread's copy); its outputs in a sequence."""
        direct = self.direct
        if direct is not None:
            try:
                return direct(*arguments)
            except Exception:  # PyTensor's own call raises it again, naming the op
                pass
        return self.call(*arguments)

    def call(self, *arguments: Any) -> Any:
        """The compiled function (this thread's copy) called on ``arguments``."""
        if threading.get_ident() == self.owner:
            return self.function(*arguments)
        function = getattr(self.copies, "function", None)
        if function is None:
            with self.lock:
                function = self.copies.function = self.function.copy()
            function.trust_input = True
        return function(*arguments)

    def __call__(self, x: Any, tangents: Sequence[Any] | None, values: Sequence[Any]) -> Any:
        if tangents is None and not values:  # (the common call: x alone)
            outputs = self.run(x)
        else:
            arguments = [x]
            if tangents is not None:
                arguments.extend([_tangent(t, d) for t, d in zip(tangents, self.tangent_dtypes)])
            for read, value in zip(self.inputs, values):
                arguments.extend(read(value))
            outputs = self.run(*arguments)
        if not self.has_aux:
            return self.build(outputs)
        return self.build(outputs), self.aux.join(outputs[self.n_result :])


def _builder(spec: Any, count: int) -> Callable[[list[Any]], Any]:
    """How the result is made of the flat outputs: the one array, a flat tuple of
    them (``value_and_*``), or any nesting (through the pytree structure)."""
    if spec.is_leaf():
        return _first
    if spec == tree_flatten(tuple(range(count)))[1]:
        return lambda outputs: tuple(outputs[:count])
    return lambda outputs: spec.unflatten(outputs[:count])


def _first(outputs: list[Any]) -> Any:
    return outputs[0]


def _tangent(value: Any, dtype: str) -> Any:
    family = family_of(value)
    if family != "numpy" and family is not None:
        value = converter(family, "numpy")(value)
    return np.asarray(value, dtype=dtype)


class SymbolicProgram:
    """A program ``(x, [tangents,] *values) -> result`` compiled with
    ``pytensor.function`` for each signature it meets.

    Args:
        backend: the selector (its ``mode`` is PyTensor's).
        core: the operator's graph (:data:`Core`).
        f: ``f(x, *values)``, checked (its outputs refused or translated).
        contexts: the contexts of the preparation.
        tangents: whether the program takes tangents after ``x``.
        has_aux: ``f`` returns ``(y, aux)``: the result is ``(result, aux)``.
        x_converter: brings ``x`` into NumPy's family.
    """

    def __init__(
        self,
        backend: AbstractBackend,
        core: Core,
        f: Callable[..., Any],
        contexts: Sequence[Context],
        *,
        tangents: bool,
        has_aux: bool,
        x_converter: Callable[[Any], Any],
        context_converters: Sequence[Callable[[Any], Any]],
    ) -> None:
        self.backend = backend
        self.core = core
        self.f = f
        self.takes_tangents = tangents
        self.has_aux = has_aux
        self.x_converter = x_converter
        self.context_converters = list(context_converters)
        self.context_kinds = [_ContextSlot.kind(c) for c in contexts]  # (no value kept: the prep holds none)
        self.compiled: dict[Hashable, _Compiled] = {}
        self.compiles = 0
        self._last: tuple[Hashable, _Compiled] | None = None
        self._fast: tuple[tuple[int, ...], Any, _Compiled] | None = None
        self._fast_tangents: tuple[tuple[int, ...], Any, _Compiled, tuple[tuple[int, ...], ...]] | None = None
        self._lock = threading.Lock()
        self._warned = False

    def __copy__(self) -> SymbolicProgram:
        return self  # compiled functions, shared by copies of a prep (as a jitted function is)

    def __deepcopy__(self, memo: dict[int, Any]) -> SymbolicProgram:
        return self

    def __call__(self, x: Any, *rest: Any) -> Any:
        if not rest:  # x alone, as at the last call: the compiled function at once
            fast = self._fast
            if fast is not None and x.__class__ is np.ndarray and x.shape == fast[0] and x.dtype is fast[1]:
                known = fast[2]
                if known.single:
                    return known.run(x)[0]
                return known.build(known.run(x))
        elif len(rest) == 1 and self.takes_tangents:  # x and tangents alone, as at the last call
            fast_tangents = self._fast_tangents
            if fast_tangents is not None:
                shape, dtype, known, shapes = fast_tangents
                tangents = rest[0]
                if (
                    x.__class__ is np.ndarray
                    and x.dtype is dtype
                    and x.shape == shape
                    and len(tangents) == len(shapes)
                    and (
                        # (one tangent, the common call, compared without a generator)
                        (t := tangents[0]).__class__ is np.ndarray and t.dtype is dtype and t.shape == shapes[0]
                        if len(shapes) == 1
                        else all(
                            t.__class__ is np.ndarray and t.dtype is dtype and t.shape == s
                            for t, s in zip(tangents, shapes)
                        )
                    )
                ):
                    return known.build(known.run(x, *tangents))
        tangents = rest[0] if self.takes_tangents else None
        values = rest[1:] if self.takes_tangents else rest
        if x.__class__ is not np.ndarray or x.dtype.char not in "efd":
            x = self._x(x)
        if tangents is not None and any(isinstance(t, (float, int)) for t in tangents):
            # a Python number (a scalar output's cotangent) as the 0-d array of x's dtype
            tangents = [np.asarray(t, x.dtype) if isinstance(t, (float, int)) else t for t in tangents]
        key = (x.shape, x.dtype.num) if tangents is None and not values else self._key(x, tangents, values)
        last = self._last
        if last is not None and last[0] == key:
            return last[1](x, tangents, values)
        entry = self.compiled.get(key)
        if entry is None:
            with self._lock:
                entry = self.compiled.get(key)
                if entry is None:
                    entry = self._compile(key, x, tangents, values)
        self._last = (key, entry)
        self._fast = (x.shape, x.dtype, entry) if not rest and not self.has_aux else None
        self._fast_tangents = None
        if (
            len(rest) == 1
            and tangents is not None
            and not self.has_aux
            and all(d == x.dtype.name for d in entry.tangent_dtypes)
        ):
            shapes = tuple(tuple(t.shape) for t in tangents)
            self._fast_tangents = (x.shape, x.dtype, entry, shapes)
        return entry(x, tangents, values)

    def _x(self, x: Any) -> Any:
        if x.__class__ is not np.ndarray:
            x = np.asarray(self.x_converter(x))
        if x.dtype.name not in _FLOATS:
            refuse_extended(x, self.backend, "x")
            x = x.astype(float_dtype(x.dtype))
        return x

    def _key(self, x: Any, tangents: Sequence[Any] | None, values: Sequence[Any]) -> Hashable:
        key: list[Any] = [x.shape, x.dtype.num]
        if tangents is not None:
            key.append(tuple((tuple(t.shape), str(t.dtype)) for t in tangents))
        slots = self._slots(x)
        key.extend(slot.key(value) for slot, value in zip(slots, values))
        return tuple(key)

    def _slots(self, x: Any) -> list[_ContextSlot]:
        slots = getattr(self, "_slot_cache", None)
        if slots is None or slots[0] != x.dtype.name:
            made = [
                _ContextSlot(static, tree, conv, x.dtype.name)
                for (static, tree), conv in zip(self.context_kinds, self.context_converters)
            ]
            self._slot_cache = slots = (x.dtype.name, made)
        return slots[1]

    def _compile(self, key: Hashable, x: Any, tangents: Sequence[Any] | None, values: Sequence[Any]) -> _Compiled:
        self._count_compile()
        dtype = x.dtype.name
        with graph_recursion(), pytensor.config.change_flags(floatX=dtype if dtype in _FLOATS else "float64"):
            symbolic_x = symbolic_like(x.shape, dtype, "x")
            received, inputs, readers = [], [], []
            for slot, value in zip(self._slots(x), values):
                seen, made, read = slot.symbolic(value)
                received.append(seen)
                inputs.extend(made)
                readers.append(read)

            def fx(point: Any) -> Any:
                return self.f(point, *received)

            specs = [(tuple(t.shape), dtype) for t in tangents] if tangents is not None else []
            try:
                result, tangent_inputs = self.core(fx, symbolic_x, specs)
            except NullTypeGradError as err:
                # an Op's undefined derivative (a DifferentiateWith's, differentiated twice) says why
                reason = str(err).partition("undefined. ")[2] or str(err)
                raise UnsupportedOperatorError(f"{self.backend!r} cannot differentiate f: {reason}") from err
            if self.has_aux:
                result, aux = result
                aux = tree_map(_static_number, aux)
                aux_arrays, aux_rest = split_aux(aux, lambda leaf: isinstance(leaf, Variable))
            else:
                aux_arrays, aux_rest = (), None
            leaves, spec = tree_flatten(result)
            outputs = [pt.as_tensor_variable(leaf) for leaf in leaves]
            function = pytensor.function(
                [symbolic_x, *tangent_inputs, *inputs],
                [*outputs, *aux_arrays],
                mode=getattr(self.backend, "mode", None),
                on_unused_input="ignore",
                accept_inplace=True,
            )
        function.trust_input = True  # the arguments are NumPy arrays of the compiled types (made so above)
        entry = _Compiled(
            function, readers, spec, len(outputs), [t.dtype for t in tangent_inputs], aux_rest, self.has_aux
        )
        self.compiled[key] = entry
        return entry

    def _count_compile(self) -> None:
        self.compiles += 1
        if self.compiles > COMPILE_LIMIT:
            raise RecompileLimitError(
                f"{self.backend!r} compiled f for {COMPILE_LIMIT} different signatures (shapes and dtypes of x and "
                f"the contexts, values of the contexts compiled in) and stops: each is a PyTensor compile. Pass "
                f"values that change as traced contexts (di.Constant(value) with an array or a float), keep x's "
                f"shape, or prepare once per shape."
            )
        if self.compiles > RECOMPILE_WARNING_THRESHOLD and not self._warned:
            self._warned = True
            warnings.warn(
                f"{self.backend!r}: compiled f for {self.compiles} different signatures since preparation (shapes "
                f"and dtypes of x and the contexts, values of the contexts compiled in); at {COMPILE_LIMIT} it stops "
                f"with di.RecompileLimitError. Pass values that change as traced contexts (di.Constant(value, "
                f"static=False), or arrays), and keep x's shape.",
                RecompileWarning,
                stacklevel=caller_stacklevel(("di", "pytensor")),
            )
