"""Pytrees: nested tuples, lists, dicts, namedtuples and registered dataclasses with
array leaves, handled with ``optree``.

Backends whose engine takes pytrees receive them as they are. For the others
:class:`Raveler` flattens a pytree into one vector, so every operator works on
every backend, and unflattens results back into the structure of ``x``, leaf by
leaf in each leaf's own dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from di.errors import InvalidInputError
from di.families import families, family_of, get_family, is_floating_dtype

__all__ = ["Raveler", "is_pytree", "leaf_paths", "tree_flatten", "tree_leaves", "tree_map", "tree_unflatten"]


def _optree() -> Any:
    # Imported on first use of a pytree, so that ``import di`` stays light.
    import optree

    return optree


def tree_flatten(tree: Any) -> tuple[list[Any], Any]:
    """Leaves and structure of a pytree (``None`` is an empty subtree)."""
    return _optree().tree_flatten(tree)  # type: ignore[no-any-return]


def tree_unflatten(spec: Any, leaves: Any) -> Any:
    """The pytree of structure ``spec`` with these leaves."""
    return _optree().tree_unflatten(spec, leaves)


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of a pytree, in ``tree_flatten``'s order."""
    return _optree().tree_leaves(tree)  # type: ignore[no-any-return]


def tree_map(function: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Apply ``function`` to every leaf (and the matching leaves of ``rest``)."""
    return _optree().tree_map(function, tree, *rest)


def is_pytree(value: Any) -> bool:
    """Whether ``value`` is a container of arrays (not an array, not a scalar).

    Examples:
        >>> import numpy as np
        >>> from di.pytrees import is_pytree
        >>> is_pytree({"w": np.ones(2)}), is_pytree(np.ones(2)), is_pytree(1.0)
        (True, False, False)
    """
    if family_of(value) is not None or isinstance(value, (float, int, complex, str, bytes)) or value is None:
        return False
    leaves, spec = tree_flatten(value)
    if spec.is_leaf():
        return foreign_pytree(value) is not None
    return any(family_of(leaf) is not None for leaf in leaves)


def foreign_pytree(value: Any) -> str | None:
    """The display name of the array family whose library registers ``value`` as a
    container of arrays that ``optree`` does not know (a dataclass registered
    with ``jax.tree_util`` only), or ``None``; such pytrees work with that
    library's engine only."""
    for family in families():
        leaves = family.foreign_leaves(value)
        if leaves is not None and any(family_of(leaf) is not None for leaf in leaves):
            return family.display
    return None


def leaf_paths(tree: Any, root: str = "x") -> list[str]:
    """Python expressions naming each leaf, such as ``x['weights'][1]``."""
    return [accessor.codify(root) for accessor in _optree().tree_accessors(tree)]


def _result_dtype(dtypes: list[Any], family: str) -> Any:
    """The dtype the family promotes ``dtypes`` to (64-bit ones kept)."""
    record = get_family(family)
    with record.scope(dtypes):
        return record.namespace().result_type(*dtypes)


class Raveler:
    """Flattens pytrees shaped like ``x`` into one vector and back.

    Args:
        x: a pytree whose leaves are real floating arrays of one family.

    Raises:
        InvalidInputError: leaves of several families, or a leaf that is not a
            real floating array (named by its path).

    Examples:
        >>> import numpy as np
        >>> from di.pytrees import Raveler
        >>> raveler = Raveler({"a": np.ones(2), "b": np.zeros((1, 2))})
        >>> raveler.ravel({"a": np.ones(2), "b": np.zeros((1, 2))})
        array([1., 1., 0., 0.])
        >>> raveler.unravel(np.arange(4.0))["b"]
        array([[2., 3.]])
    """

    def __init__(self, x: Any) -> None:
        leaves, self.spec = tree_flatten(x)
        paths = leaf_paths(x)
        families = {family_of(leaf) for leaf in leaves}
        foreign = foreign_pytree(x) if self.spec.is_leaf() else None
        if foreign is not None:
            raise InvalidInputError(
                f"x is a {type(x).__name__}, a pytree registered with {foreign} only: use a {foreign} backend, or "
                f"register "
                f"{type(x).__name__} with optree (optree.register_pytree_node or optree.dataclasses) so every "
                f"backend can take it."
            )
        for leaf, path in zip(leaves, paths):
            if family_of(leaf) is None or not is_floating_dtype(leaf.dtype):
                kind = type(leaf).__name__ if family_of(leaf) is None else f"an array of dtype {leaf.dtype}"
                raise InvalidInputError(
                    f"every leaf of x must be a real floating-point array, but {path} is {kind}; "
                    f"convert it (np.asarray(..., dtype=float)) or pass it as a di.Constant."
                )
        if len(families) > 1:
            raise InvalidInputError(
                f"the leaves of x mix array families ({', '.join(sorted(str(f) for f in families))}); "
                f"convert them to one family first."
            )
        self.family: str = families.pop() or "numpy" if families else "numpy"
        self.shapes = [tuple(leaf.shape) for leaf in leaves]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        self.dtypes = [leaf.dtype for leaf in leaves]
        self.size = sum(self.sizes)
        self.dtype = _result_dtype(self.dtypes, self.family) if leaves else np.dtype(np.float64)
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.mixed = len({str(d) for d in self.dtypes}) > 1

    def ravel(self, tree: Any) -> Any:
        """One vector (the family of the leaves, their common dtype) from a pytree
        shaped like ``x``."""
        record = get_family(self.family)
        xp = record.namespace()
        with record.scope([self.dtype]):  # 64-bit leaves stay 64-bit
            flat = [xp.astype(xp.reshape(leaf, (-1,)), self.dtype) for leaf in tree_leaves(tree)]
            return xp.concat(flat) if flat else xp.zeros(0, dtype=self.dtype)

    def unravel(self, vector: Any, cast: bool = True) -> Any:
        """The pytree shaped like ``x`` from one vector, in the vector's family (an
        engine's traced vector works too), each leaf in its own dtype unless
        ``cast`` is false (the vector's dtype then)."""
        leaves = []
        for offset, size, shape, dtype in zip(self.offsets, self.sizes, self.shapes, self.dtypes):
            leaf = _reshape(vector[offset : offset + size], shape)
            if self.mixed and cast:
                leaf = _cast_like(leaf, dtype)
            leaves.append(leaf)
        return tree_unflatten(self.spec, leaves)

    def unravel_leading(self, array: Any, lead: tuple[int, ...]) -> Any:
        """Split the last axis of ``array`` (shape ``lead + (size,)``) into a pytree
        shaped like ``x`` whose leaves have shape ``lead + leaf.shape``."""
        leaves = []
        for offset, size, shape, dtype in zip(self.offsets, self.sizes, self.shapes, self.dtypes):
            leaf = _reshape(array[..., offset : offset + size], (*lead, *shape))
            leaves.append(_cast_like(leaf, dtype) if self.mixed else leaf)
        return tree_unflatten(self.spec, leaves)

    def unravel_hessian(self, matrix: Any) -> Any:
        """A ``(size, size)`` matrix as a pytree of pytrees: block ``[i][j]`` has
        shape ``leaf_i.shape + leaf_j.shape`` (as a pytree-native engine returns)."""
        rows = []
        for offset, size, shape in zip(self.offsets, self.sizes, self.shapes):
            block = _reshape(matrix[offset : offset + size], (*shape, self.size))
            rows.append(self.unravel_leading(block, shape))
        return tree_unflatten(self.spec, rows)


def _reshape(array: Any, shape: tuple[int, ...]) -> Any:
    """``array`` (of any family, or an engine's traced value) reshaped: its own
    ``reshape`` method where it has one, else its family namespace's function (the
    array API has no method)."""
    method = getattr(array, "reshape", None)
    if method is not None:
        return method(shape)
    return get_family(family_of(array) or "numpy").namespace().reshape(array, shape)


def _cast_like(leaf: Any, dtype: Any) -> Any:
    """Cast an engine array (possibly traced) to the dtype named like ``dtype``,
    whatever family ``dtype`` comes from."""
    name = _dtype_name(dtype)
    if _dtype_name(leaf.dtype) == name:
        return leaf
    family = family_of(leaf)
    if family is None:  # a traced value: its own astype
        return leaf.astype(name)
    return get_family(family).astype(leaf, name)


def _dtype_name(dtype: Any) -> str:
    return str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]
