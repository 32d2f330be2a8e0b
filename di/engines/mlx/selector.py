"""MLX's selector: :class:`AutoMLX`. Building one imports nothing."""

from __future__ import annotations

from dataclasses import dataclass

from di.backends.selectors import AbstractBackend, check_flags, check_mode

__all__ = ["AutoMLX"]


@dataclass(frozen=True)
class AutoMLX(AbstractBackend):
    """MLX (Apple's array framework; its Linux CPU build too).

    Args:
        compile: ``False`` runs MLX's transforms (``mx.grad``, ``mx.vjp``,
            ``mx.jvp``, ``mx.vmap``) op by op on every call, so Python control
            flow on values works. ``True`` runs each operator's program under
            ``mx.compile``, traced once per signature, with ``Constant`` arrays
            and floats as program inputs (a new value runs the same program);
            ints, strings and other hashable values are compiled in.
        mode: ``"forward"`` or ``"reverse"`` to force the strategy of
            ``jacobian``; ``None`` picks forward mode when ``x`` has fewer
            elements than ``f(x)`` (at equal sizes MLX's vectorised pullbacks
            are the faster).

    Results are evaluated (``mx.eval``) before they are returned: MLX is lazy,
    and a result that is not computed yet would make timings lie.

    Examples:
        >>> import di
        >>> di.AutoMLX(compile=True)
        AutoMLX(compile=True, mode=None)
    """

    compile: bool = False
    mode: str | None = None

    def __post_init__(self) -> None:
        check_flags(self, "compile")
        check_mode("AutoMLX", self.mode)
