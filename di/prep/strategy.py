"""Strategies: backends that wrap other backends (AutoSparse, SecondOrder, AutoFastest).

A strategy is not an engine: it has no programs of its own. The operator layer
hands it a :class:`PrepareRequest` (what ``prepare_<operator>`` was called with)
and a :class:`Preparer` (the operator layer's own preparation, offered back), and
the strategy returns the :class:`~di.prep.base.Prep`: by preparing on another
backend (:meth:`Preparer.with_backend`), or from programs it builds itself over
the adapter protocol (:meth:`Preparer.with_source`). What it found on the way
(a sparsity pattern, a plan) goes into the prep's :attr:`~di.prep.base.Prep.info`.

A selector names its strategy in its ``strategy`` class attribute
(``"module:Class"``, imported on first use); :func:`di.backends.registry.get_strategy`
returns the instance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from di.prep.base import Prep
from di.prep.facts import ArgumentFacts
from di.prep.info import StrategyInfo

if TYPE_CHECKING:
    from di.backends.selectors import AbstractBackend
    from di.backends.source import ProgramSource
    from di.contexts import Context

__all__ = ["PrepareRequest", "Preparer", "Strategy"]


@dataclass(frozen=True)
class PrepareRequest:
    """The arguments of one ``prepare_<operator>`` call, as a strategy sees them.

    Attributes:
        operator: the operator family (``"gradient"``, ``"hvp"``, ...).
        f: the function.
        x: the point (its type, shape and structure are what preps serve).
        tangents: the tangents (``pushforward``, ``hvp``) or cotangents
            (``pullback``), else ``None``.
        contexts: the context wrappers, in ``f``'s order.
        strict: whether the prep checks each call's arguments.
        same_point: whether the prep serves one point only.
        has_aux: whether ``f`` returns ``(y, aux)``.
        value: whether the caller runs the combined form (``value_and_*``):
            compiled backends compile it ahead of time, the plain one lazily.
        facts: what the preparation found of ``x`` and the contexts' values
            (:class:`~di.prep.facts.ArgumentFacts`), for the steps after it to ask
            no more.

    Examples:
        >>> import numpy as np
        >>> from di.prep.strategy import PrepareRequest
        >>> PrepareRequest("gradient", sum, np.zeros(2), None, (), True).operator_key
        'gradient'
    """

    operator: str
    f: Callable[..., Any]
    x: Any
    tangents: tuple[Any, ...] | None
    contexts: tuple[Context, ...]
    strict: bool
    same_point: bool = False
    has_aux: bool = False
    value: bool = False
    facts: ArgumentFacts | None = field(default=None, compare=False, repr=False)

    @property
    def operator_key(self) -> str:
        """The operator family, marked when the prep serves one point."""
        return f"{self.operator}_same_point" if self.same_point else self.operator


class Preparer(Protocol):
    """What the operator layer offers a strategy to build its prep with."""

    def with_backend(self, backend: AbstractBackend) -> Prep:
        """The prep of this request on another backend (engine or strategy)."""

    def with_source(self, source: ProgramSource, backend: AbstractBackend, info: StrategyInfo | None = None) -> Prep:
        """The prep of this request from ``source``'s programs, answering to
        ``backend``, with ``info`` as its :attr:`~di.prep.base.Prep.info`."""

    def runner(self, prep: Prep, backend: AbstractBackend) -> Callable[[], Any]:
        """A zero-argument function making the whole public call of this
        request's plain operator on ``prep`` (conversions included)."""


class Strategy:
    """Base class of the preparation hook of a wrapping backend.

    Examples:
        >>> import di
        >>> from di.backends.registry import get_strategy
        >>> from di.prep.strategy import Strategy
        >>> isinstance(get_strategy(di.SecondOrder()), Strategy)
        True
    """

    def engine(self, backend: AbstractBackend) -> AbstractBackend | None:
        """The backend whose engine runs ``backend``'s first-order programs (the
        wrapped one), or ``None`` when it depends on the arguments (a planner)."""
        return None

    def products_as_jacobian(self, backend: AbstractBackend) -> bool:
        """Whether several pushforwards or pullbacks at one point cost less as one
        Jacobian of ``backend`` (a sparse one: colored), which
        :class:`di.DifferentiateWith` then computes instead; ``False`` by default."""
        return False

    def support(self, backend: AbstractBackend) -> dict[str, str]:
        """For each operator family, how ``backend`` computes it, in words (the
        documentation's support tables show it)."""
        raise NotImplementedError

    def prepare(self, backend: AbstractBackend, request: PrepareRequest, preparer: Preparer) -> Prep:
        """The prep of ``request`` for the selector ``backend``."""
        raise NotImplementedError
