"""``SecondOrder(outer, inner)``: one backend differentiating another's gradient."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from di.backends import fallbacks
from di.backends.aux import aux_converter
from di.backends.fallbacks import programs, rewrap_context
from di.backends.protocol import Adapter, Programs
from di.backends.registry import get_adapter
from di.backends.selectors import AbstractBackend, SecondOrder, available_backends
from di.contexts import Context
from di.errors import UnsupportedOperatorError
from di.families import converter, family_of, identity

__all__ = ["SecondOrderAdapter", "supported_pairs"]


def first_order_adapter(adapter: Adapter) -> Adapter:
    """The adapter whose programs a (possibly nested) SecondOrder's first-order
    operators run: the innermost ``inner``."""
    while isinstance(adapter, SecondOrderAdapter):
        adapter = adapter.inner
    return adapter


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
        >>> from di.backends.second_order import supported_pairs
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


class SecondOrderAdapter(Adapter):
    """Adapter for :class:`di.SecondOrder`.

    ``hvp`` is the outer adapter's pushforward of the inner adapter's gradient
    program; ``hessian`` stacks hvps of the unit tangents; first-order operators
    are the inner adapter's. Results are in the outer engine's family (the
    operator layer converts them to the caller's).
    """

    def __init__(self, backend: SecondOrder) -> None:  # type: ignore[override]
        super().__init__(backend)
        self.outer = get_adapter(backend.outer)
        self.inner = get_adapter(backend.inner)
        for part in (self.outer, self.inner):
            if hasattr(part, "prepare_whole"):  # it chooses among whole preps (di.AutoFastest): no programs to nest
                raise UnsupportedOperatorError(
                    f"{backend!r}: {part.backend!r} cannot be a part of SecondOrder, because it chooses among "
                    f"whole preps and has no programs of its own to differentiate. Put SecondOrder backends "
                    f"among its candidates instead, e.g. AutoFastest(candidates=[SecondOrder(AutoFiniteDiff(), "
                    f"AutoJAX()), AutoJAX()])."
                )
        self.family = self.outer.family  # type: ignore[misc]
        self.supports_cache = self.inner.supports_cache and self.outer.supports_cache  # type: ignore[misc]
        self.cache_note = self.inner.cache_note or self.outer.cache_note  # type: ignore[misc]

    def check_pair(self, operator: str) -> None:
        """Refuse, at preparation, a second-order ``operator`` whose outer engine
        cannot differentiate the inner one's programs.

        Raises:
            UnsupportedOperatorError: naming both engines and the pairs that work.
        """
        outer, inner = first_order_adapter(self.outer), first_order_adapter(self.inner)
        if outer.differentiates_programs_of(inner):
            return
        pairs = ", ".join(f"SecondOrder({type(o).__name__}(), {type(i).__name__}())" for o, i in supported_pairs())
        raise UnsupportedOperatorError(
            f"{self.backend!r} cannot compute {operator}: the outer backend {outer.backend!r} cannot differentiate "
            f"the programs of the inner backend {inner.backend!r} (it would call them with its own traced values). "
            f"Pairs that work here: {pairs}. For second order on one engine, use its backend alone: it computes "
            f"hvp and hessian natively (forward over reverse)."
        )

    def check_contexts(self, contexts: Sequence[Context]) -> None:
        self.inner.check_contexts(contexts)
        self.outer.check_contexts(contexts)

    def scope(self, values: Sequence[Any]) -> Any:
        return self.outer.scope(values)

    def _from_inner(self, programs: Programs, has_aux: bool = False) -> Programs:
        """Inner programs with their results (and the arrays of their ``aux``)
        converted to the outer family."""
        convert = converter(self.inner.family, self.outer.family)
        if convert is identity:
            return programs
        convert_aux = aux_converter(self.inner.family, self.outer.family)

        def nested(result: Any) -> Any:
            return tuple(nested(r) for r in result) if isinstance(result, tuple) else convert(result)

        def with_aux(output: Any) -> Any:
            result, aux = output
            return nested(result), convert_aux(aux)

        finish = with_aux if has_aux else nested

        def wrap(program: Callable[..., Any]) -> Callable[..., Any]:
            return lambda *args: finish(program(*args))

        return {name: wrap(program) for name, program in programs.items()}

    def prepare_value_program(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        program = self.inner.prepare_value_program(f, x, contexts)
        return self._from_inner({"value": program})["value"]

    def _first_order(
        self,
        operator: str,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        tangents: Sequence[Any] | None,
        has_aux: bool,
    ) -> Programs:
        inner = programs(self.inner, operator, f, x, contexts, tangents, has_aux=has_aux)
        return self._from_inner(inner, has_aux)

    def prepare_pushforward_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        return self._first_order("pushforward", f, x, contexts, tx, has_aux)

    def prepare_pullback_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        return self._first_order("pullback", f, x, contexts, ty, has_aux)

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        return self._first_order("gradient", f, x, contexts, None, has_aux)

    def prepare_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        return self._first_order("derivative", f, x, contexts, None, has_aux)

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        return self._first_order("jacobian", f, x, contexts, None, has_aux)

    def _inner_function(
        self, operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Callable[..., Any]:
        """The inner backend's ``operator`` program (gradient or derivative) as a
        function the outer backend can differentiate: prepared for arguments in the
        outer family, which is what the outer adapter calls it with, and returning
        results in that family."""
        x_outer = converter(family_of(x), self.outer.family)(x) if not isinstance(x, float) else x
        outer_contexts = [
            rewrap_context(c, converter(family_of(c.value), self.outer.family)(c.value)) for c in contexts
        ]
        inner = programs(self.inner, operator, f, x_outer, outer_contexts)[operator]
        convert = converter(self.inner.family, self.outer.family)

        def in_outer_family(x: Any, *values: Any) -> Any:
            return convert(inner(x, *values))

        return in_outer_family

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        self.check_pair("hvp")
        gradient = self._inner_function("gradient", f, x, contexts)
        outer = programs(self.outer, "pushforward", gradient, x, contexts, tx)
        return {"hvp": outer["pushforward"], "gradient_and_hvp": outer["value_and_pushforward"]}

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        self.check_pair("hessian")
        return fallbacks.hessian_programs(self, f, x, contexts)

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        self.check_pair("second_derivative")
        derivative = self._inner_function("derivative", f, x, contexts)
        outer = programs(self.outer, "derivative", derivative, x, contexts)["value_and_derivative"]
        value = self.prepare_value_program(f, x, contexts)

        def value_derivative_and_second_derivative(x: Any, *values: Any) -> Any:
            d, d2 = outer(x, *values)
            return value(x, *values), d, d2

        return {
            "second_derivative": lambda x, *values: outer(x, *values)[1],
            "value_derivative_and_second_derivative": value_derivative_and_second_derivative,
        }
