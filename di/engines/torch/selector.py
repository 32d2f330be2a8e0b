"""PyTorch's selector: :class:`AutoTorch`. Building one imports nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from di.backends.selectors import AbstractBackend, check_flags, check_mode
from di.errors import InvalidOptionTypeError

__all__ = ["AutoTorch"]


@dataclass(frozen=True)
class AutoTorch(AbstractBackend):
    """PyTorch.

    Args:
        compile: ``True`` builds the operator's program once at preparation and
            wraps it in ``torch.compile``.
        compile_options: keyword arguments for ``torch.compile`` (for example
            ``{"backend": "aot_eager"}``); stored as a sorted tuple of pairs so the
            selector stays hashable.
        mode: ``"forward"`` or ``"reverse"`` to force the strategy of
            ``jacobian``; ``None`` picks forward mode when ``x`` has no more
            elements than ``f(x)``. (``derivative`` always uses forward mode.)
        create_graph: when ``x``, a ``Constant`` or a tangent requires grad and
            grad mode is on, results carry the caller's autograd graph, as
            ``torch.autograd.grad(..., create_graph=True)`` and ``torch.func``
            give them (gradient penalties, meta-learning, implicit
            differentiation); ``False`` detaches them. When nothing requires
            grad, results never carry a graph either way.

    Examples:
        >>> import di
        >>> di.AutoTorch(compile=True, compile_options={"backend": "eager"}).compile_options
        (('backend', 'eager'),)
    """

    compile: bool = False
    compile_options: Any = field(default=None)
    mode: str | None = None
    create_graph: bool = True

    def __post_init__(self) -> None:
        check_flags(self, "compile", "create_graph")
        check_mode("AutoTorch", self.mode)
        options = self.compile_options
        if isinstance(options, Mapping):
            object.__setattr__(self, "compile_options", tuple(sorted(options.items())))
        elif options is not None and not isinstance(options, tuple):
            raise InvalidOptionTypeError(
                f"AutoTorch(compile_options={options!r}): compile_options must be a mapping of torch.compile "
                f"keyword arguments, such as {{'backend': 'aot_eager'}}, or None"
            )

    @property
    def compile_kwargs(self) -> dict[str, Any]:
        """``compile_options`` as the keyword arguments of ``torch.compile``."""
        return dict(self.compile_options or ())
