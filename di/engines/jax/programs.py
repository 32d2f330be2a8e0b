"""The pieces of JAX programs: output rules, tangents, the call wrapper, ``aux``.

Module-level functions, so that ``jax.jit`` sees the same function objects from
one prep to the next.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from di.backends.aux import AuxSplit, split_aux
from di.backends.compile import is_static_value
from di.backends.misuse import foreign_engine_error, written_x_error
from di.backends.outputs import OutputRules, is_real_floating_array
from di.backends.protocol import Program, Programs
from di.backends.selectors import AbstractBackend
from di.engines.jax.concretization import concretization_error
from di.engines.jax.selector import AutoJAX
from di.engines.jax.x64 import in_x64
from di.errors import UnsupportedOperatorError
from di.families import converter, family_of, identity
from di.prep.finish import finished

__all__ = [
    "RULES",
    "AuxTracing",
    "StaticLeaves",
    "apply_vjp",
    "bare_single",
    "cast_like",
    "engine_tangents",
    "passed_tangents",
    "first_argument",
    "named",
    "result",
    "size",
    "split",
    "stack",
    "unstack",
    "value_only",
    "wrap",
]


_CONCRETIZATION = (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError)

_FORWARD = {
    "pushforward": "uses forward mode (jax.jvp)",
    "derivative": "uses forward mode (jax.jvp)",
    "jacobian": "runs in forward mode here (jax.jacfwd)",
    "second_derivative": "applies forward mode twice (jax.jvp of jax.jvp)",
}
"""The operators whose JAX programs differentiate ``f`` in forward mode, and how."""


def _forward_remedy(backend: AbstractBackend, operator: str) -> str:
    """What computes ``operator``'s result in reverse mode, which runs a custom_vjp rule."""
    reverse = repr(AutoJAX(jit=getattr(backend, "jit", False), mode="reverse"))
    if operator == "jacobian":
        return f"pass {reverse}, whose jacobian is one pullback per output element"
    if operator == "derivative":
        return f"ask for di.jacobian(f, {reverse}, x), which for a 0-d x is the derivative"
    if operator == "pushforward":
        return f"ask for di.pullback, or for di.jacobian(f, {reverse}, x) and multiply it by the tangent"
    return (
        f"for a scalar f, ask for di.hessian(f, {backend!r}, x) (forward over reverse mode, which runs the rule; for "
        f"a 0-d x it is the second derivative); for an array output, a reverse jacobian of a reverse jacobian: "
        f"r = {reverse}; di.jacobian(lambda x: di.jacobian(f, r, x), r, x)"
    )


def custom_vjp_error(error: BaseException, backend: AbstractBackend, operator: str) -> BaseException | None:
    """:class:`di.UnsupportedOperatorError` for JAX's refusal to differentiate a
    ``jax.custom_vjp`` function in forward mode (a ``TypeError`` under one
    ``jax.jvp``, a ``NotImplementedError`` about ``custom_lin`` under two), raised
    inside ``f`` by an operator that uses forward mode; ``None`` for any other
    error, which is then ``f``'s own.

    Examples:
        >>> import di
        >>> from di.engines.jax.programs import custom_vjp_error
        >>> error = TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")
        >>> type(custom_vjp_error(error, di.AutoJAX(), "pushforward")).__name__
        'UnsupportedOperatorError'
        >>> custom_vjp_error(error, di.AutoJAX(), "pullback") is None
        True
    """
    text = str(error)
    if isinstance(error, TypeError):
        refused = "forward-mode autodiff (jvp) to a custom_vjp function" in text
    else:
        refused = isinstance(error, NotImplementedError) and "rule for 'custom_lin' not implemented" in text
    # a reverse-mode jacobian runs no jvp: there the refusal is f's own (f calling jax.jvp)
    reverse_jacobian = operator == "jacobian" and getattr(backend, "mode", None) == "reverse"
    if not refused or operator not in _FORWARD or reverse_jacobian:
        return None
    how = _FORWARD[operator]
    if operator == "jacobian" and getattr(backend, "mode", None) is None:
        how += ", which AutoJAX picks when x has no more elements than f's output"
    return UnsupportedOperatorError(
        f"{operator} cannot differentiate f with {backend!r}: f calls a function with a jax.custom_vjp rule, which "
        f"JAX differentiates in reverse mode only, and {operator} {how}. To fix it, "
        f"{_forward_remedy(backend, operator)}; or give that function a jax.custom_jvp rule instead, which JAX "
        f"applies in both modes."
    )


_FOREIGN_CALL = re.compile(r"must be \w+, not \w*Tracer")
"""Another library's refusal of a JAX tracer (``sin(): argument 'input' (position 1)
must be Tensor, not JVPTracer``)."""


class _Rules(OutputRules):
    """JAX outputs: arrays or pytrees of them; an output computed from a traced
    ``x`` is a tracer of ``x``'s own trace type (``jnp.asarray(c)`` or
    ``jax.lax.stop_gradient`` give another, or none)."""

    traces = True
    # np.asarray, np.sin: a NumPy array. float(), .item(), an if, an index: a Python value,
    # which translate explains (concretization.py: it tells x from a context)
    conversion_errors = (
        jax.errors.TracerArrayConversionError,
        jax.errors.ConcretizationTypeError,
        jax.errors.TracerIntegerConversionError,
        # JAX's refusals of forward mode through a custom_vjp rule (custom_vjp_error); any
        # other TypeError or NotImplementedError of f's is raised again as it is
        TypeError,
        NotImplementedError,
    )

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

    def translate(
        self, error: BaseException, backend: AbstractBackend, operator: str, values: Sequence[Any]
    ) -> BaseException | None:
        if isinstance(error, jax.errors.TracerArrayConversionError):
            return None  # NumPy on a traced value: foreign_cause's
        if isinstance(error, _CONCRETIZATION):
            explained = concretization_error(error, backend, operator, values)
            return None if explained is error else explained
        if isinstance(error, TypeError):
            text = str(error)
            if "do not support in-place item assignment" in text:  # x[0] = 5.0
                return written_x_error(backend, operator)
            if _FOREIGN_CALL.search(text):  # torch.sin(x): another library's function refused a tracer
                return foreign_engine_error(backend, operator, error)
        return custom_vjp_error(error, backend, operator)

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


def passed_tangents(tangents: Sequence[Any], bare: bool) -> Any:
    """Tangents as a compiled program's jitted function takes them (after
    :func:`engine_tangents`): for a ``bare`` program (:func:`bare_single`) one array
    tangent bare, anything else as a tuple."""
    tangents = engine_tangents(tangents)
    if bare and len(tangents) == 1 and family_of(tangents[0]) in ("jax", "numpy"):
        return tangents[0]
    return tangents


def wrap(
    function: Callable[..., Any],
    converters: Sequence[Callable[[Any], Any]],
    with_tangents: bool,
    x64: bool,
    bare: bool = False,
) -> Program:
    """``function`` taking caller-family inputs, in the x64 scope it needs, adding
    nothing on the hot path when neither conversion nor scope is needed.
    ``bare``: for one tangent, ``function`` takes it bare when it is an array and
    returns its result as a bare array, which the program puts in the tuple it
    returns (:func:`bare_single`: jit flattens a bare array faster than a tuple of
    one, and a tuple out of a jitted call costs it more than one built in Python)."""
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
            # (a call without a splat where there are no values: about 0.2 us less per call)
            return function(x, tangents, *values) if values else function(x, tangents)

        program = with_t_plain
        if bare:

            def with_one_t_plain(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
                if len(tangents) != 1:
                    return with_t_plain(x, tangents, *values)
                tangent = tangents[0]
                if tangent.__class__ not in taken:  # (another family's, a pytree, a class not seen yet)
                    tangent = passed_tangents(tangents, True)
                    if tangent.__class__ is not tuple:
                        taken.add(tangent.__class__)
                return (function(x, tangent, *values) if values else function(x, tangent),)

            # What a strict runner calls once it has compared x and the one tangent with the
            # prepared ones (of a class jit takes as it is): the jitted function itself, given
            # the tangent bare, its result put in a tuple by the runner (a Python call fewer)
            with_one_t_plain.boxed_strict_form = (function, _taken_as_is)  # type: ignore[attr-defined]
            program = with_one_t_plain
    elif with_tangents:

        def with_t(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
            converted = [convert(v) for convert, v in zip(convert_values, values)]
            result = function(convert_x(x), passed_tangents(tangents, bare), *converted)
            return (result,) if bare and len(tangents) == 1 else result

        program = with_t
    elif plain:
        program = function
    else:

        def converted(x: Any, *values: Any) -> Any:
            return function(convert_x(x), *[convert(v) for convert, v in zip(convert_values, values)])

        program = converted
    return in_x64(program) if x64 else program


def _taken_as_is(cls: type) -> bool:
    """Whether jit takes arguments of class ``cls`` as they are (NumPy's and JAX's arrays)."""
    return cls is np.ndarray or issubclass(cls, jax.Array)


def value_only(checked: Callable[..., Any]) -> Callable[..., Any]:
    """A checked ``f`` that returns ``(y, aux's arrays)`` as one returning ``y``."""

    def value(*args: Any) -> Any:
        return checked(*args)[0]

    return value


def result(has_aux: bool, output: Any, *arrays: Any) -> Any:
    """A core function's return: ``output``, or ``(output, aux's arrays)``."""
    return (output, arrays[0]) if has_aux else output


def _is_array(leaf: Any) -> bool:
    """Whether an ``aux`` leaf is an array (of JAX, a tracer, or of any family);
    other leaves (strings, Python numbers, ``None``) stay in Python."""
    return isinstance(leaf, jax.Array) or family_of(leaf) is not None


class _TraceAux:
    """The part of one trace's (or one eager call's) ``aux`` that does not travel
    through JAX: the :class:`AuxSplit` (structure and non-array leaves) and, under
    jit, the arrays that are constants of the trace.

    Under jit only JAX arrays travel as outputs. A NumPy array or another
    family's array in ``aux`` cannot depend on the traced ``x``: it is a constant
    of the trace, kept here as a NumPy copy (so its dtype is ``f``'s, where a
    JAX output would be cast to 32 bits outside ``enable_x64``, and another
    family's array is one jit could not return at all) and returned as a fresh
    copy by every call, so that no call's ``aux`` aliases another's.
    """

    __slots__ = ("_constants", "_split", "_travels", "keys", "pick", "tree")

    def __init__(self, split: AuxSplit, travels: tuple[bool, ...], constants: tuple[np.ndarray, ...]) -> None:
        self._split = split
        self._travels = travels
        self._constants = constants
        # under jit, the tree of ``(result, aux's arrays)``, whose leaves the compiled function
        # returns flat (set by AuxTracing.carrying when the trace's output is known)
        self.tree: Any = None
        # a flat dict of arrays that all travelled (the usual aux): joined as
        # dict(zip(keys, pick(arrays))) inline by the program's finish, no call of this
        self.keys = split.dict_keys if not constants else None
        self.pick = split.dict_pick

    def join(self, arrays: Sequence[Any]) -> Any:
        """The ``aux`` pytree with the arrays that travelled (and copies of the constants)."""
        if not self._constants:
            return self._split.join(arrays)
        travelled, constants = iter(arrays), iter(self._constants)
        return self._split.join([next(travelled) if t else np.array(next(constants)) for t in self._travels])


def _constant(leaf: Any) -> np.ndarray:
    """A NumPy copy of an ``aux`` leaf that does not travel through jit."""
    family = family_of(leaf)
    return np.array(leaf if family == "numpy" else converter(family, "numpy")(leaf), copy=True)


class AuxTracing:
    """``has_aux`` on JAX: ``aux``'s arrays travel as outputs of the traced (and
    compiled) function, and the rest of ``aux`` (strings, numbers, ``None``, its
    structure) is recorded when ``f`` runs and joined back after each call.

    Eager, ``f`` runs on every call and the rest is this thread's latest. Under
    jit the rest is returned by the compiled function itself (:meth:`carrying`),
    so it always belongs to the trace whose program ran; it can depend only on
    what jit compiles in (static contexts, shapes and dtypes).
    """

    def __init__(self, compiled: bool) -> None:
        self._compiled = compiled
        self._local = threading.local()

    def split(self, tree: Any, values: Sequence[Any]) -> tuple[Any, ...]:
        """``aux``'s arrays that travel through JAX; the rest is recorded for :meth:`joining`."""
        del values
        arrays, parts = split_aux(tree, _is_array)
        if not self._compiled or all(isinstance(a, jax.Array) for a in arrays):
            self._local.aux = _TraceAux(parts, (), ())
            return arrays
        travels = tuple(isinstance(a, jax.Array) for a in arrays)
        constants = tuple(_constant(a) for a, t in zip(arrays, travels) if not t)
        self._local.aux = _TraceAux(parts, travels, constants)
        return tuple(a for a, t in zip(arrays, travels) if t)

    def carrying(self, core: Callable[..., Any]) -> Callable[..., Any]:
        """``core`` (returning ``(result, aux's arrays)``, to be jitted) returning the
        leaves of ``(result, aux's arrays)`` flat, then the rest of ``aux`` (the trace's
        record, which holds that tree too), in one tuple: ``(*leaves, {record: ()})``."""
        local = self._local

        def carried(*args: Any) -> Any:
            local.aux = None
            output, arrays = core(*args)
            record = local.aux
            if record is None:  # pragma: no cover - f always runs when core is traced
                raise RuntimeError("has_aux: f was not called while its program was traced")
            # Under jit a trace's _TraceAux rides in the compiled function's output tree, as the
            # one key of a dict whose value has no leaves: JAX keeps each output tree with the
            # program traced for it, so a call is always joined with the structure of the trace
            # whose program ran, whichever shape or static value it was compiled for. JAX builds
            # that dict itself (no Python call per call, where a node of di's own class had its
            # unflattening called by jit's C++ dispatch at every call), and a node without leaves
            # keeps every output an array: any other object there would be a leaf that is not an
            # array, which sends every call down jit's Python path (about 100 us). The leaves come
            # flat, in one tuple: JAX then builds no dict of them (in its sorted key order) that
            # di would build again in the caller's order; the caller's finishing step builds the
            # caller's structure from them at once (di.operators.order: joins_flat).
            leaves, record.tree = jax.tree_util.tree_flatten((output, arrays))
            return (*leaves, {record: ()})

        return carried

    def joining(self, program: Program, compiled: bool) -> Program:
        """``program`` returning ``(result, aux)`` where it returned ``(result, aux's
        arrays)`` (eager) or the leaves of those and the rest of ``aux`` (:meth:`carrying`)."""
        if compiled:
            # a finishing step (the runner calls it after the executable, in its own frame)
            def joined_carried(result: Any) -> Any:
                [aux] = result[-1]  # (the dict's one key: the trace's record)
                output, arrays = aux.tree.unflatten(result[:-1])
                keys = aux.keys
                if keys is not None:
                    pick = aux.pick
                    return output, dict(zip(keys, arrays if pick is None else pick(arrays)))
                return output, aux.join(arrays)

            # (a step that a key order step after it may take into a generated one of its own)
            joined_carried.joins_flat = True  # type: ignore[attr-defined]
            return finished(program, joined_carried)
        local = self._local

        def joined(*args: Any) -> Any:
            output, arrays = program(*args)
            return output, local.aux.join(arrays)

        return joined


def bare_single(plain_core: Callable[..., Any]) -> Callable[..., Any]:
    """A plain operator's function taking one array tangent bare (anything that is
    no tuple: :func:`passed_tangents` passes the tuple otherwise) and returning, for
    one tangent, its one result as a bare array rather than a tuple of one (decided
    at trace time)."""

    def bare(x: Any, tangents: Any, *values: Any) -> Any:
        results = plain_core(x, tangents if tangents.__class__ is tuple else (tangents,), *values)
        return results[0] if len(results) == 1 else results

    return bare


def split(program: Program, plain: str, full: str) -> Programs:
    """The plain operator is the last element of the ``value_and_*`` tuple."""

    def last(*args: Any) -> Any:
        return program(*args)[-1]

    return {plain: last, full: program}


class StaticLeaves:
    """A pytree context some of whose leaves are compiled in, as ``jax.jit`` takes
    it: a pytree node whose children are the traced leaves (arrays, floats) and
    whose static data (compared and hashed by jit, one program per distinct
    one) is the structure and the other leaves (ints, strings, ...).
    :meth:`value` rebuilds the context inside the trace.

    Examples:
        >>> from di.engines.jax.programs import StaticLeaves
        >>> split = StaticLeaves.split({"n": 2, "a": 0.5, "method": "fast"})
        >>> split.leaves, split.value()
        ((0.5,), {'a': 0.5, 'method': 'fast', 'n': 2})
    """

    __slots__ = ("leaves", "static")

    def __init__(self, leaves: tuple[Any, ...], static: tuple[Any, ...]) -> None:
        self.leaves = leaves
        self.static = static

    @classmethod
    def split(cls, value: Any) -> StaticLeaves:
        """``value``'s leaves split by :func:`di.backends.compile.is_static_value`;
        traced arrays of other families become JAX arrays."""
        leaves, treedef = jax.tree_util.tree_flatten(value)
        mask = tuple(is_static_value(leaf) for leaf in leaves)
        traced = tuple(_traceable(leaf) for leaf, static in zip(leaves, mask) if not static)
        return cls(traced, (treedef, mask, tuple(leaf for leaf, static in zip(leaves, mask) if static)))

    @staticmethod
    def key(value: Any) -> Any:
        """What of ``value`` is compiled in (the structure and static leaves)."""
        return StaticLeaves.split(value).static

    def value(self) -> Any:
        """The context as ``f`` receives it."""
        treedef, mask, statics = self.static
        traced, static = iter(self.leaves), iter(statics)
        return jax.tree_util.tree_unflatten(treedef, [next(static) if m else next(traced) for m in mask])


def _traceable(leaf: Any) -> Any:
    family = family_of(leaf)
    return leaf if family in (None, "jax", "numpy") else converter(family, "jax")(leaf)


jax.tree_util.register_pytree_node(
    StaticLeaves, lambda split: (split.leaves, split.static), lambda static, leaves: StaticLeaves(tuple(leaves), static)
)


def named(core: Callable[..., Any], lead: int) -> Callable[..., Any]:
    """``core`` under the one name and signature JAX's messages then cite (which
    :mod:`di.engines.jax.concretization` reads back):
    ``traced_program(x, *values)``, or ``(x, tangents, *values)`` for ``lead == 2``;
    a context passed as :class:`StaticLeaves` reaches ``core`` rebuilt. Only
    traced: the compiled program runs none of it."""
    if lead == 1:

        def traced_program(x: Any, *values: Any) -> Any:
            return core(x, *[_joined(v) for v in values])

    else:

        def traced_program(x: Any, tangents: Any, *values: Any) -> Any:  # type: ignore[misc]
            return core(x, tangents, *[_joined(v) for v in values])

    return traced_program


def _joined(value: Any) -> Any:
    return value.value() if isinstance(value, StaticLeaves) else value
