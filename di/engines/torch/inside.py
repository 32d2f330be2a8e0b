"""A call run inside torch's own transforms (the ``run`` hooks of
:data:`di.engines.torch.adapter.COMPOSITIONS`): what the differential fuzzer
(:mod:`di.testing.fuzz`) compares with the same call made outside them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

__all__ = ["vmap"]


def vmap(call: Callable[[Any], Any], x: Any) -> Any:
    """``call(x)`` computed by ``torch.func.vmap`` over a batch of ``x`` and another
    point (``0.75 x``): the first result.

    Examples:
        >>> import torch
        >>> from di.engines.torch.inside import vmap
        >>> float(vmap(lambda x: x * 2.0, torch.ones(())))
        2.0
    """
    batch = tree_map(lambda leaf: torch.stack([leaf, leaf * 0.75]), x)
    return tree_map(lambda result: result[0], torch.func.vmap(call)(batch))
