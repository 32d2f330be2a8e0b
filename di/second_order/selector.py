"""The selector of :class:`SecondOrder`, beside its strategy. Building one imports nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from di.backends.selectors import AbstractBackend, default_selector, not_a_selector
from di.errors import InvalidOptionTypeError

__all__ = ["SecondOrder"]


@dataclass(frozen=True)
class SecondOrder(AbstractBackend):
    """Second order by differentiating one backend's gradient with another.

    ``hvp`` and ``hessian`` take the ``outer`` backend's pushforward of the
    ``inner`` backend's gradient; first-order operators use ``inner``. The outer
    backend must be able to differentiate the inner one's program: finite
    differences can differentiate anything, JAX can differentiate JAX.

    Args:
        outer: the backend differentiating the gradient (forward mode is used).
        inner: the backend computing the gradient.

    Examples:
        >>> import di
        >>> di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX())
        SecondOrder(outer=AutoFiniteDiff(method='central', step=None), inner=AutoJAX(jit=False, mode=None))
    """

    outer: AbstractBackend = field(default_factory=lambda: default_selector("SecondOrder.outer"))
    inner: AbstractBackend = field(default_factory=lambda: default_selector("SecondOrder.inner"))
    engine_display: ClassVar[str] = "its two backends"
    strategy: ClassVar[str] = "di.second_order.strategy:SecondOrderStrategy"

    def __post_init__(self) -> None:
        for option in ("outer", "inner"):
            given = getattr(self, option)
            if not isinstance(given, AbstractBackend):
                raise InvalidOptionTypeError(
                    f"SecondOrder({option}=...) must be a backend selector such as di.AutoJAX(), not "
                    f"{not_a_selector(given)}"
                )

    @property
    def is_installed(self) -> bool:
        """Whether both engines are installed."""
        return self.outer.is_installed and self.inner.is_installed
