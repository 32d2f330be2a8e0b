"""``SecondOrder(outer, inner)``: one backend differentiating another's gradient.

A strategy, not an engine: first-order operators are the inner backend's preps
(answering to the SecondOrder selector), and second-order ones come from a
:class:`SecondOrderSource`: the outer adapter's pushforward (hvp), Jacobian
(hessian) or derivative (second derivative) of a program the inner adapter
prepared, called with the outer engine's values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from di.backends import fallbacks
from di.backends.capabilities import OPERATOR_FAMILIES as FAMILIES
from di.backends.outputs import OutputRules, check_output
from di.backends.protocol import Adapter, Programs, checked_program, keeping_error
from di.backends.registry import get_adapter, get_strategy
from di.backends.selectors import AbstractBackend, available_backends
from di.backends.source import ProgramSource
from di.contexts import Context, rewrap_context
from di.errors import UnsupportedOperatorError
from di.families import converter, family_of, get_family, identity, is_floating_dtype
from di.prep.base import Prep
from di.prep.strategy import Preparer, PrepareRequest, Strategy
from di.second_order.selector import SecondOrder

__all__ = ["SecondOrderSource", "SecondOrderStrategy", "supported_pairs"]

SECOND_ORDER = frozenset({"hvp", "hessian", "second_derivative"})


def first_order_backend(backend: AbstractBackend, whole: SecondOrder) -> AbstractBackend:
    """The engine backend whose programs ``backend``'s first-order operators run:
    ``backend`` itself, or the one its strategy wraps (:meth:`Strategy.engine`:
    the innermost ``inner`` of nested SecondOrders, the dense backend of an
    AutoSparse).

    Raises:
        UnsupportedOperatorError: ``backend`` chooses among whole preps
            (:class:`di.AutoFastest`: its strategy wraps no one backend) and has no
            programs of its own.
    """
    while True:
        if isinstance(backend, SecondOrder):  # unwrapped here, so that a refusal names the whole
            backend = backend.inner
            continue
        strategy = get_strategy(backend)
        if strategy is None:
            return backend
        wrapped = strategy.engine(backend)
        if wrapped is None:
            raise UnsupportedOperatorError(
                f"{whole!r}: {backend!r} cannot be a part of SecondOrder, because it chooses among whole preps "
                f"and has no programs of its own to differentiate. Put SecondOrder backends among its candidates "
                f"instead, e.g. AutoFastest(candidates=[SecondOrder(AutoFiniteDiff(), AutoJAX()), AutoJAX()])."
            )
        backend = wrapped


def supported_pairs(backends: list[AbstractBackend] | None = None) -> list[tuple[AbstractBackend, AbstractBackend]]:
    """The ``(outer, inner)`` pairs of backends with which :class:`di.SecondOrder`
    computes ``hvp``, ``hessian`` and ``second_derivative``.

    Args:
        backends: the backends to pair (default: :func:`di.available_backends`,
            whose engines this imports).

    Returns:
        Every supported pair, in the order of ``backends``.

    Examples:
        >>> import di
        >>> from di.second_order.strategy import supported_pairs
        >>> supported_pairs([di.AutoFiniteDiff()])
        [(AutoFiniteDiff(method='central', step=None), AutoFiniteDiff(method='central', step=None))]
    """
    candidates = available_backends() if backends is None else backends
    return [
        (outer, inner)
        for outer in candidates
        for inner in candidates
        if get_adapter(outer).differentiates_programs_of(get_adapter(inner))
    ]


class SecondOrderStrategy(Strategy):
    """The preparation hook of :class:`di.SecondOrder`.

    Examples:
        >>> import numpy as np, di
        >>> backend = di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff())
        >>> di.hvp(lambda x: (x ** 3).sum(), backend, np.array([1.0, 2.0]), (np.ones(2),))[0].round(3)
        array([ 6., 12.])
    """

    def engine(self, backend: AbstractBackend) -> AbstractBackend | None:
        assert isinstance(backend, SecondOrder)
        return first_order_backend(backend, backend)

    def support(self, backend: AbstractBackend) -> dict[str, str]:
        return {family: "outer over inner" if family in SECOND_ORDER else "as the inner backend" for family in FAMILIES}

    def prepare(self, backend: AbstractBackend, request: PrepareRequest, preparer: Preparer) -> Prep:
        assert isinstance(backend, SecondOrder)
        outer = get_adapter(first_order_backend(backend.outer, backend))
        inner = get_adapter(first_order_backend(backend.inner, backend))
        inner.check_contexts(request.contexts)
        outer.check_contexts(request.contexts)
        if request.operator not in SECOND_ORDER:
            return preparer.with_backend(backend.inner).with_backend(backend)
        if not outer.differentiates_programs_of(inner):
            pairs = ", ".join(f"SecondOrder({type(o).__name__}(), {type(i).__name__}())" for o, i in supported_pairs())
            raise UnsupportedOperatorError(
                f"{backend!r} cannot compute {request.operator}: the outer backend {outer.backend!r} cannot "
                f"differentiate the programs of the inner backend {inner.backend!r} (it would call them with its "
                f"own traced values). Pairs that work here: {pairs}. For second order on one engine, use its "
                f"backend alone: it computes hvp and hessian natively (forward over reverse)."
            )
        return preparer.with_source(SecondOrderSource(outer, inner), backend)


class SecondOrderSource(ProgramSource):
    """Second-order programs: the outer adapter differentiating the inner one's
    first-order program. Results are in the outer engine's family.

    When the outer engine evaluates in float64 (finite differences), the inner
    program is prepared for float64 arguments and receives float64 context values,
    so the caller's float32 survives both engines (the result is cast back) and
    no engine sees mixed precisions.
    """

    def __init__(self, outer: Adapter, inner: Adapter) -> None:
        super().__init__(outer)
        self.inner = inner

    def check_contexts(self, contexts: Sequence[Context]) -> None:
        self.inner.check_contexts(contexts)
        self.adapter.check_contexts(contexts)

    def programs(
        self,
        operator: str,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        tangents: Sequence[Any] | None = None,
        *,
        has_aux: bool = False,
    ) -> Programs:
        outer = self.adapter
        if operator in ("hvp", "hvp_same_point"):  # at one point, as at every point: no linearisation to keep
            gradient = self._inner_function("gradient", f, x, contexts)
            pushforward = super().programs("pushforward", gradient, x, contexts, tangents)
            return {"hvp": pushforward["pushforward"], "gradient_and_hvp": pushforward["value_and_pushforward"]}
        value = self._inner_value(operator, f, x, contexts)
        if operator == "hessian":
            gradient = self._inner_function("gradient", f, x, contexts)
            jacobians = super().programs("jacobian", gradient, x, contexts)
            return _with_value(value, jacobians["jacobian"], jacobians["value_and_jacobian"], "hessian")
        if operator == "second_derivative":
            derivative = self._inner_function("derivative", f, x, contexts)
            derivatives = super().programs("derivative", derivative, x, contexts)
            return _with_value(
                value, derivatives["derivative"], derivatives["value_and_derivative"], "second_derivative"
            )
        raise UnsupportedOperatorError(f"{outer.backend!r}: SecondOrder prepares {operator} on its inner backend")

    def _float64(self) -> bool:
        return self.adapter.capabilities.float64

    def _inner_value(
        self, operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Callable[..., Any]:
        """``f``'s value by the inner engine, in the outer family, as a backend alone
        returns it (:mod:`di.backends.outputs`): a one-element value of hessian's
        ``f`` as a 0-d array, and an array the caller owns. Where no conversion
        into the outer family made a fresh array, it is copied: a NumPy scalar
        then becomes a writable 0-d array, and a view of ``x`` or of a context
        value (an engine that only evaluates ``f`` hands it back) its own array.
        The inner derivative program, called first, checked ``f``'s output by its
        engine's rules: here only its shape is made the operator's."""
        program = self.inner.prepare_value_program(f, x, contexts)
        convert = converter(self.inner.capabilities.family, self.adapter.capabilities.family)
        own = get_family(self.adapter.capabilities.family).copy if convert is identity else identity
        backend, rules = self.inner.backend, OutputRules()

        def value(x: Any, *values: Any) -> Any:
            return own(convert(check_output(program(x, *values), x, backend, operator, rules)))

        return value

    def _inner_function(
        self, operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Callable[..., Any]:
        """The inner backend's ``operator`` program (gradient or derivative) as a
        function the outer backend can differentiate: prepared for arguments in the
        outer family (float64 when the outer engine evaluates in float64), which is
        what the outer adapter calls it with, and returning results in that family."""
        outer = self.adapter.capabilities.family
        widen = _widening(outer) if self._float64() else identity
        x_outer = widen(converter(family_of(x), outer)(x)) if not isinstance(x, float) else x
        outer_contexts = [rewrap_context(c, widen(converter(family_of(c.value), outer)(c.value))) for c in contexts]
        inner = fallbacks.programs(self.inner, operator, f, x_outer, outer_contexts)[operator]
        if widen is identity:
            return checked_program(self._in_outer_family(inner))
        to_outer = converter(self.inner.capabilities.family, self.adapter.capabilities.family)

        def in_float64(x: Any, *values: Any) -> Any:
            return to_outer(inner(x, *[widen(v) for v in values]))

        return checked_program(keeping_error(in_float64, inner))

    def _in_outer_family(self, program: Callable[..., Any]) -> Callable[..., Any]:
        convert = converter(self.inner.capabilities.family, self.adapter.capabilities.family)
        if convert is identity:
            return program

        def in_outer_family(*args: Any) -> Any:
            return convert(program(*args))

        return keeping_error(in_outer_family, program)


def _widening(family: str) -> Callable[[Any], Any]:
    """Floating arrays of ``family`` as float64; anything else as it is."""
    record = get_family(family)

    def widen(value: Any) -> Any:
        if family_of(value) == family and is_floating_dtype(value.dtype):
            return record.astype(value, "float64")
        return value

    return widen


def _with_value(value: Callable[..., Any], plain: Callable[..., Any], full: Callable[..., Any], name: str) -> Programs:
    """An operator family whose combined form prepends ``f``'s value to the
    outer operator's ``(first order, second order)`` pair."""

    def combined(x: Any, *values: Any) -> Any:
        first, second = full(x, *values)
        return value(x, *values), first, second

    combined_name = "value_gradient_and_hessian" if name == "hessian" else "value_derivative_and_second_derivative"
    return {name: plain, combined_name: combined}
