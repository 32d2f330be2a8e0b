"""The JAX host: ``g`` as a JAX function, its derivatives from the inner backend.

``g`` is a ``jax.custom_jvp`` whose primal runs ``f`` through ``jax.pure_callback``
(``vmap_method="broadcast_all"``: one callback for a whole batch). Its JVP is
``y`` and the pushforward, a primitive of this module (``di_mixing_pushforward``)
linear in the tangents, whose transpose is the pullback primitive
(``di_mixing_pullback``) and the other way round. So reverse mode (``grad``,
``vjp``, ``jacrev``) transposes into one pullback callback, forward mode
(``jvp``, ``jacfwd``) runs one pushforward callback, and each works under
``jit``, ``vmap`` and ``lax.scan``. JAX cannot give one function both a
``custom_vjp`` and a ``custom_jvp``, hence the transposable primitive.

Batching: a batch of tangents at one point (``jacfwd``, ``jacrev``, ``vmap`` of a
``vjp``) is one callback asking the inner backend for that many pushforwards or
pullbacks at once (one Jacobian with :class:`di.AutoSparse`); a batch of points
loops over them in one callback; a batch of batches is a ``lax.map`` of those.

Inside the callbacks, JAX's buffers are handed to the inner engine by DLPack
(zero-copy on CPU) or as NumPy views, and results come back through NumPy.
Second derivatives through ``g`` (a derivative of its pullback or pushforward
with respect to the point) raise :class:`di.UnsupportedOperatorError`.
"""

from __future__ import annotations

import collections
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from di.errors import InvalidInputError, UnsupportedOperatorError
from di.mixing.calls import Call, handover, stack_leaves
from di.mixing.core import DifferentiateWith, Host, once

__all__ = ["HOST", "JaxHost"]


class _Site:
    """One traced call of ``g``: its :class:`Call` and abstract values. Primitive
    parameters compare by identity, so every trace gets its own."""

    __slots__ = ("call", "g", "kept", "nc", "nr", "nx", "point", "x_avals", "y_avals")

    def __init__(self, g: DifferentiateWith, call: Call, x_avals: list[Any], y_avals: list[Any], nc: int) -> None:
        self.g, self.call, self.x_avals, self.y_avals = g, call, x_avals, y_avals
        self.nx, self.nc = len(x_avals), nc
        # The linear primitives' point: x's leaves, the context operands and g's output
        # (nr leaves). The output is there so the pullback's callback runs after the
        # value's, which kept f's pullback for it (an f run once per forward and
        # backward pass); the linear operands follow the point.
        self.nr = len(y_avals)
        self.point = self.nx + self.nc + self.nr
        self.kept: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()

    def keep(self, arrays: Sequence[Any], residual: Any) -> None:
        """Keep the residual of ``f``'s forward evaluation at ``arrays`` (the point's
        x leaves and operands) for the pullback at that point; the oldest go first
        (a forward-mode derivative keeps one it never takes)."""
        if residual is None:
            return
        self.kept[_key(arrays)] = residual
        while len(self.kept) > _KEPT:
            self.kept.popitem(last=False)

    def take(self, arrays: Sequence[Any]) -> Any:
        """The residual kept at this point, or ``None``."""
        return self.kept.pop(_key(arrays), None) if self.kept else None

    def cast(self, leaves: Sequence[Any], avals: Sequence[Any]) -> list[Any]:
        """Results as the NumPy arrays JAX declared (dtype and shape)."""
        return [np.asarray(leaf, dtype=aval.dtype) for leaf, aval in zip(leaves, avals)]


_KEPT = 16
"""The most forward residuals one traced call of ``g`` keeps for pullbacks to come."""


def _key(arrays: Sequence[Any]) -> tuple[Any, ...]:
    """A point by value: the bytes, shape and dtype of each array."""
    return tuple((a.shape, a.dtype.str, a.tobytes()) for a in (np.asarray(a) for a in arrays))


# --- the callbacks (they receive JAX arrays, possibly with leading batch axes) -------------------


def _points(site: _Site, arrays: Sequence[Any]) -> tuple[list[Any], int, tuple[int, ...]]:
    """The arrays in the inner engine's family, their leading batch axes flattened
    into one: ``(arrays, batch or 0, batch shape)``."""
    family = site.call.family
    lead = np.ndim(arrays[0]) - len(site.x_avals[0].shape)
    if lead == 0:
        return [handover(a, family) for a in arrays], 0, ()
    batch_shape = tuple(np.shape(arrays[0])[:lead])
    size = int(np.prod(batch_shape))
    flat = [np.asarray(a).reshape((size, *np.shape(a)[lead:])) for a in arrays]
    return [handover(a, family) for a in flat], size, batch_shape


def _value(site: _Site, *arrays: Any, keep: bool = False) -> list[Any]:
    """``f``'s outputs; with ``keep`` (a derivative follows), the residual of each
    point's evaluation kept for its pullback."""
    call, nx = site.call, site.nx
    arrays_, size, batch_shape = _points(site, arrays)

    def value(x: list[Any], operands: list[Any], point: Sequence[Any]) -> Any:
        if not keep:
            return call.value(x, operands)
        y, residual = call.forward(x, operands)
        site.keep(point, residual)
        return y

    if not size:
        return site.cast(value(arrays_[:nx], arrays_[nx:], arrays), site.y_avals)
    flat = [np.reshape(a, (size, *np.shape(a)[len(batch_shape) :])) for a in arrays]
    rows = [
        value([a[i] for a in arrays_[:nx]], [a[i] for a in arrays_[nx:]], [a[i] for a in flat]) for i in range(size)
    ]
    stacked = site.cast(stack_leaves(rows), site.y_avals)
    return [leaf.reshape((*batch_shape, *aval.shape)) for leaf, aval in zip(stacked, site.y_avals)]


def _linear(site: _Site, mode: str, transpose: bool, *arrays: Any) -> list[Any]:
    """Pushforwards (``transpose=False``) or pullbacks of the linear operands at the
    point; ``mode``: ``"none"`` (one), ``"tangents"`` (a leading batch of linear
    operands at one point), ``"all"`` (a leading batch of everything)."""
    call, nx, nc = site.call, site.nx, site.nc
    family = call.family
    point = nx + nc  # (g's output, after the point, orders this callback after the value's: not read)
    arrays_ = [handover(a, family) for a in (*arrays[:point], *arrays[site.point :])]
    x, contexts, linear = arrays_[:nx], arrays_[nx:point], arrays_[point:]
    avals = site.x_avals if transpose else site.y_avals
    if not transpose:

        def apply(x: Any, contexts: Any, linear: Any, point: Sequence[Any] = ()) -> Any:
            return call.pushforward(x, contexts, linear)

    else:

        def apply(x: Any, contexts: Any, linear: Any, point: Sequence[Any] = ()) -> Any:
            residual = site.take(point) if len(linear) == 1 else None
            return call.pullback(x, contexts, linear, residual)

    if mode == "none":
        return site.cast(apply(x, contexts, [linear], arrays[: nx + nc])[0], avals)
    count = int(np.shape(arrays[-1])[0])
    if mode == "tangents":
        results = apply(x, contexts, [[leaf[i] for leaf in linear] for i in range(count)])
    else:
        points = arrays[: nx + nc]
        results = [
            apply([a[i] for a in x], [c[i] for c in contexts], [[t[i] for t in linear]], [p[i] for p in points])[0]
            for i in range(count)
        ]
    return site.cast(stack_leaves(results), avals)


# --- the primitives ---------------------------------------------------------------------------


def _outputs(site: _Site, transpose: bool, mode: str, operands: Sequence[Any]) -> list[Any]:
    avals = site.x_avals if transpose else site.y_avals
    if mode == "none":
        return list(avals)
    count = operands[-1].shape[0]
    return [jax.core.ShapedArray((count, *aval.shape), aval.dtype) for aval in avals]


def _canonical(array: Any) -> Any:
    """``array`` in the dtype JAX computes in here (float32 for a float64 array
    outside ``jax.enable_x64``), as ``jax.pure_callback`` hands it to a callback."""
    dtype = jax.dtypes.canonicalize_dtype(array.dtype)
    return array if dtype == array.dtype else array.astype(dtype)


def _make(name: str, transpose: bool) -> Primitive:
    primitive = Primitive(name)
    primitive.multiple_results = True

    def impl(*operands: Any, site: _Site, mode: str) -> list[Any]:
        # In the dtypes a callback would receive them in (the site's specs): a float64
        # array made inside jax.enable_x64 is float32 outside it.
        operands = tuple(_canonical(a) for a in operands)
        return [jnp.asarray(leaf) for leaf in _linear(site, mode, transpose, *operands)]

    def abstract(*operands: Any, site: _Site, mode: str) -> list[Any]:
        return _outputs(site, transpose, mode, operands)

    def lowered(*operands: Any, site: _Site, mode: str) -> Any:
        shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in _outputs(site, transpose, mode, operands)]
        callback = functools.partial(_linear, site, mode, transpose)
        return jax.pure_callback(callback, shapes, *operands, vmap_method="sequential")

    primitive.def_impl(impl)
    primitive.def_abstract_eval(abstract)
    mlir.register_lowering(primitive, mlir.lower_fun(lowered, multiple_results=True))
    return primitive


_PUSHFORWARD = _make("di_mixing_pushforward", transpose=False)
_PULLBACK = _make("di_mixing_pullback", transpose=True)


def _transposed(other: Primitive, transpose: bool) -> Any:
    def rule(cotangents: Sequence[Any], *operands: Any, site: _Site, mode: str) -> list[Any]:
        point = operands[: site.point]
        if any(ad.is_undefined_primal(a) for a in point):
            raise _second_order(site, "its point")
        linear = operands[site.point :]
        avals = site.x_avals if transpose else site.y_avals  # the outputs, which the cotangents are shaped like
        if mode != "none":
            count = (linear[0].aval if ad.is_undefined_primal(linear[0]) else linear[0]).shape[0]
            avals = [jax.core.ShapedArray((count, *a.shape), a.dtype) for a in avals]
        cotangents = [
            jnp.zeros(aval.shape, aval.dtype) if type(c) is ad.Zero else c for c, aval in zip(cotangents, avals)
        ]
        results = other.bind(*point, *cotangents, site=site, mode=mode)
        return [None] * len(point) + [r if ad.is_undefined_primal(a) else None for r, a in zip(results, linear)]

    return rule


def _jvp(primitive: Primitive) -> Any:
    def rule(primals: Sequence[Any], tangents: Sequence[Any], *, site: _Site, mode: str) -> Any:
        point = site.point
        if any(type(t) is not ad.Zero for t in tangents[:point]):
            raise _second_order(site, "x")
        linear = [ad.instantiate_zeros(t) for t in tangents[point:]]
        out = primitive.bind(*primals, site=site, mode=mode)
        return out, primitive.bind(*primals[:point], *linear, site=site, mode=mode)

    return rule


def _batched(primitive: Primitive) -> Any:
    def rule(operands: Sequence[Any], dims: Sequence[Any], *, site: _Site, mode: str) -> Any:
        size = next(a.shape[d] for a, d in zip(operands, dims) if d is not None)
        front = [batching.bdim_at_front(a, d, size) for a, d in zip(operands, dims)]
        point = site.point
        if mode != "none":  # a batch of batches: one callback per outer element
            results = jax.lax.map(lambda ops: primitive.bind(*ops, site=site, mode=mode), front)
        elif all(d is None for d in dims[:point]):  # several tangents at one point
            results = primitive.bind(*operands[:point], *front[point:], site=site, mode="tangents")
        else:
            results = primitive.bind(*front, site=site, mode="all")
        return results, [0] * len(results)

    return rule


for _primitive, _other, _is_pullback in ((_PUSHFORWARD, _PULLBACK, False), (_PULLBACK, _PUSHFORWARD, True)):
    ad.primitive_transposes[_primitive] = _transposed(_other, _is_pullback)
    ad.primitive_jvps[_primitive] = _jvp(_primitive)
    batching.primitive_batchers[_primitive] = _batched(_primitive)


def _second_order(site: _Site, what: str) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(
        f"{site.g!r} inside JAX: a second derivative through g (jax.hessian, jax.grad of jax.grad, jax.jacfwd of "
        f"jax.jacrev) needs the derivative of {site.g.backend!r}'s pullback or pushforward with respect to {what}, "
        f"which JAX cannot take through a callback. Compute second derivatives of f with di directly "
        f"(di.hessian(f, {site.g.backend!r}, x), di.hvp), or write f with di.array_namespace so JAX differentiates "
        f"it natively."
    )


# --- g as a JAX function ---------------------------------------------------------------------


def _function(site: _Site) -> Any:
    """``g`` on flat operands (``x``'s leaves, then the context operands)."""
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in site.y_avals]
    value = functools.partial(_value, site)
    keeping = functools.partial(_value, site, keep=True)

    @jax.custom_jvp
    def g(*operands: Any) -> Any:
        return jax.pure_callback(value, shapes, *operands, vmap_method="broadcast_all")

    @jax.custom_jvp
    def g_keeping(*operands: Any) -> Any:  # g, keeping f's pullback for the one that follows
        return jax.pure_callback(keeping, shapes, *operands, vmap_method="broadcast_all")

    def jvp(primals: Sequence[Any], tangents: Sequence[Any]) -> Any:
        for index, tangent in enumerate(tangents[site.nx :]):
            if not isinstance(tangent, SymbolicZero):
                position = site.call.operand_positions[index] + 1
                raise InvalidInputError(
                    f"{site.g!r} inside JAX: JAX asked for the derivative with respect to context {position}, a "
                    f"Constant, which g does not differentiate. Make it part of x (a pytree of the arrays to "
                    f"differentiate), or stop its gradient (jax.lax.stop_gradient) if it is data."
                )
        y = g_keeping(*primals)
        x_tangents = [
            jnp.zeros(aval.shape, aval.dtype) if isinstance(t, SymbolicZero) else t
            for t, aval in zip(tangents[: site.nx], site.x_avals)
        ]
        return y, _PUSHFORWARD.bind(*primals, *y, *x_tangents, site=site, mode="none")

    g.defjvp(jvp, symbolic_zeros=True)
    g_keeping.defjvp(jvp, symbolic_zeros=True)
    return g


def _as_jax_outputs(leaves: Sequence[Any], output: Any) -> list[Any]:
    """Inner-engine output leaves as NumPy arrays of the dtypes JAX gives them."""
    canonical = jax.dtypes.canonicalize_dtype
    return [
        np.asarray(handover(leaf, "numpy"), dtype=canonical(np.dtype(dtype)))
        for leaf, (_, dtype) in zip(leaves, output.specs)
    ]


class JaxHost(Host):
    """``g`` inside JAX's transforms (see the module's description)."""

    display = "JAX"

    def owns(self, value: Any) -> bool:
        return isinstance(value, jax.Array)

    def call(self, g: DifferentiateWith, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        leaves = [leaf if isinstance(leaf, jax.Array) else jnp.asarray(leaf) for leaf in leaves]
        positions = g.operand_positions(self, values)
        operands = [values[i] for i in positions]
        tracer = jax.core.Tracer
        traced = any(isinstance(v, tracer) for v in (*leaves, *operands))
        # A callback receives its operands in the dtypes JAX computes in now: a float64
        # array made inside jax.enable_x64 reaches it as float32 outside (the tracer
        # still says float64). A concrete call hands f the arrays as they are.
        dtype_of = jax.dtypes.canonicalize_dtype if traced else np.dtype
        x_specs = [(tuple(leaf.shape), np.dtype(dtype_of(leaf.dtype)).name) for leaf in leaves]
        operand_specs = {i: (tuple(values[i].shape), np.dtype(dtype_of(values[i].dtype)).name) for i in positions}
        call = g.call_for(treedef, x_specs, values, operand_specs)
        if not traced:  # concrete: g is f
            family = call.family
            results = call.value([handover(v, family) for v in leaves], [handover(v, family) for v in operands])
            arrays = _as_jax_outputs(results, call.output())
            return call.output().unflatten([jnp.asarray(a) for a in arrays])
        output = call.output()
        canonical = jax.dtypes.canonicalize_dtype
        y_avals = [jax.core.ShapedArray(shape, canonical(np.dtype(dtype))) for shape, dtype in output.specs]
        x_avals = [jax.core.ShapedArray(shape, np.dtype(dtype)) for shape, dtype in x_specs]
        site = _Site(g, call, x_avals, y_avals, len(operands))
        return output.unflatten(_function(site)(*leaves, *operands))

    def linearizes_numpy(self, backend: Any) -> bool:
        """A compiled selector's: its jitted programs take NumPy arrays themselves, and
        faster than arrays JAX imported by DLPack (a torch CPU tensor at n = 10 to
        1e4: the jitted forward and backward pair in 0.6-0.8 of the time; a tie from
        1e5, where the copy into JAX's buffer costs what the import saved)."""
        return bool(getattr(backend, "jit", False))

    def linearize(
        self, f: Callable[..., Any], backend: Any, x: Any, values: Sequence[Any]
    ) -> tuple[Any, Callable[[Any], Any] | None] | None:
        """``jax.vjp`` of ``f`` (see :meth:`Host.linearize`); a compiled selector's
        prepared programs are faster, and ``f`` (pure) may run twice there. With
        them, NumPy leaves are taken as they are (:meth:`linearizes_numpy`)."""
        if getattr(backend, "jit", False):
            programs = _jitted_vjp(f, values)
            if programs is None:
                return None
            forward, backward = programs
            y, vjp = forward(x, list(values))
        else:
            y, vjp = jax.vjp(lambda x: f(x, *values), x)
            backward = _apply

        def pullback(cotangent: Any) -> Any:
            return backward(vjp, jax.tree_util.tree_map(_cotangent, cotangent, y))

        return y, once(pullback)


def _cotangent(c: Any, y: Any) -> Any:
    """A cotangent in its output's dtype: a NumPy one stays NumPy (only a jitted
    backward is handed one, and it takes it as it is)."""
    if c.__class__ is np.ndarray:
        return c if c.dtype == y.dtype else np.asarray(c, dtype=y.dtype)
    return jnp.asarray(c, dtype=y.dtype)


def _apply(vjp: Any, cotangent: Any) -> Any:
    return vjp(cotangent)[0]


_JITTED: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()
"""Each ``f``'s jitted forward (``jax.vjp``, whose pullback is a pytree of residuals)
and backward, for a compiled selector."""


def _jitted_vjp(f: Callable[..., Any], values: Sequence[Any]) -> tuple[Any, Any] | None:
    """The jitted programs of ``f``, or ``None`` when its contexts are not arrays
    (a jitted program takes arrays) or ``f`` cannot be held weakly."""
    if not all(isinstance(v, (jax.Array, np.ndarray)) for v in values):
        return None
    try:
        return _JITTED[f]
    except KeyError:
        pass
    except TypeError:
        return None
    programs = (
        jax.jit(lambda x, values: jax.vjp(lambda x: f(x, *values), x)),
        jax.jit(_apply),
    )
    try:
        _JITTED[f] = programs
    except TypeError:
        return None
    return programs


HOST = JaxHost()
