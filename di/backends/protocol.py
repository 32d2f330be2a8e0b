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
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from di.backends.capabilities import OPERATOR_FAMILIES, SAME_POINT_FAMILIES, Capabilities
from di.backends.outputs import (
    output_leaf_shapes,
)
from di.backends.selectors import AbstractBackend
from di.contexts import Cache, Context
from di.errors import InvalidOptionError, UnsupportedContextError, UnsupportedOperatorError
from di.families import converter, family_of, identity
from di.pytrees import is_pytree, tree_flatten, tree_map

__all__ = ["Adapter", "Program", "Programs", "keeping_error", "plain_from_full", "resolved"]

Program = Callable[..., Any]
Programs = dict[str, Program]


def keeping_error(wrapper: Program, program: Program) -> Program:
    """``wrapper`` of ``program``, telling the relative error of its results as
    ``program`` does. A program whose results are approximations (a
    finite-difference gradient) carries ``result_error``, a function returning that
    error as last seen in the calling thread: a finite-difference backend
    differentiating the program again (``SecondOrder``) takes its steps for it, as
    it does for ``f``'s float32 outputs. Wrappers that pass results on keep it, and
    the :func:`checked_program` mark.

    Examples:
        >>> from di.backends.protocol import keeping_error
        >>> def gradient(x):
        ...     return 2 * x
        >>> gradient.result_error = lambda: 1e-11
        >>> keeping_error(lambda x: gradient(x) + 0, gradient).result_error()
        1e-11
    """
    error = getattr(program, "result_error", None)
    if error is not None:
        wrapper.result_error = error  # type: ignore[attr-defined]
    if getattr(program, "checked_program", False):
        wrapper.checked_program = True  # type: ignore[attr-defined]
    return wrapper


def resolved(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` to call many times within one call of a program (a finite-difference
    loop): a stand-in that refers to ``f`` weakly (the one a cached prep keeps:
    :mod:`di.operators.cache`) gives ``f`` itself, which the caller holds for the
    call's length, so the evaluations skip the stand-in's frame; any other
    callable is returned as it is.

    Args:
        f: the function a program was prepared with.

    Returns:
        The callable to evaluate in this call.

    Examples:
        >>> from di.backends.protocol import resolved
        >>> from di.operators.cache import WeakFunction
        >>> def square(x):
        ...     return x * x
        >>> resolved(square) is square, resolved(WeakFunction(square)) is square
        (True, True)
    """
    resolve = getattr(type(f), "__di_resolved__", None)
    return f if resolve is None else resolve(f)  # type: ignore[no-any-return]


def checked_program(program: Callable[..., Any]) -> Callable[..., Any]:
    """``program`` (an engine's derivative program, which another engine
    differentiates) marked as one whose output its own engine already checked:
    :func:`di.backends.outputs.checking` then accepts a result that does not depend on ``x``, the
    constant derivative of a linear ``f``, which a user's ``f`` may not return.

    Examples:
        >>> import di
        >>> from di.backends.protocol import checked_program
        >>> checked_program(lambda x: 3.0).checked_program
        True
    """

    def marked(*args: Any) -> Any:
        return program(*args)

    marked.checked_program = True  # type: ignore[attr-defined]
    return keeping_error(marked, program)


# What adapters declared as class attributes before the record held it all, and
# the record's field each is now: a class still setting one is refused, naming it.
_DECLARED_IN_RECORD = {
    "family": "family",
    "supports_cache": "cache",
    "cache_note": "cache_note",
    "evaluates_in_float64": "float64",
    "native_pytrees": "pytrees",
    "differentiates_any_program": "differentiates",
}


def _implements(cls: type, operator: str) -> bool:
    method = getattr(cls, f"prepare_{operator}_programs", None)
    return method is not None and method is not getattr(Adapter, f"prepare_{operator}_programs")


class Adapter:
    """Base class of the engine-specific code behind a backend selector.

    Subclasses declare their :class:`~di.backends.capabilities.Capabilities` (``capabilities = ...``) and
    implement at least one primitive, :meth:`prepare_pushforward_programs` or
    :meth:`prepare_pullback_programs`; every other operator then works through
    :func:`di.backends.fallbacks.programs`, and overriding its
    ``prepare_<operator>_programs`` method gives it a native fast path.
    :meth:`support` reports which is which, and the documentation's tables are
    generated from the record. This module needs nothing from the fallbacks:
    they build on it, and the operator layer asks them for programs.

    A *program* takes ``x`` (and tangents) and the context values as the caller
    passes them, in any array family, and returns engine-family arrays.

    An instance may hold a record of its own (``self.capabilities = ...`` in
    ``__init__``) where its selector decides what the class cannot, such as the
    array family it computes in.

    Examples:
        >>> from di.backends.registry import get_adapter
        >>> import di
        >>> get_adapter(di.AutoFiniteDiff()).capabilities.family
        'numpy'
    """

    capabilities: Capabilities = Capabilities()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        stale = [name for name in _DECLARED_IN_RECORD if name in cls.__dict__]
        if stale:
            fields = ", ".join(f"{_DECLARED_IN_RECORD[name]}=..." for name in stale)
            raise InvalidOptionError(
                f"{cls.__name__} sets {', '.join(stale)}: an adapter declares what it offers in its record alone. "
                f"Write capabilities = Capabilities({fields}) (di.backends.capabilities.Capabilities) instead."
            )
        native = frozenset(op for op in (*OPERATOR_FAMILIES, *SAME_POINT_FAMILIES) if _implements(cls, op))
        cls.capabilities = replace(cls.capabilities, native=native)

    def __init__(self, backend: AbstractBackend) -> None:
        self.backend = backend

    @property
    def compiled(self) -> bool:
        """Whether this adapter's selector compiles (its ``compile_option`` is on)."""
        option = self.capabilities.compile_option
        return bool(option) and bool(getattr(self.backend, option, False))

    def instance_capabilities(self) -> Capabilities:
        """The record as this adapter has it: what depends on its selector
        (``pytrees`` when it compiles) resolved, ``compiled_pytrees`` folded in.

        Examples:
            >>> import di
            >>> from di.backends.registry import get_adapter
            >>> get_adapter(di.AutoAutograd()).instance_capabilities().cache
            False
        """
        record = self.capabilities
        return replace(record, pytrees=record.pytrees_when(self.compiled), compiled_pytrees=None)

    def takes_pytrees_natively(self, operator: str) -> bool:
        """Whether ``operator``'s programs take a pytree ``x`` themselves, as this
        adapter's selector (compiled or not) runs them."""
        return operator in self.capabilities.pytrees_when(self.compiled)

    # --- checks made at preparation ---------------------------------------------

    def check_contexts(self, contexts: Sequence[Context]) -> None:
        """Refuse, up front, the contexts this engine cannot pass to ``f``.

        Raises:
            UnsupportedContextError: a ``Cache`` on an engine that cannot write
                into arrays.
        """
        record = self.capabilities
        if not record.cache and any(isinstance(c, Cache) for c in contexts):
            raise UnsupportedContextError(f"{self.backend!r} cannot use Cache contexts: {record.cache_note}")

    def check_inputs(self, operator: str, x: Any) -> None:
        """Refuse, before anything runs or is flattened, an ``x`` this engine
        cannot differentiate with ``operator`` (values of a distributed runtime
        whose own backward the engine's transforms would bypass); by default
        every ``x`` is taken.

        Raises:
            DistributedError: as the engine says.
        """

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
            return converter(family_of(value), self.capabilities.family)
        family = self.capabilities.family
        leaves, _ = tree_flatten(value)
        if all(family_of(leaf) in (None, family) for leaf in leaves):
            return identity

        def convert_leaves(tree: Any) -> Any:
            return self.tree_map(lambda leaf: converter(family_of(leaf), family)(leaf), tree)

        return convert_leaves

    def takes_pytree(self, tree: Any) -> bool:
        """Whether this engine flattens ``tree`` into the same leaves as ``optree``
        (otherwise ``di`` flattens it into one vector for the engine)."""
        return True

    def tree_map(self, function: Callable[[Any], Any], tree: Any) -> Any:
        """Map over the leaves of a pytree as this engine sees pytrees (``optree``
        by default; an engine with its own registry of containers uses it)."""
        return tree_map(function, tree)

    def split_vector(self, vector: Any, offsets: Sequence[int]) -> list[Any] | None:
        """The pieces of a traced 1-d ``vector`` starting at ``offsets``, for an
        engine whose slices cost more to differentiate than one split (``None``:
        ``di`` slices). A pytree ``x`` flattened into one vector is taken apart so."""
        return None

    def differentiates_programs_of(self, inner: Adapter) -> bool:
        """Whether, as the outer backend of :class:`di.SecondOrder`, this engine can
        differentiate the gradient and derivative programs ``inner`` builds (it
        calls them with its own values: tracers, boxes, dual tensors), as its
        record's ``differentiates`` says."""
        mode = self.capabilities.differentiates
        return mode == "any" or (mode == "own" and isinstance(inner, type(self)))

    def scope(self, values: Sequence[Any]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        """The context manager the engine must run in for these inputs (64-bit
        dtypes on an engine that scopes them); by default none."""
        return contextlib.nullcontext

    # --- compiling programs (engines whose compiler fuses other programs) -----------

    def traceable_twin(self) -> Adapter | None:
        """The adapter of the same engine whose programs this adapter's compiler
        can trace into one compiled program (the eager twin of a compiled
        selector), or ``None`` when the engine does not fuse programs.

        A strategy wrapping this adapter (:class:`di.AutoSparse`) prepares its
        engine programs on the twin, composes them, and compiles the whole with
        :meth:`compile_program`.
        """
        return None

    def compiled_twin(self) -> Adapter | None:
        """The adapter of the same engine that compiles its programs (the compiled
        twin of an eager selector), or ``None`` when there is none (or this one
        compiles already).

        A strategy that makes many calls of one prepared program
        (:class:`di.AutoSparse`'s colored products) may prepare them on the twin,
        so that an eager selector compiles once at preparation instead of
        re-tracing at every call.
        """
        return None

    def compile_program(
        self,
        core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        *,
        on_first_use: bool = False,
    ) -> Program:
        """Compile ``core``, a function of engine-family values ``(x, [tangents,]
        *values)`` written with the twin's programs, into a program taking the
        caller's inputs (any family) with the static contexts compiled in and the
        engine's scope (64-bit dtypes) entered at each call.

        Args:
            core: the function to compile.
            x: the point of preparation (its family, dtype and shape).
            tangents: tangents of ``core``'s second argument, or ``None`` when it
                takes none.
            contexts: the contexts (static ones are compiled in).
            on_first_use: compile at the program's first call (once, across
                threads) rather than now.

        Returns:
            The program.

        Raises:
            UnsupportedOperatorError: the engine does not fuse programs (its
                :meth:`traceable_twin` is ``None``).
        """
        raise UnsupportedOperatorError(f"{self.backend!r} does not compile programs of its own engine into one.")

    def stacked_products(
        self, primitive: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Callable[..., Any] | None:
        """The batched (vectorised) form of ``primitive`` for a strategy that
        compiles it into one program with :meth:`compile_program` (a traceable
        twin's engine): ``at(x, *values) -> (value, apply)``, where ``apply(seeds)``
        maps a stack of seeds (leading axis: one seed per row) to the stack of
        their products in one batched pass, ``f`` traced once for every call of
        ``apply``. ``None`` (the default): no batched form; the strategy then
        takes the per-tangent programs.

        :class:`di.AutoSparse` computes its compressed products so: one seed matrix
        per batch of colors, rather than a tangent per color, which the trace
        handles leaf by leaf.

        Args:
            primitive: ``"pushforward"`` (``value`` is ``f(x)``, seeds shaped like
                ``x``), ``"pullback"`` (``value`` is ``f(x)``, seeds shaped like it)
                or ``"hvp"`` (``value`` is the gradient, seeds shaped like ``x``).
            f: the function, called as ``f(x, *context_values)``; ``x`` is an array.
            x: the point of preparation, in the engine's family.
            contexts: the contexts, in ``f``'s order.

        Returns:
            ``at``, a function of the engine's own values (traced by the compiler of
            the adapter whose twin this is), or ``None``.
        """
        return None

    # --- what the adapter implements ----------------------------------------------

    @classmethod
    def has_native(cls, family: str) -> bool:
        """Whether this adapter implements operator ``family`` itself (rather than
        leaving it to the generic fallbacks built from its primitives)."""
        return family in cls.capabilities.native

    @classmethod
    def has_primitive(cls) -> bool:
        """Whether the adapter implements a pushforward or a pullback, from which
        :mod:`di.backends.fallbacks` builds every other operator."""
        return cls.capabilities.has_primitive

    @classmethod
    def support(cls) -> dict[str, str]:
        """For each operator family: ``"native"``, ``"fallback"`` or ``"unsupported"``
        (:meth:`~di.backends.capabilities.Capabilities.support`); the documentation's tables show it."""
        return cls.capabilities.support()

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

    def output_shapes(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        """``f``'s output structure at arguments like these with each array leaf's
        shape in its place (:func:`~di.backends.outputs.output_leaf_shapes`), to
        check cotangents against at preparation; ``None`` when the output is not
        an array (the programs then refuse it with their own error). By default
        ``f`` is evaluated once."""
        y = self.prepare_value_program(f, x, contexts)(x, *[c.value for c in contexts])
        if is_pytree(y):  # an engine without pytree outputs: its programs refuse it, saying why
            return None
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
    # evaluation of f (see di.backends.aux), for the families its record lists in
    # ``aux``; the others are refused before the method is called.

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
