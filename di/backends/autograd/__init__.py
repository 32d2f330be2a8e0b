"""HIPS autograd: the adapter (:mod:`.adapter`) and the array namespace ``f`` computes
with on autograd's traced values (:mod:`.namespace`), which :func:`di.array_namespace`
finds through the engine's record.

Importing this package imports no engine: the adapter (which imports autograd) is
loaded when a prep first needs it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AutogradAdapter"]


def __getattr__(name: str) -> Any:
    if name == "AutogradAdapter":  # imported on use: it imports autograd
        from di.backends.autograd.adapter import AutogradAdapter

        return AutogradAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
