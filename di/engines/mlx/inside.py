"""A call run inside MLX's own transforms (the ``run`` hooks of
:data:`di.engines.mlx.adapter.COMPOSITIONS`): what the differential fuzzer
(:mod:`di.testing.fuzz`) compares with the same call made outside them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx.utils import tree_map

__all__ = ["compile", "vmap"]


def compile(call: Callable[[Any], Any], x: Any) -> Any:
    """``mx.compile(call)(x)``: ``call`` traced into one compiled program.

    Examples:
        >>> import mlx.core as mx
        >>> from di.engines.mlx.inside import compile
        >>> compile(lambda x: x * 2.0, mx.ones(())).item()
        2.0
    """
    return mx.compile(call)(x)


def vmap(call: Callable[[Any], Any], x: Any) -> Any:
    """``call(x)`` computed by ``mx.vmap`` over a batch of ``x`` and another point
    (``0.75 x``): the first result.

    Examples:
        >>> import mlx.core as mx
        >>> from di.engines.mlx.inside import vmap
        >>> vmap(lambda x: x * 2.0, mx.ones(())).item()
        2.0
    """
    batch = tree_map(lambda leaf: mx.stack([leaf, leaf * 0.75]), x)
    return tree_map(lambda result: result[0], mx.vmap(call)(batch))
