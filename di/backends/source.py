"""Program sources: where the operator layer gets a prep's programs from.

An engine's adapter is one (:class:`ProgramSource` wraps it: its native
programs, else the generic fallbacks built from its primitives). A strategy that
builds programs itself over the protocol (SecondOrder's outer-over-inner
derivatives, AutoSparse's colored Jacobians) is another: it subclasses
:class:`ProgramSource` and overrides :meth:`~ProgramSource.programs`, so the
operator layer wraps its programs exactly as an engine's (caller-family
conversion, pytrees, auxiliary outputs) without the strategy posing as an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from di.backends import fallbacks
from di.backends.protocol import Adapter, Programs
from di.backends.selectors import engine_of
from di.contexts import Context

__all__ = ["ProgramSource"]


class ProgramSource:
    """The programs of one adapter, as the operator layer asks for them.

    Args:
        adapter: the engine's adapter.

    Attributes:
        adapter: the adapter whose engine runs the programs.
        family: the array family of the programs' results.
        converts_results: whether the operator layer converts results to the
            caller's family (``False`` for sources whose programs already return
            the caller's types, such as sparse matrices).

    Examples:
        >>> import numpy as np, di
        >>> from di.backends.registry import get_adapter
        >>> from di.backends.source import ProgramSource
        >>> source = ProgramSource(get_adapter(di.AutoFiniteDiff()))
        >>> gradient = source.programs("gradient", lambda x: (x * x).sum(), np.zeros(2), [])["gradient"]
        >>> gradient(np.array([1.0, 2.0])).round(6)
        array([2., 4.])
    """

    converts_results = True

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.family = adapter.capabilities.family

    @property
    def takes(self) -> tuple[str, str]:
        """What the engine runs on besides concrete arrays: its family's arrays,
        traced or not, and the traced values of its own engine (its record's
        name, as :class:`~di.backends.engine.TracedValues` are registered under)."""
        record = engine_of(self.adapter.backend)
        return self.family, record.name if record is not None else ""

    @property
    def evaluates_in_float64(self) -> bool:
        """Whether ``f`` is evaluated in float64 whatever the input dtype."""
        return self.adapter.capabilities.float64

    @property
    def checks_own_pytrees(self) -> bool:
        """Whether the engine flattens pytrees with a registry of its own (it then
        checks their leaves itself)."""
        return type(self.adapter).tree_map is not Adapter.tree_map

    def check_contexts(self, contexts: Sequence[Context]) -> None:
        """Refuse, up front, contexts the engine cannot pass to ``f``."""
        self.adapter.check_contexts(contexts)

    def takes_pytree(self, operator: str, x: Any) -> bool:
        """Whether ``operator``'s programs take the pytree ``x`` as it is (else the
        operator layer flattens it into one vector)."""
        return self.adapter.takes_pytrees_natively(operator) and self.adapter.takes_pytree(x)

    def tree_map(self, function: Callable[[Any], Any], tree: Any) -> Any:
        """Map over the leaves of ``tree`` as the engine sees pytrees."""
        return self.adapter.tree_map(function, tree)

    def output_shapes(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        """The shapes of ``f``'s output leaves at these arguments (``None`` when not arrays)."""
        return self.adapter.output_shapes(f, x, contexts)

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
        """The programs of ``operator`` (an operator family, or a same-point one
        such as ``"hvp_same_point"``), taking caller-family inputs and returning
        arrays of :attr:`family`."""
        return fallbacks.programs(self.adapter, operator, f, x, contexts, tangents, has_aux=has_aux)
