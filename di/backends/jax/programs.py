"""The pieces of JAX programs: output rules, tangents, the call wrapper, ``aux``.

Module-level functions, so that ``jax.jit`` sees the same function objects from
one prep to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from di.backends.aux import AuxSplits, split_aux
from di.backends.jax.x64 import in_x64
from di.backends.outputs import OutputRules, is_real_floating_array
from di.backends.protocol import Program, Programs
from di.families import converter, family_of, identity

__all__ = [
    "RULES",
    "AuxTracing",
    "apply_vjp",
    "bare_single",
    "cast_like",
    "engine_tangents",
    "first_argument",
    "result",
    "size",
    "split",
    "stack",
    "unstack",
    "value_only",
    "wrap",
]

_CONVERSIONS = (
    ("`float` function", "float()"),
    ("item() method", ".item()"),
    ("tolist() method", ".tolist()"),
    ("`complex` function", "complex()"),
    ("`int` function", "int()"),
)


class _Rules(OutputRules):
    """JAX outputs: arrays or pytrees of them; an output computed from a traced
    ``x`` is a tracer of ``x``'s own trace type (``jnp.asarray(c)`` or
    ``jax.lax.stop_gradient`` give another, or none)."""

    traces = True
    # float(), .item(): a Python number; np.asarray, np.sin: a NumPy array
    conversion_errors = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError)

    def is_traced(self, y: Any, x: Any) -> bool:
        leaves = jax.tree_util.tree_leaves(x)
        if not leaves or not isinstance(leaves[0], jax.core.Tracer):
            return True
        return type(y) is type(leaves[0])

    def scalar(self, y: Any) -> Any:
        return jnp.reshape(y, ())

    def accepts_array(self, y: Any) -> bool:
        leaves = jax.tree_util.tree_leaves(y)
        return bool(leaves) and all(is_real_floating_array(leaf) for leaf in leaves)

    def is_conversion_error(self, error: BaseException) -> str:
        text = str(error)
        return next((name for marker, name in _CONVERSIONS if marker in text), "")

    def foreign_cause(self, error: BaseException) -> str:
        return "numpy" if isinstance(error, jax.errors.TracerArrayConversionError) else ""


RULES = _Rules()


def first_argument(f: Callable[..., Any], values: Sequence[Any], x: Any) -> Any:
    return f(x, *values)


def size(tree: Any) -> int:
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(tree))


def cast_like(tangent: Any, like: Any) -> Any:
    """A tangent (pytree) as JAX arrays with the dtypes of ``like``'s leaves.

    A JAX array of the right dtype is passed on as it is: eagerly, a
    conversion costs about 10 us per call even when it changes nothing."""
    if isinstance(tangent, jax.Array) and isinstance(like, jax.Array):
        return _cast_leaf(tangent, like)
    return jax.tree_util.tree_map(_cast_leaf, tangent, like)


def _cast_leaf(tangent: Any, like: Any) -> Any:
    if isinstance(tangent, jax.Array) and tangent.dtype == like.dtype and not getattr(tangent, "weak_type", True):
        return tangent
    return jnp.asarray(tangent, dtype=like.dtype)


def stack(trees: Sequence[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


def unstack(stacked: Any, count: int) -> tuple[Any, ...]:
    return tuple(jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], stacked) for i in range(count))


def apply_vjp(vjp: Any, ty: Sequence[Any], like: Any) -> tuple[Any, ...]:
    ty = [cast_like(t, like) for t in ty]
    if len(ty) == 1:
        return (vjp(ty[0])[0],)
    if not ty:
        return ()
    return unstack(jax.vmap(vjp)(stack(ty))[0], len(ty))


def engine_tangents(tangents: Sequence[Any]) -> tuple[Any, ...]:
    """Tangents (pytrees) of any family, as jit accepts them (other families
    converted); arrays jit takes as they are pass straight through (the common case)."""
    if all(family_of(t) in ("jax", "numpy") for t in tangents):
        return tangents if tangents.__class__ is tuple else tuple(tangents)

    def to_jax(leaf: Any) -> Any:
        family = family_of(leaf)
        return leaf if family in (None, "jax", "numpy") else converter(family, "jax")(leaf)

    return tuple(jax.tree_util.tree_map(to_jax, t) for t in tangents)


def wrap(
    function: Callable[..., Any],
    converters: Sequence[Callable[[Any], Any]],
    with_tangents: bool,
    x64: bool,
    bare: bool = False,
) -> Program:
    """``function`` taking caller-family inputs, in the x64 scope it needs, adding
    nothing on the hot path when neither conversion nor scope is needed.
    ``bare``: for one tangent, ``function`` returns its result as a bare array,
    which the program puts in the tuple it returns (a tuple out of a jitted call
    costs it more than one built in Python)."""
    plain = all(convert is identity for convert in converters)
    convert_x, convert_values = converters[0], converters[1:]
    program: Program
    if with_tangents and plain:
        # Classes of tangents jit takes as they are (JAX and numpy arrays, the common
        # case): one set lookup per tangent; anything else goes through engine_tangents.
        taken: set[type] = {np.ndarray}

        def with_t_plain(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
            for tangent in tangents:
                if tangent.__class__ not in taken:
                    if family_of(tangent) not in ("jax", "numpy"):
                        tangents = engine_tangents(tangents)
                        break
                    taken.add(tangent.__class__)
            return function(x, tangents, *values)

        program = with_t_plain
        if bare:

            def with_one_t_plain(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
                if len(tangents) == 1:
                    if tangents[0].__class__ in taken:  # the hot path
                        return (function(x, tangents, *values),)
                    return (with_t_plain(x, tangents, *values),)
                return with_t_plain(x, tangents, *values)

            program = with_one_t_plain
    elif with_tangents:

        def with_t(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
            result = function(
                convert_x(x), engine_tangents(tangents), *[convert(v) for convert, v in zip(convert_values, values)]
            )
            return (result,) if bare and len(tangents) == 1 else result

        program = with_t
    elif plain:
        program = function
    else:

        def converted(x: Any, *values: Any) -> Any:
            return function(convert_x(x), *[convert(v) for convert, v in zip(convert_values, values)])

        program = converted
    return in_x64(program) if x64 else program


def value_only(checked: Callable[..., Any]) -> Callable[..., Any]:
    """A checked ``f`` that returns ``(y, aux's arrays)`` as one returning ``y``."""

    def value(*args: Any) -> Any:
        return checked(*args)[0]

    return value


def result(has_aux: bool, output: Any, *arrays: Any) -> Any:
    """A core function's return: ``output``, or ``(output, aux's arrays)``."""
    return (output, arrays[0]) if has_aux else output


def _is_traced_array(leaf: Any) -> bool:
    """Whether an ``aux`` leaf must travel through the engine (JAX arrays and
    tracers, numpy arrays); other leaves stay in Python."""
    return isinstance(leaf, jax.Array) or family_of(leaf) is not None


class AuxTracing:
    """``has_aux`` on JAX: ``aux``'s arrays travel as outputs of the traced (and
    compiled) function, and the rest of ``aux`` (strings, numbers, ``None``, its
    structure) is recorded at trace time and joined back after each call.

    Under jit the non-array part can depend only on the static contexts (all else
    is a tracer), so it is kept per value of those; eager, it is per thread."""

    def __init__(self, statics: tuple[int, ...]) -> None:
        self._splits = AuxSplits()
        self._statics = statics

    def _key(self, values: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(values[i] for i in self._statics)

    def split(self, tree: Any, values: Sequence[Any]) -> tuple[Any, ...]:
        """``aux``'s arrays; the rest is recorded for :meth:`joining`."""
        arrays, parts = split_aux(tree, _is_traced_array)
        self._splits.record(parts, self._key(values))
        return arrays

    def joining(self, program: Program, lead: int, compiled: bool) -> Program:
        """``program`` returning ``(result, aux)`` where it returned ``(result, aux's arrays)``."""
        splits, key = self._splits, self._key
        if not compiled or not self._statics:
            latest = splits.last if not compiled else splits.for_static

            def joined_without_statics(*args: Any) -> Any:
                output, arrays = program(*args)
                return output, latest().join(arrays)

            return joined_without_statics

        def joined(*args: Any) -> Any:
            output, arrays = program(*args)
            return output, splits.for_static(key(args[lead:])).join(arrays)

        return joined


def bare_single(plain_core: Callable[..., Any]) -> Callable[..., Any]:
    """A plain operator's function returning, for one tangent, its one result as a
    bare array rather than a tuple of one (decided at trace time)."""

    def bare(*args: Any) -> Any:
        results = plain_core(*args)
        return results[0] if len(results) == 1 else results

    return bare


def split(program: Program, plain: str, full: str) -> Programs:
    """The plain operator is the last element of the ``value_and_*`` tuple."""

    def last(*args: Any) -> Any:
        return program(*args)[-1]

    return {plain: last, full: program}
