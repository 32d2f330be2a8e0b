"""JAX's selector: :class:`AutoJAX`. Building one imports nothing."""

from __future__ import annotations

from dataclasses import dataclass

from di.backends.selectors import AbstractBackend, check_flags, check_mode

__all__ = ["AutoJAX"]


@dataclass(frozen=True)
class AutoJAX(AbstractBackend):
    """JAX.

    Args:
        jit: ``False`` runs ``f`` eagerly, op by op, every call (Python control
            flow on values works; each call re-traces). ``True`` compiles one
            program per operator at preparation with ``jax.jit``; see
            ``docs/compiled.md`` for which contexts are traced and which are
            compiled in.
        mode: ``"forward"`` or ``"reverse"`` to force the strategy of
            ``jacobian``; ``None`` picks forward mode when ``x`` has no more
            elements than ``f(x)``. (``derivative`` always uses forward mode.)

    Examples:
        >>> import di
        >>> di.AutoJAX(jit=True)
        AutoJAX(jit=True, mode=None)
    """

    jit: bool = False
    mode: str | None = None

    def __post_init__(self) -> None:
        check_flags(self, "jit")
        check_mode("AutoJAX", self.mode)
