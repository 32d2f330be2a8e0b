"""What a :class:`~di.mixing.core.DifferentiateWith` knows of ``f`` at one input signature.

A host (the module that makes ``g`` differentiable inside one outer engine) hands
``f``'s arguments across as flat lists of leaves, in its own engine's arrays.
:class:`Signature` serves one signature of those leaves (the pytree structure of
``x``, each leaf's shape and dtype, each context's kind): it hands the leaves to
the inner engine's array family (:func:`handover`: DLPack between two libraries
that speak it, zero-copy where they allow it), finds the output's structure,
shapes and dtypes by one evaluation of ``f``, and makes the inner backend's
preps on first use, reused by every later call. A new shape is a new signature,
prepared again; each prepared call is checked strictly against its prep, so a
prep never answers for arguments it was not made for.

:class:`Call` is one call's view of a signature: the context values the host
passes as operands (arrays of the outer engine, which it may trace) and the
ones it captures (everything else, passed to ``f`` as they are). Its
``value``, ``pullback`` and ``pushforward`` return leaves of the inner engine's
family, which the host converts back.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from di.backends.registry import get_adapter, get_strategy
from di.backends.selectors import AbstractBackend
from di.contexts import Constant, Context
from di.errors import InvalidInputError
from di.families import converter, family_of, get_family, is_floating_dtype
from di.mixing.handover import handover, numpy_view, to_family, views
from di.namespace import array_namespace
from di.operators.jacobian import jacobian, prepare_jacobian
from di.operators.pullback import prepare_pullback, pullback
from di.operators.pushforward import prepare_pushforward, pushforward, value_and_pushforward
from di.prep.base import Prep
from di.pytrees import tree_flatten, tree_unflatten

__all__ = [
    "Call",
    "OutputSpec",
    "Signature",
    "Spec",
    "engine_backend",
    "engine_family",
    "handover",
    "numpy_view",
    "stack_leaves",
    "to_family",
]

Leaves = list[Any]
Spec = tuple[tuple[int, ...], str]
"""A leaf's shape and dtype name (``"float32"``): what a signature records of it."""


@dataclass(frozen=True)
class OutputSpec:
    """The structure, shapes and dtype names of ``f``'s output leaves at one signature.

    Attributes:
        treedef: the output's pytree structure (``optree``).
        specs: each leaf's shape and dtype name.
    """

    treedef: Any
    specs: tuple[Spec, ...]

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        """The output pytree with these leaves."""
        return tree_unflatten(self.treedef, list(leaves))


def engine_backend(backend: AbstractBackend) -> AbstractBackend | None:
    """The engine's selector behind ``backend``: itself, or the backend a strategy
    wraps; ``None`` for a strategy that decides per argument (:class:`di.AutoFastest`).

    Examples:
        >>> import di
        >>> from di.mixing.calls import engine_backend
        >>> engine_backend(di.AutoSparse(di.AutoFiniteDiff()))
        AutoFiniteDiff(method='central', step=None)
    """
    while True:
        strategy = get_strategy(backend)
        if strategy is None:
            return backend
        wrapped = strategy.engine(backend)
        if wrapped is None:
            return None
        backend = wrapped


def engine_family(backend: AbstractBackend) -> str:
    """The array family ``backend``'s engine computes in: what ``f`` is written for.

    A strategy that decides per argument (:class:`di.AutoFastest`) evaluates ``f``
    on NumPy arrays, which every candidate converts from.

    Examples:
        >>> import di
        >>> from di.mixing.calls import engine_family
        >>> engine_family(di.AutoFiniteDiff()), engine_family(di.AutoSparse(di.AutoFiniteDiff()))
        ('numpy', 'numpy')
    """
    engine = engine_backend(backend)
    return "numpy" if engine is None else get_adapter(engine).capabilities.family


def stack_leaves(rows: Sequence[Sequence[Any]]) -> Leaves:
    """``rows[i][j]`` -> leaf ``j`` stacked over ``i`` (a new leading axis).

    Examples:
        >>> import numpy as np
        >>> from di.mixing.calls import stack_leaves
        >>> [leaf.shape for leaf in stack_leaves([[np.ones(2)], [np.zeros(2)]])]
        [(2, 2)]
    """
    return [array_namespace(*column).stack(column) for column in zip(*rows)]


class Signature:
    """One input signature of a ``DifferentiateWith``: its output spec and preps.

    Args:
        f: the function.
        backend: the inner backend computing derivatives.
        kinds: each context's class (:class:`di.Constant` or :class:`di.Cache`) and
            ``static`` option.
        treedef: the structure of ``x``.
        x_specs: the specs of ``x``'s leaves.
        operand_specs: the specs of the contexts the host passes as operands, by position.
        inner: the host of ``f``'s own engine (:class:`~di.mixing.core.Host`), which
            linearizes ``f`` when ``backend`` is a plain selector of that engine.

    Raises:
        InvalidInputError: a leaf of ``x`` that is not real floating point.

    The preps are made at the first call of each operator (one per number of
    tangents), at that call's arguments, under a lock: two threads never
    prepare the same one twice.
    """

    def __init__(
        self,
        f: Callable[..., Any],
        backend: AbstractBackend,
        kinds: Sequence[tuple[type[Context], bool | None]],
        treedef: Any,
        x_specs: Sequence[Spec],
        operand_specs: dict[int, Spec],
        inner: Any = None,
    ) -> None:
        self.f, self.backend, self.kinds, self.treedef = f, backend, tuple(kinds), treedef
        self.x_specs, self.operand_specs = tuple(x_specs), dict(operand_specs)
        for index, (_, dtype) in enumerate(self.x_specs):
            if not is_floating_dtype(np.dtype(dtype)):
                remedy = "Pass integer or boolean data as a di.Constant."
                if np.dtype(dtype).kind == "c":  # each engine has its own convention for complex cotangents
                    remedy = (
                        "A complex input is not offered across engines: pass its real and imaginary parts as two "
                        "real arrays (and rebuild it inside f), or differentiate f with its own engine's backend, "
                        "where di's operators take complex x (see the complex numbers page)."
                    )
                raise InvalidInputError(
                    f"DifferentiateWith: leaf {index} of x has dtype {dtype}; the differentiated input must hold real "
                    f"floating-point arrays. {remedy}"
                )
        self.family = engine_family(backend)
        strategy = get_strategy(backend)
        self._products_as_jacobian = strategy is not None and strategy.products_as_jacobian(backend)
        # f's own engine's host (inner), for a plain selector of that engine: it runs f once
        # per forward and backward pair (linearize) and describes the output without a trace
        self.inner = inner if strategy is None else None
        # whether that host's linearization takes x, the Constants and the cotangents as NumPy views
        self._views = self.inner is not None and self.inner.linearizes_numpy(backend)
        self.output: OutputSpec | None = None
        self._raveled: Callable[..., Any] | None = None
        self._preps: dict[tuple[str, int], Prep] = {}
        self._lock = threading.Lock()

    # --- arguments ---------------------------------------------------------------------------

    def zeros(self, spec: Spec) -> Any:
        """Zeros of ``spec`` in the inner engine's family."""
        shape, dtype = spec
        return converter("numpy", self.family)(np.zeros(shape, dtype=np.dtype(dtype)))

    def arguments(self, x_leaves: Sequence[Any], values: Sequence[Any]) -> tuple[Any, list[Context]]:
        """``x`` and the contexts of one call, in the inner engine's family."""
        family = self.family
        x = tree_unflatten(self.treedef, [handover(leaf, family) for leaf in x_leaves])
        contexts = [
            Constant(to_family(value, family), static) if kind is Constant else kind(value)
            for (kind, static), value in zip(self.kinds, values)
        ]
        return x, contexts

    # --- evaluating f -------------------------------------------------------------------------

    def value(self, x_leaves: Sequence[Any], values: Sequence[Any]) -> Leaves:
        """``f``'s output leaves at these arguments, in the inner engine's family, from
        the backend's own program (compiled on a compiled backend): the value of a
        pushforward prepared with no tangents. The first call evaluates ``f``
        directly, which describes the output (one evaluation, not two)."""
        if self.output is None:
            with self._lock:
                if self.output is None:
                    return self.evaluate(x_leaves, values)
        output = self.output
        x, contexts = self.arguments(x_leaves, values)
        f, _, unpack = self._differentiated(output)
        prep = self._prep("pushforward", 0, lambda: prepare_pushforward(f, self.backend, x, (), *contexts))
        y, _ = value_and_pushforward(f, prep, self.backend, x, (), *contexts)
        return unpack(y)

    def forward(self, x_leaves: Sequence[Any], values: Sequence[Any]) -> tuple[Leaves, Any]:
        """``f``'s output leaves and the residual of that evaluation: the pullback
        its engine recorded (:meth:`~di.mixing.core.Host.linearize`), which
        :meth:`Signature.pullback` uses instead of running ``f`` again, or ``None`` (an
        engine that does not linearize, or a backend of another engine or a
        strategy: the value then comes from :meth:`Signature.value`)."""
        inner = self.inner
        if inner is None:
            return self.value(x_leaves, values), None
        if self._views:
            family = self.family
            x = tree_unflatten(self.treedef, [numpy_view(leaf, family) for leaf in x_leaves])
            arguments = [
                views(value, family) if kind is Constant else value for (kind, _), value in zip(self.kinds, values)
            ]
        else:
            x, contexts = self.arguments(x_leaves, values)
            arguments = [c.value for c in contexts]
        with get_family(self.family).scope([spec[1] for spec in self.x_specs]):
            linearized = inner.linearize(self.f, self.backend, x, arguments)
        if linearized is None:
            self.inner = None  # (asked once: this engine does not linearize)
            return self.value(x_leaves, values), None
        y, residual = linearized
        leaves, treedef = tree_flatten(y)
        leaves = [handover(np.asarray(leaf) if isinstance(leaf, float) else leaf, self.family) for leaf in leaves]
        if self.output is None:
            self.output = self._describe(leaves, treedef)
        return leaves, residual

    def evaluate(self, x_leaves: Sequence[Any], values: Sequence[Any]) -> Leaves:
        """``f``'s output leaves at these arguments, called directly, in the inner
        engine's family (``f`` runs in that engine's scope: 64-bit dtypes kept);
        the first evaluation describes the output."""
        x, contexts = self.arguments(x_leaves, values)
        with get_family(self.family).scope([spec[1] for spec in self.x_specs]):
            y = self.f(x, *[c.value for c in contexts])
        leaves, treedef = tree_flatten(y)
        leaves = [handover(np.asarray(leaf) if isinstance(leaf, float) else leaf, self.family) for leaf in leaves]
        if self.output is None:
            self.output = self._describe(leaves, treedef)
        return leaves

    def _describe(self, leaves: Sequence[Any], treedef: Any) -> OutputSpec:
        specs = []
        for index, leaf in enumerate(leaves):
            family = family_of(leaf)
            if family is None or not is_floating_dtype(leaf.dtype):
                what = type(leaf).__name__ if family is None else f"an array of dtype {leaf.dtype}"
                raise InvalidInputError(
                    f"DifferentiateWith needs f to return real floating-point arrays (or pytrees of them) with "
                    f"{self.backend!r}; output leaf {index} is {what}."
                )
            record = get_family(family)
            specs.append((tuple(record.shape(leaf)), record.describe_dtype(leaf.dtype)))
        return OutputSpec(treedef, tuple(specs))

    def describe_output(self, x_leaves: Sequence[Any] | None, values: Sequence[Any]) -> OutputSpec:
        """The output spec, from one evaluation of ``f`` the first time: at these
        leaves, or (``None``: the host has no concrete values, as when tracing)
        at zeros of the signature's specs."""
        if self.output is None:
            with self._lock:
                if self.output is None:
                    probe = contextlib.nullcontext()
                    if x_leaves is None:
                        x_leaves = [self.zeros(spec) for spec in self.x_specs]
                        if self.inner is not None:  # a probe f's engine undoes (its state, its random draws)
                            probe = self.inner.probing()
                    with probe, np.errstate(all="ignore"):  # zeros may meet a logarithm or a division
                        self.evaluate(x_leaves, values)
        assert self.output is not None
        return self.output

    # --- derivatives -----------------------------------------------------------------------------

    def _prep(self, operator: str, count: int, make: Callable[[], Prep]) -> Prep:
        key = (operator, count)
        prep = self._preps.get(key)
        if prep is None:
            with self._lock:
                prep = self._preps.get(key)
                if prep is None:
                    prep = self._preps[key] = make()
        return prep

    def _jacobian_shaped(self, count: int) -> bool:
        """Whether ``count`` products are better served by one Jacobian: an inner
        backend whose strategy says so (:class:`di.AutoSparse`), several products,
        one array in and out."""
        output = self.output
        return (
            self._products_as_jacobian
            and count > 1
            and len(self.x_specs) == 1
            and output is not None
            and len(output.specs) == 1
        )

    def pullback(
        self, x_leaves: Sequence[Any], values: Sequence[Any], cotangents: Sequence[Leaves], residual: Any = None
    ) -> list[Leaves]:
        """One pullback per cotangent (each a list of output leaves): lists of ``x``
        leaves in the inner engine's family. With the ``residual`` of a
        :meth:`Signature.forward` at this point and one cotangent, the pullback that
        evaluation recorded (``f`` does not run again)."""
        if residual is not None and len(cotangents) == 1 and self.output is not None:
            family = self.family
            hand = numpy_view if self._views else handover
            cotangent = self.output.unflatten([hand(leaf, family) for leaf in cotangents[0]])
            with get_family(family).scope([spec[1] for spec in self.x_specs]):
                result = residual(cotangent)
            if result is not None:
                return [[handover(leaf, family) for leaf in tree_flatten(result)[0]]]
        output = self.describe_output(x_leaves, values)
        x, contexts = self.arguments(x_leaves, values)
        family = self.family
        if self._jacobian_shaped(len(cotangents)):
            return self._through_jacobian(x, contexts, [handover(c[0], family) for c in cotangents], transpose=True)
        f, pack, _ = self._differentiated(output)
        ty = tuple(pack([handover(leaf, family) for leaf in c]) for c in cotangents)
        prep = self._prep("pullback", len(ty), lambda: prepare_pullback(f, self.backend, x, ty, *contexts))
        results = pullback(f, prep, self.backend, x, ty, *contexts)
        return [tree_flatten(result)[0] for result in results]

    def pushforward(self, x_leaves: Sequence[Any], values: Sequence[Any], tangents: Sequence[Leaves]) -> list[Leaves]:
        """One pushforward per tangent (each a list of ``x`` leaves): lists of output
        leaves in the inner engine's family."""
        output = self.describe_output(x_leaves, values)
        x, contexts = self.arguments(x_leaves, values)
        family = self.family
        if self._jacobian_shaped(len(tangents)):
            return self._through_jacobian(x, contexts, [handover(t[0], family) for t in tangents], transpose=False)
        f, _, unpack = self._differentiated(output)
        tx = tuple(tree_unflatten(self.treedef, [handover(leaf, family) for leaf in t]) for t in tangents)
        prep = self._prep("pushforward", len(tx), lambda: prepare_pushforward(f, self.backend, x, tx, *contexts))
        results = pushforward(f, prep, self.backend, x, tx, *contexts)
        return [unpack(result) for result in results]

    def _differentiated(self, output: OutputSpec) -> tuple[Callable[..., Any], Any, Any]:
        """``(f as the inner backend differentiates it, cotangent leaves -> its
        cotangent, its output tangent -> output leaves)``. One output array: ``f``
        itself. A pytree output: ``f`` with its leaves raveled into one vector,
        which every backend takes (the same function object every call, so the
        preps made for it are reused)."""
        if output.treedef.is_leaf():
            return self.f, lambda leaves: leaves[0], lambda result: [result]
        if self._raveled is None:
            f = self.f

            def raveled(x: Any, *values: Any) -> Any:
                leaves = tree_flatten(f(x, *values))[0]
                xp = array_namespace(*leaves)
                return xp.concat([xp.reshape(leaf, (-1,)) for leaf in leaves])

            self._raveled = raveled
        sizes = [int(np.prod(shape)) for shape, _ in output.specs]
        bounds = np.cumsum([0, *sizes])

        def pack(leaves: Sequence[Any]) -> Any:
            xp = array_namespace(*leaves)
            return xp.concat([xp.reshape(leaf, (-1,)) for leaf in leaves])

        def unpack(vector: Any) -> list[Any]:
            xp = array_namespace(vector)
            return [
                xp.reshape(vector[int(start) : int(stop)], shape)
                for start, stop, (shape, _) in zip(bounds[:-1], bounds[1:], output.specs)
            ]

        return self._raveled, pack, unpack

    def _through_jacobian(
        self, x: Any, contexts: Sequence[Context], vectors: Sequence[Any], transpose: bool
    ) -> list[Leaves]:
        """Products with the Jacobian (sparse with AutoSparse), computed once per call:
        ``J @ v`` for tangents, ``J.T @ v`` for cotangents."""
        assert self.output is not None
        prep = self._prep("jacobian", 1, lambda: prepare_jacobian(self.f, self.backend, x, *contexts))
        matrix = jacobian(self.f, prep, self.backend, x, *contexts)
        out_shape, x_shape = self.output.specs[0][0], self.x_specs[0][0]
        rows, columns = int(np.prod(out_shape)), int(np.prod(x_shape))
        xp = array_namespace(vectors[0])
        if tuple(matrix.shape) != (rows, columns):  # a dense result, shaped f(x).shape + x.shape
            matrix = xp.reshape(matrix, (rows, columns))
        stacked = xp.stack([xp.reshape(v, (-1,)) for v in vectors], axis=1)
        products = matrix.T @ stacked if transpose else matrix @ stacked
        if hasattr(products, "todense"):
            products = products.todense()
        shape = x_shape if transpose else out_shape
        return [[xp.reshape(xp.asarray(products[:, i]), shape)] for i in range(len(vectors))]


class Call:
    """One call of ``g`` as a host sees it: a signature, the context values passed
    as operands and the ones captured.

    Args:
        signature: the signature.
        captured: the context values, ``None`` where the host passes an operand.
        operand_positions: the context positions the host passes as operands.
    """

    __slots__ = ("captured", "operand_positions", "signature")

    def __init__(self, signature: Signature, captured: Sequence[Any], operand_positions: Sequence[int]) -> None:
        self.signature = signature
        self.captured = tuple(captured)
        self.operand_positions = tuple(operand_positions)

    @property
    def family(self) -> str:
        """The inner engine's array family: what ``value``, ``pullback`` and
        ``pushforward`` return."""
        return self.signature.family

    def values(self, operands: Sequence[Any]) -> list[Any]:
        """Every context value, in order: captured ones, and ``operands`` in their places."""
        values = list(self.captured)
        for position, operand in zip(self.operand_positions, operands):
            values[position] = operand
        return values

    def output(self, x_leaves: Sequence[Any] | None = None, operands: Sequence[Any] | None = None) -> OutputSpec:
        """The output spec: one evaluation of ``f`` the first time, at these
        arguments or (``None``: the host has no concrete values, as when tracing)
        at zeros of the signature's specs."""
        signature = self.signature
        if signature.output is None:
            if operands is None:
                operands = [signature.zeros(signature.operand_specs[i]) for i in self.operand_positions]
            return signature.describe_output(x_leaves, self.values(operands))
        return signature.output

    def value(self, x_leaves: Sequence[Any], operands: Sequence[Any]) -> Leaves:
        """``f``'s output leaves."""
        return self.signature.value(x_leaves, self.values(operands))

    def forward(self, x_leaves: Sequence[Any], operands: Sequence[Any]) -> tuple[Leaves, Any]:
        """``f``'s output leaves and the residual a later :meth:`Call.pullback` at this
        point takes (:meth:`Signature.forward`)."""
        return self.signature.forward(x_leaves, self.values(operands))

    def pullback(
        self, x_leaves: Sequence[Any], operands: Sequence[Any], cotangents: Sequence[Leaves], residual: Any = None
    ) -> list[Leaves]:
        """One list of ``x`` leaves per cotangent (from ``residual``, a :meth:`Call.forward`'s, when given)."""
        return self.signature.pullback(x_leaves, self.values(operands), cotangents, residual)

    def pushforward(self, x_leaves: Sequence[Any], operands: Sequence[Any], tangents: Sequence[Leaves]) -> list[Leaves]:
        """One list of output leaves per tangent."""
        return self.signature.pushforward(x_leaves, self.values(operands), tangents)
