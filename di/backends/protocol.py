"""The adapter protocol: what an engine must provide for ``di`` to drive it.

An adapter turns ``(f, x, contexts)`` into a *program*: a plain callable taking
``x`` and the context values exactly as the caller passes them (any array family)
and returning engine arrays. The operator layer around it checks signatures,
unwraps contexts and converts results back to the caller's family; the adapter
only does what is specific to its engine.

Programs are built once, at preparation, so everything that can be decided from
the prepared arguments (conversions, compiled functions, static arguments) is
decided there and the call itself does nothing else.
"""

from __future__ import annotations

import contextlib
import enum
import threading
import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar

from di.backends.selectors import AbstractBackend
from di.contexts import Cache, Constant, Context
from di.errors import (
    InvalidInputError,
    InvalidOutputError,
    RecompileWarning,
    UnsupportedContextError,
)
from di.families import converter, family_of, identity, is_floating_dtype
from di.pytrees import is_pytree, tree_flatten, tree_map

__all__ = [
    "AUX_FAMILIES",
    "OPERATOR_FAMILIES",
    "Adapter",
    "Program",
    "Programs",
    "counting_static_values",
    "describe_output",
    "is_real_floating_array",
    "is_real_scalar",
    "is_static_context",
    "output_leaf_shapes",
    "plain_from_full",
    "raise_bad_output",
]

Program = Callable[..., Any]
Programs = dict[str, Program]

AUX_FAMILIES = frozenset({"derivative", "gradient", "jacobian", "pushforward", "pullback"})
"""The operator families that take ``has_aux`` (auxiliary outputs of ``f``)."""

OPERATOR_FAMILIES: dict[str, tuple[str, ...]] = {
    "derivative": ("derivative", "value_and_derivative"),
    "gradient": ("gradient", "value_and_gradient"),
    "jacobian": ("jacobian", "value_and_jacobian"),
    "pushforward": ("pushforward", "value_and_pushforward"),
    "pullback": ("pullback", "value_and_pullback"),
    "hvp": ("hvp", "gradient_and_hvp"),
    "hessian": ("hessian", "value_gradient_and_hessian"),
    "second_derivative": ("second_derivative", "value_derivative_and_second_derivative"),
}
"""Each operator family and the programs a prep of it holds: the plain operator
first, then its combined (``value_and_*``) form."""

RECOMPILE_WARNING_THRESHOLD = 8
_STATIC_SCALARS = (int, bool, str, bytes, type(None), enum.Enum)


class Adapter:
    """Base class of the engine-specific code behind a backend selector.

    Subclasses set ``family`` (the array family the engine computes in) and
    implement at least one primitive, :meth:`prepare_pushforward_programs` or
    :meth:`prepare_pullback_programs`; every other operator then works through
    :func:`di.backends.fallbacks.programs`, and overriding its
    ``prepare_<operator>_programs`` method gives it a native fast path.
    :meth:`support` reports which is which, and the documentation's tables are
    generated from it. This module needs nothing from the fallbacks: they build on
    it, and the operator layer asks them for programs.

    A *program* takes ``x`` (and tangents) and the context values as the caller
    passes them, in any array family, and returns engine-family arrays.

    Examples:
        >>> from di.backends.registry import get_adapter
        >>> import di
        >>> get_adapter(di.AutoFiniteDiff()).family
        'numpy'
    """

    family: ClassVar[str] = "numpy"
    supports_cache: ClassVar[bool] = True
    cache_note: ClassVar[str] = ""
    compiled: ClassVar[bool] = False

    def __init__(self, backend: AbstractBackend) -> None:
        self.backend = backend

    # --- checks made at preparation ---------------------------------------------

    def check_contexts(self, contexts: Sequence[Context]) -> None:
        """Refuse, up front, the contexts this engine cannot pass to ``f``.

        Raises:
            UnsupportedContextError: a ``Cache`` on an engine that cannot write
                into arrays.
        """
        if not self.supports_cache and any(isinstance(c, Cache) for c in contexts):
            raise UnsupportedContextError(f"{self.backend!r} cannot use Cache contexts: {self.cache_note}")

    # --- helpers for subclasses -------------------------------------------------

    def input_converters(self, values: Sequence[Any]) -> list[Callable[[Any], Any]]:
        """One converter per value, bringing arrays (and the array leaves of
        pytrees) into this engine's family; identity for values that need none."""
        return [self._input_converter(value) for value in values]

    def context_converters(self, contexts: Sequence[Context]) -> list[Callable[[Any], Any]]:
        """Converters of the context values into the engine's family."""
        return self.input_converters([c.value for c in contexts])

    def _input_converter(self, value: Any) -> Callable[[Any], Any]:
        if not is_pytree(value):
            return converter(family_of(value), self.family)
        leaves, _ = tree_flatten(value)
        if all(family_of(leaf) in (None, self.family) for leaf in leaves):
            return identity
        family = self.family

        def convert_leaves(tree: Any) -> Any:
            return self.tree_map(lambda leaf: converter(family_of(leaf), family)(leaf), tree)

        return convert_leaves

    def takes_pytree(self, tree: Any) -> bool:
        """Whether this engine flattens ``tree`` into the same leaves as ``optree``
        (otherwise ``di`` flattens it into one vector for the engine)."""
        return True

    def tree_map(self, function: Callable[[Any], Any], tree: Any) -> Any:
        """Map over the leaves of a pytree as this engine sees pytrees (``optree``
        by default; JAX uses its own registry so JAX-registered nodes work)."""
        return tree_map(function, tree)

    differentiates_any_program: ClassVar[bool] = False
    """Whether the engine differentiates a function by evaluating it at points
    (finite differences), so that as :class:`di.SecondOrder`'s outer backend it
    can differentiate any inner backend's programs."""

    def differentiates_programs_of(self, inner: Adapter) -> bool:
        """Whether, as the outer backend of :class:`di.SecondOrder`, this engine can
        differentiate the gradient and derivative programs ``inner`` builds (it
        calls them with its own values: tracers, boxes, dual tensors).

        An engine that traces can differentiate only programs written in itself;
        an adapter that can says so by overriding this method."""
        return self.differentiates_any_program

    evaluates_in_float64: ClassVar[bool] = False
    """Whether the engine evaluates ``f`` in float64 whatever the input dtype
    (finite differences): flattened pytrees then reach ``f`` as float64 leaves."""
    native_pytrees: ClassVar[frozenset[str]] = frozenset()
    """The operator families whose programs take a pytree ``x`` themselves; for
    the others ``di`` flattens pytrees into one vector (:class:`di.pytrees.Raveler`)."""

    def scope(self, values: Sequence[Any]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        """The context manager the engine must run in for these inputs (JAX:
        ``enable_x64`` when an input is 64-bit); by default none."""
        return contextlib.nullcontext

    # --- what the adapter implements ----------------------------------------------

    @classmethod
    def has_native(cls, family: str) -> bool:
        """Whether this adapter implements operator ``family`` itself (rather than
        leaving it to the generic fallbacks built from its primitives)."""
        method = getattr(cls, f"prepare_{family}_programs")
        return method is not getattr(Adapter, f"prepare_{family}_programs")

    @classmethod
    def has_primitive(cls) -> bool:
        """Whether the adapter implements a pushforward or a pullback, from which
        :mod:`di.backends.fallbacks` builds every other operator."""
        return cls.has_native("pushforward") or cls.has_native("pullback")

    @classmethod
    def support(cls) -> dict[str, str]:
        """For each operator family: ``"native"``, ``"fallback"`` or ``"unsupported"``;
        the documentation's support tables are generated from this."""
        return {
            family: "native" if cls.has_native(family) else ("fallback" if cls.has_primitive() else "unsupported")
            for family in OPERATOR_FAMILIES
        }

    # --- primitives ---------------------------------------------------------------

    def prepare_value_program(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Program:
        """Build ``program(x, *context_values) -> f(x, *values)`` in the engine's
        family (no differentiation)."""
        converters = [*self.input_converters([x]), *self.context_converters(contexts)]
        scope = self.scope([x, *[c.value for c in contexts]])

        def value(x: Any, *values: Any) -> Any:
            with scope():
                return f(*[convert(v) for convert, v in zip(converters, (x, *values))])

        return value

    def output_shapes(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> list[tuple[int, ...]] | None:
        """The shapes of the array leaves of ``f``'s output at arguments like these,
        to check cotangents against at preparation; ``None`` when the output is not
        an array (the programs then refuse it with their own error). By default
        ``f`` is evaluated once."""
        y = self.prepare_value_program(f, x, contexts)(x, *[c.value for c in contexts])
        return output_leaf_shapes(y, self.tree_map)

    # --- operators ----------------------------------------------------------------
    # What an adapter may implement. Each method it overrides is a native path; the
    # others are built by di.backends.fallbacks.programs from the primitives
    # (pushforward or pullback), which an adapter must implement at least one of.
    # The operator layer calls these through fallbacks.programs, never directly.
    #
    # The first-order families (AUX_FAMILIES) take ``has_aux``: f then returns
    # (y, aux), only y is differentiated, and both programs return (result, aux),
    # result being what they return without it and aux computed by the same
    # evaluation of f (see di.backends.aux). An adapter whose method lacks the
    # keyword does not support auxiliary outputs for that family.

    def prepare_pushforward_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        """Forward mode. Programs ``(x, tx, *values) -> tuple`` of output tangents
        (``pushforward``) and ``-> (y, tuple)`` (``value_and_pushforward``). Tangents
        may be arrays of any family; the programs convert them."""
        raise NotImplementedError

    def prepare_pullback_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        """Reverse mode. Programs ``(x, ty, *values) -> tuple`` of input cotangents
        (``pullback``) and ``-> (y, tuple)`` (``value_and_pullback``)."""
        raise NotImplementedError

    def prepare_pullback_same_point_programs(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        """``pullback`` at one point: the linearisation is computed at preparation."""
        raise NotImplementedError

    def prepare_hvp_same_point_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        """``hvp`` at one point: the second-order linearisation is computed at preparation."""
        raise NotImplementedError

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        """``gradient`` / ``value_and_gradient`` programs ``(x, *values)``."""
        raise NotImplementedError

    def prepare_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        """``derivative`` / ``value_and_derivative`` programs ``(x, *values)``."""
        raise NotImplementedError

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        """``jacobian`` / ``value_and_jacobian`` programs ``(x, *values)``."""
        raise NotImplementedError

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        """``hvp`` / ``gradient_and_hvp`` programs ``(x, tx, *values)``."""
        raise NotImplementedError

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        """``hessian`` / ``value_gradient_and_hessian`` programs ``(x, *values)``."""
        raise NotImplementedError

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        """``second_derivative`` / ``value_derivative_and_second_derivative``."""
        raise NotImplementedError


def output_leaf_shapes(y: Any, tree_map: Callable[[Callable[[Any], Any], Any], Any]) -> list[tuple[int, ...]] | None:
    """The shapes of the leaves of an output (mapped with the engine's ``tree_map``),
    or ``None`` when a leaf is not a real floating array (the programs refuse such
    an output with their own error)."""
    shapes: list[tuple[int, ...] | None] = []
    tree_map(lambda leaf: shapes.append(tuple(leaf.shape) if is_real_floating_array(leaf) else None), y)
    if not shapes or any(shape is None for shape in shapes):
        return None
    return shapes  # type: ignore[return-value]


def plain_from_full(full: Program, has_aux: bool = False) -> Program:
    """The plain operator's program from its ``value_and_*`` one: the last element
    of the result (beside ``aux`` under ``has_aux``). Traced by a compiler, the
    plain program then returns that alone, and the work only the others needed
    is dropped.

    Examples:
        >>> from di.backends.protocol import plain_from_full
        >>> plain_from_full(lambda x: (x, 2 * x))(3), plain_from_full(lambda x: ((x, 2 * x), "aux"), True)(3)
        (6, (6, 'aux'))
    """
    if has_aux:

        def plain_with_aux(*args: Any) -> Any:
            result, aux = full(*args)
            return result[-1], aux

        return plain_with_aux

    def plain(*args: Any) -> Any:
        return full(*args)[-1]

    return plain


def describe_output(y: Any) -> str:
    """Describe a value ``f`` returned, for error messages."""
    shape = getattr(y, "shape", None)
    dtype = getattr(y, "dtype", None)
    if shape is not None:
        return f"an array of shape {tuple(shape)} and dtype {dtype}"
    return f"a {type(y).__name__}"


SCALAR_OPERATORS = frozenset({"gradient", "hvp", "hessian"})


def raise_bad_output(y: Any, backend: AbstractBackend, operator: str = "gradient") -> None:
    """Raise :class:`InvalidOutputError` for an ``f`` whose output ``operator``
    cannot use: a real scalar for gradient, hvp and hessian; a real floating
    array for the others."""
    shape = getattr(y, "shape", None)
    complex_output = isinstance(y, complex) or "complex" in str(getattr(y, "dtype", ""))
    if operator not in SCALAR_OPERATORS:
        if complex_output:
            hint = " Differentiate its real and imaginary parts separately."
        elif isinstance(y, tuple) and len(y) == 2:
            hint = (
                " If f returns (y, aux), pass has_aux=True. Pytree outputs are supported by AutoJAX; with other "
                "backends, stack them into one array."
            )
        elif isinstance(y, (dict, list, tuple)):
            hint = " Pytree outputs are supported by AutoJAX; with other backends, stack them into one array."
        else:
            hint = " Return an array (numpy, torch or jax, as x) or a Python float."
        raise InvalidOutputError(
            f"{operator} needs f to return a real floating-point array, but with {backend!r} f returned "
            f"{describe_output(y)}.{hint}"
        )
    if isinstance(y, tuple) and len(y) == 2:
        hint = " If f returns (y, aux), pass has_aux=True."
    elif shape is not None and tuple(shape) != ():
        hint = " Reduce it to a scalar (for example with .sum()), or use jacobian for array outputs."
    elif complex_output:
        hint = " Differentiate its real part or its squared modulus instead."
    else:
        hint = " Return a floating-point 0-d array or a Python float."
    raise InvalidOutputError(
        f"{operator} needs f to return a real scalar, but with {backend!r} f returned {describe_output(y)}.{hint}"
    )


def is_real_floating_array(y: Any) -> bool:
    """Whether ``y`` is a real floating array of any family (or a traced one, or a
    Python float): what jacobian, pushforward, pullback and derivative need."""
    if isinstance(y, float):
        return True
    dtype = getattr(y, "dtype", None)
    return dtype is not None and hasattr(y, "shape") and is_floating_dtype(dtype)


def is_real_scalar(y: Any) -> bool:
    """Whether ``y`` is a real floating scalar (0-d floating array of any family,
    an engine's traced scalar, or a Python float)."""
    if isinstance(y, float):
        return True
    shape = getattr(y, "shape", None)
    if shape is None or tuple(shape) != ():
        return False
    return is_floating_dtype(y.dtype)


# --- compiled backends: which contexts are compiled in ------------------------------


def is_static_context(context: Context) -> bool:
    """Whether a context is compiled in (static) on a compiled backend.

    The one rule for ``AutoJAX(jit=True)`` and ``AutoTorch(compile=True)``:
    arrays and Python floats are traced (a new value runs the same program); ints,
    bools, strings, ``None``, enums, tuples of these, and other hashable non-array
    objects are compiled in (a new value compiles again, once per value).
    ``Constant(value, static=True/False)`` overrides the choice.

    Examples:
        >>> import di
        >>> from di.backends.protocol import is_static_context
        >>> is_static_context(di.Constant(3)), is_static_context(di.Constant(3.0))
        (True, False)
    """
    value = context.value
    if isinstance(context, Constant) and context.static is not None:
        return context.static
    if family_of(value) is not None or isinstance(value, (float, complex)):
        return False
    if isinstance(value, _STATIC_SCALARS):
        return True
    if isinstance(value, tuple):
        return all(isinstance(item, _STATIC_SCALARS) for item in value)
    if isinstance(value, (list, dict)) or not isinstance(value, Hashable):
        return False  # containers are pytrees: their leaves are traced
    return True


def static_positions(contexts: Sequence[Context], backend: AbstractBackend) -> tuple[int, ...]:
    """Indices of the static contexts, refusing unhashable ones.

    Raises:
        InvalidInputError: a context forced static whose value is not hashable.
    """
    positions = tuple(i for i, c in enumerate(contexts) if is_static_context(c))
    for i in positions:
        if not isinstance(contexts[i].value, Hashable):
            raise InvalidInputError(
                f"{backend!r}: context {i + 1} is compiled in (static) but its "
                f"{type(contexts[i].value).__name__} value is not hashable: pass Constant(value, static=False) "
                f"to trace it, or make it hashable."
            )
    return positions


def counting_static_values(program: Program, positions: tuple[int, ...], backend: AbstractBackend) -> Program:
    """Wrap a compiled program so that the distinct static values it meets are
    counted, with one :class:`di.RecompileWarning` once a context has taken more
    than ``RECOMPILE_WARNING_THRESHOLD`` values (each one a separate compile)."""
    if not positions:
        return program
    seen: list[set[Any]] = [set() for _ in positions]
    lock = threading.Lock()
    warned = [False]

    def counted(x: Any, *values: Any) -> Any:
        for slot, i in enumerate(positions):
            if values[i] not in seen[slot]:
                with lock:
                    seen[slot].add(values[i])
                    if len(seen[slot]) > RECOMPILE_WARNING_THRESHOLD and not warned[0]:
                        warned[0] = True
                        warnings.warn(
                            f"{backend!r}: context {i + 1} is compiled in (static) and has taken "
                            f"{len(seen[slot])} distinct values, each compiled separately. If it varies, "
                            f"pass it as Constant(value, static=False) or as an array so it is traced.",
                            RecompileWarning,
                            stacklevel=4,
                        )
        return program(x, *values)

    return counted
