"""The array namespace :func:`di.array_namespace` answers for MLX arrays (the
record's :class:`~di.backends.engine.NamespaceOverride`): ``mlx.core`` with the
array API's few missing names and a dtype-keeping ``asarray``
(:mod:`di.engines.mlx.functions`)."""

from __future__ import annotations

from typing import Any

__all__ = ["build_namespace"]


def build_namespace() -> Any:
    """The namespace ``f`` computes with on MLX arrays, traced or not.

    Examples:
        >>> import mlx.core as mx, di
        >>> xp = di.array_namespace(mx.ones(2))
        >>> xp.__name__, xp.concat is mx.concat
        ('di_mlx_namespace', True)
    """
    from di.engines.mlx.functions import build_namespace as build

    return build()
