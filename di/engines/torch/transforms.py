"""Where a torch program runs: inside a ``torch.func`` transform, a
``torch.compile`` trace of the caller's code or a ``forward_ad`` level, or
eagerly. Eager autograd cannot run in the first three, so the programs choose
their ``torch.func`` form there (:func:`dispatching`), and ``Cache`` contexts are
refused inside transforms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.autograd.forward_ad as forward_ad

from di.backends.protocol import Program
from di.engines.torch.family import innermost_transform
from di.engines.torch.selector import AutoTorch
from di.errors import UnsupportedContextError, UnsupportedOperatorError

__all__ = [
    "dispatching",
    "dynamo_compiling",
    "forward_level",
    "functorch_active",
    "inside_transform",
    "active_transform",
    "CACHE_INSIDE_TRANSFORMS",
    "refusing_caches_inside_transforms",
]


functorch_active: Callable[[], bool] = torch._C._are_functorch_transforms_active
"""Whether a ``torch.func`` transform (``vmap``, ``grad``, ``jvp``, ...) is active."""

# False eagerly (about 30 ns), True while dynamo traces (it answers the call itself).
# torch.compiler.is_compiling says the same at three times the cost.
dynamo_compiling: Callable[[], bool] = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
"""Whether ``torch.compile`` (dynamo) is tracing the call."""


def inside_transform() -> bool:
    """Whether the call runs inside a ``torch.func`` transform (``vmap``, ``grad``,
    ``jvp``, ``jacrev``, ...) or is being traced by ``torch.compile``: eager
    autograd (``requires_grad_()``, ``torch.autograd.grad``) cannot run there, and
    the ``torch.func`` programs, which compose with both, run instead. A level of
    ``torch.autograd.forward_ad`` (``dual_level()``) counts too: ``x`` may carry a
    tangent there, which a detached alias would drop. Costs about 0.1 us on the
    eager hot path."""
    return dynamo_compiling() or functorch_active() or forward_level() >= 0


def forward_level() -> int:
    """The active ``torch.autograd.forward_ad`` level, -1 outside ``dual_level()``
    (a module attribute read: about 20 ns)."""
    return int(forward_ad._current_level)


def dispatching(program: Program, traced: Program, name: str, backend: Any) -> Program:
    """``program``, or ``traced`` inside a ``torch.func`` transform, a
    ``torch.compile`` trace of the caller's code or a ``forward_ad`` level (decided
    at each call). In a ``forward_ad`` level torch cannot nest the forward mode of
    ``name``'s program: that is said, naming what works there.

    Raises:
        UnsupportedOperatorError: a forward-mode program inside ``dual_level()``."""

    def run(*args: Any) -> Any:
        if inside_transform():
            try:
                return traced(*args)
            except RuntimeError as err:
                if forward_level() < 0 or "forward mode" not in str(err):
                    raise
                raise UnsupportedOperatorError(
                    f"{backend!r}: {name} runs torch's forward mode, which torch cannot nest inside "
                    f"torch.autograd.forward_ad.dual_level(). Call it outside the dual level, take the outer "
                    f"derivative with torch.func.jvp around the di call instead of forward_ad, or use a "
                    f"reverse-mode operator there (gradient, pullback), which keep x's tangent."
                ) from err
        return program(*args)

    return run


def active_transform() -> str:
    """The innermost active transform, as a user writes it (``"torch.func.vmap"``;
    ``jacrev`` and ``vjp`` are ``grad`` levels, ``jacfwd`` ``jvp`` ones), or
    ``"torch.compile"`` while dynamo traces; ``""`` outside both."""
    return "torch.compile" if dynamo_compiling() else innermost_transform()


CACHE_INSIDE_TRANSFORMS = (
    "cannot use Cache contexts inside {transform}: f would write values the transform traces into the "
    "buffer, which torch.func cannot do. Pass the buffer as a Constant and build new tensors in f, or call "
    "di outside the transform."
)
"""The refusal of ``Cache`` contexts inside ``torch.func`` transforms (the transforms
table of :class:`TorchAdapter` shows it)."""


def refusing_caches_inside_transforms(program: Program, backend: AutoTorch) -> Program:
    """``program`` (one writing into a ``Cache``), refusing to run inside a
    ``torch.func`` transform with :class:`di.UnsupportedContextError`. Under a
    ``torch.compile`` trace of the caller's code it runs (dynamo breaks the
    graph around its eager autograd)."""

    def refusing(*args: Any) -> Any:
        if functorch_active():
            message = CACHE_INSIDE_TRANSFORMS.format(transform=innermost_transform() or "a torch.func transform")
            raise UnsupportedContextError(f"{backend!r} {message}")
        return program(*args)

    return refusing
