"""HIPS autograd's selector: :class:`AutoAutograd`. Building one imports nothing."""

from __future__ import annotations

from dataclasses import dataclass

from di.backends.selectors import AbstractBackend

__all__ = ["AutoAutograd"]


@dataclass(frozen=True)
class AutoAutograd(AbstractBackend):
    """HIPS autograd (reverse mode over NumPy code).

    ``f`` must be written with ``autograd.numpy`` or the array API. ``Cache``
    contexts are not supported: autograd cannot write traced values into arrays.

    Examples:
        >>> import di
        >>> di.AutoAutograd()
        AutoAutograd()
    """
