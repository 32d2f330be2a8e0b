"""The columns of a sparse result over a pytree ``x``: its leaves in the caller's
order, the order in which the dense results (a gradient or Jacobian dict) iterate.

``optree`` flattens a dict in sorted key order; ``di`` rebuilds every result dict in
the caller's key order. A sparse matrix has no keys, so its columns (and a
Hessian's rows) take the order the caller sees: leaf after leaf as the dense
gradient iterates, depth first, each dict in its own key order, other containers
in theirs. :func:`leaf_layout` gives the flattening in that order.
"""

from __future__ import annotations

from typing import Any

from di.pytrees.ravel import Raveler
from di.pytrees.structure import Structure

__all__ = ["CallerOrder", "caller_order", "leaf_columns", "leaf_layout"]


class _Numbered:
    """A stand-in leaf carrying the position of a leaf in ``optree``'s order."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def caller_order(x: Any) -> list[int]:
    """The positions (in ``optree``'s leaf order) of ``x``'s leaves, in the order the
    dense results over ``x`` iterate them.

    Examples:
        >>> import numpy as np
        >>> from di.sparse.layout import caller_order
        >>> caller_order({"b": np.ones(2), "a": {"z": np.ones(1), "c": np.ones(1)}})
        [2, 1, 0]
    """
    import optree  # (here: import di stays light)

    structure = Structure(x)
    rebuilt = structure.unflatten([_Numbered(i) for i in range(structure.num_leaves)])
    flatten_one_level = optree.tree_flatten_one_level
    order: list[int] = []
    pending = [rebuilt]
    while pending:
        node = pending.pop()
        if isinstance(node, _Numbered):
            order.append(node.index)
            continue
        if node is None:
            continue
        level = flatten_one_level(node)
        children = list(level.children)
        if isinstance(node, dict):  # optree's order is sorted; the caller's is the dict's own
            position = {key: i for i, key in enumerate(node)}
            children = [child for _, child in sorted(zip(level.entries, children), key=lambda e: position[e[0]])]
        pending.extend(reversed(children))
    return order


class CallerOrder:
    """A :class:`~di.pytrees.ravel.Raveler` over ``x``'s leaves taken in the caller's order
    (:func:`caller_order`): the vector's entries are the leaves in that order, and
    the pytrees it builds are shaped like ``x`` (its dicts in the caller's key order).

    Args:
        x: the pytree (checked by :class:`~di.pytrees.ravel.Raveler`, naming its leaves).
        order: :func:`caller_order` of ``x``.
    """

    def __init__(self, x: Any, order: list[int]) -> None:
        tree = Raveler(x)  # the checks of x's leaves, by their paths
        self.structure = tree.structure
        self.family = tree.family
        self.order = order
        self.inverse = [0] * len(order)
        for position, index in enumerate(order):
            self.inverse[index] = position
        leaves = self.structure.leaves(x)
        assert leaves is not None
        self.flat = Raveler([leaves[i] for i in order])
        self.offsets, self.sizes = self.flat.offsets, self.flat.sizes
        self._ravel_other = tree.ravel

    def _tree(self, in_order: list[Any]) -> Any:
        return self.structure.unflatten([in_order[position] for position in self.inverse])

    def ravel(self, tree: Any) -> Any:
        """One vector of ``tree``'s leaves in the caller's order."""
        leaves = self.structure.leaves(tree)
        if leaves is None:  # another structure: the Raveler's report
            return self._ravel_other(tree)
        return self.flat.ravel([leaves[i] for i in self.order])

    def unravel(self, vector: Any, cast: bool = True) -> Any:
        """The pytree shaped like ``x`` from one vector in the caller's order."""
        return self._tree(self.flat.unravel(vector, cast))

    def unravel_leading(self, array: Any, lead: tuple[int, ...]) -> Any:
        """The last axis of ``array`` split into a pytree shaped like ``x``, leaves ``lead + leaf.shape``."""
        return self._tree(self.flat.unravel_leading(array, lead))

    def unravel_hessian(self, matrix: Any) -> Any:
        """A ``(size, size)`` matrix as a pytree of pytrees, as the dense backends return Hessians."""
        return self._tree([self._tree(row) for row in self.flat.unravel_hessian(matrix)])


def leaf_layout(x: Any) -> Raveler | CallerOrder:
    """The flattening of ``x`` whose vector holds the leaves in the caller's order:
    ``di``'s :class:`~di.pytrees.ravel.Raveler` where that is ``optree``'s order (no dict
    out of sorted order), else a :class:`CallerOrder`.

    Examples:
        >>> import numpy as np
        >>> from di.sparse.layout import leaf_layout
        >>> layout = leaf_layout({"b": np.zeros(2), "a": np.ones(1)})
        >>> layout.ravel({"b": np.zeros(2), "a": np.ones(1)})
        array([0., 0., 1.])
        >>> layout.unravel(np.arange(3.0))
        {'b': array([0., 1.]), 'a': array([2.])}
    """
    order = caller_order(x)
    if order == sorted(order):
        return Raveler(x)
    return CallerOrder(x, order)


def leaf_columns(layout: Raveler | CallerOrder) -> Any:
    """A pytree shaped like ``x`` holding, for each leaf, the ``slice`` of the sparse
    matrix's columns (and a Hessian's rows) that are its entries."""
    slices = [slice(offset, offset + size) for offset, size in zip(layout.offsets, layout.sizes)]
    if isinstance(layout, CallerOrder):
        return layout._tree(slices)
    return layout.structure.unflatten(slices)
