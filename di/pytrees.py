"""Pytrees: nested tuples, lists, dicts, namedtuples and registered dataclasses with
array leaves, handled with ``optree`` (the maintained library torch itself can use).

Backends whose engine takes pytrees (JAX) receive them as they are. For the others
:class:`Raveler` flattens a pytree into one vector, so every operator works on
every backend, and unflattens results back into the structure of ``x``, leaf by
leaf in each leaf's own dtype.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from di.errors import InvalidInputError
from di.families import JAX, NUMPY, TORCH, family_of, is_floating_dtype

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
        return is_jax_pytree(value)
    return any(family_of(leaf) is not None for leaf in leaves)


def is_jax_pytree(value: Any) -> bool:
    """Whether ``value`` is a node registered with JAX only (not with optree),
    holding arrays; such pytrees work with the JAX backends."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    leaves = jax.tree_util.tree_leaves(value)
    return not (len(leaves) == 1 and leaves[0] is value) and any(family_of(leaf) is not None for leaf in leaves)


def leaf_paths(tree: Any, root: str = "x") -> list[str]:
    """Python expressions naming each leaf, such as ``x['weights'][1]``."""
    return [accessor.codify(root) for accessor in _optree().tree_accessors(tree)]


def _result_dtype(dtypes: list[Any], family: str) -> Any:
    if family == TORCH:
        import torch

        common = dtypes[0]
        for dtype in dtypes[1:]:
            common = torch.promote_types(common, dtype)
        return common
    if family == JAX:
        import jax.numpy as jnp

        from di.families import is_64_bit, jax_scope

        with jax_scope(max(dtypes, key=is_64_bit)):  # a 64-bit dtype if there is one
            return jnp.result_type(*dtypes)
    return np.result_type(*dtypes)


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
        if self.spec.is_leaf() and is_jax_pytree(x):
            raise InvalidInputError(
                f"x is a {type(x).__name__}, a pytree registered with JAX only: use AutoJAX, or register "
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
        self.family: str = families.pop() or NUMPY if families else NUMPY
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
        leaves = tree_leaves(tree)
        flat = [leaf.reshape(-1) for leaf in leaves]
        if self.family == TORCH:
            import torch

            return torch.cat([leaf.to(self.dtype) for leaf in flat]) if flat else torch.zeros(0)
        if self.family == JAX:
            import jax.numpy as jnp

            from di.families import jax_scope

            with jax_scope(self.dtype):  # float64 leaves stay float64
                return jnp.concatenate([leaf.astype(self.dtype) for leaf in flat]) if flat else jnp.zeros(0)
        return np.concatenate([np.asarray(leaf, dtype=self.dtype) for leaf in flat]) if flat else np.zeros(0)

    def unravel(self, vector: Any, cast: bool = True) -> Any:
        """The pytree shaped like ``x`` from one vector, in the vector's family (an
        engine's traced vector works too), each leaf in its own dtype unless
        ``cast`` is false (the vector's dtype then)."""
        leaves = []
        for offset, size, shape, dtype in zip(self.offsets, self.sizes, self.shapes, self.dtypes):
            leaf = vector[offset : offset + size].reshape(shape)
            if self.mixed and cast:
                leaf = _cast_like(leaf, dtype)
            leaves.append(leaf)
        return tree_unflatten(self.spec, leaves)

    def unravel_leading(self, array: Any, lead: tuple[int, ...]) -> Any:
        """Split the last axis of ``array`` (shape ``lead + (size,)``) into a pytree
        shaped like ``x`` whose leaves have shape ``lead + leaf.shape``."""
        leaves = []
        for offset, size, shape, dtype in zip(self.offsets, self.sizes, self.shapes, self.dtypes):
            leaf = array[..., offset : offset + size].reshape((*lead, *shape))
            leaves.append(_cast_like(leaf, dtype) if self.mixed else leaf)
        return tree_unflatten(self.spec, leaves)

    def unravel_hessian(self, matrix: Any) -> Any:
        """A ``(size, size)`` matrix as a pytree of pytrees: block ``[i][j]`` has
        shape ``leaf_i.shape + leaf_j.shape`` (as ``jax.hessian`` returns)."""
        rows = []
        for offset, size, shape in zip(self.offsets, self.sizes, self.shapes):
            block = matrix[offset : offset + size].reshape((*shape, self.size))
            rows.append(self.unravel_leading(block, shape))
        return tree_unflatten(self.spec, rows)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _cast_like(leaf: Any, dtype: Any) -> Any:
    """Cast an engine array (possibly traced) to the dtype named like ``dtype``,
    whatever family ``dtype`` comes from."""
    name = _dtype_name(dtype)
    if _dtype_name(leaf.dtype) == name:
        return leaf
    if family_of(leaf) == TORCH:
        import torch

        return leaf.to(getattr(torch, name))
    if family_of(leaf) == JAX:
        from di.families import jax_scope

        with jax_scope(name):
            return leaf.astype(name)
    return leaf.astype(name)
