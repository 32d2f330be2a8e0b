"""A call run inside JAX's own transforms (the ``run`` hooks of
:data:`di.engines.jax.adapter.COMPOSITIONS`): what the differential fuzzer
(:mod:`di.testing.fuzz`) compares with the same call made outside them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from di.engines.jax.x64 import x64_scope

__all__ = ["jit", "vmap"]


def jit(call: Callable[[Any], Any], x: Any) -> Any:
    """``jax.jit(call)(x)``: ``call`` traced into one compiled program.

    Examples:
        >>> import jax.numpy as jnp
        >>> from di.engines.jax.inside import jit
        >>> float(jit(lambda x: x * 2.0, jnp.ones(())))
        2.0
    """
    with x64_scope():
        return jax.jit(call)(x)


def vmap(call: Callable[[Any], Any], x: Any) -> Any:
    """``call(x)`` computed by ``jax.vmap`` over a batch of ``x`` and another point
    (``0.75 x``): the first result.

    Examples:
        >>> import jax.numpy as jnp
        >>> from di.engines.jax.inside import vmap
        >>> float(vmap(lambda x: x * 2.0, jnp.ones(())))
        2.0
    """
    with x64_scope():
        batch = jax.tree_util.tree_map(lambda leaf: jnp.stack([leaf, leaf * 0.75]), x)
        return jax.tree_util.tree_map(lambda result: result[0], jax.vmap(call)(batch))
