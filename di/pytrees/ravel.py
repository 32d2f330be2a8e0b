"""A pytree flattened into one vector and back (:class:`Raveler`), for the engines
that do not take pytrees themselves: every operator then works on every backend,
and results are unflattened into the structure of ``x``, leaf by leaf in each
leaf's own dtype (an engine's traced values too, through the casts and reshapes
its record registers: :func:`register_traced_leaves`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.errors import InvalidInputError, PreparationMismatchError
from di.families import family_of, get_family, is_floating_dtype
from di.pytrees import foreign_pytree, leaf_paths, tree_flatten, tree_leaves
from di.pytrees.structure import Structure

__all__ = ["Raveler", "check_floating_leaves", "register_traced_leaves"]


def _result_dtype(dtypes: list[Any], family: str) -> Any:
    """The dtype the family promotes ``dtypes`` to (64-bit ones kept)."""
    record = get_family(family)
    with record.scope(dtypes):
        return record.namespace().result_type(*dtypes)


def check_floating_leaves(leaves: Sequence[Any], paths: Sequence[str]) -> None:
    """Refuse a pytree ``x`` with a leaf that is not a real floating-point array
    (an int, bool or complex array, a Python number): no backend differentiates
    it, and an engine that takes pytrees as they are would return its own kind of
    answer (JAX's ``float0`` cotangents, or a complex gradient in JAX's convention).

    Args:
        leaves: the leaves of ``x``.
        paths: their paths (:func:`leaf_paths`).

    Raises:
        InvalidInputError: naming the first bad leaf by its path.

    Examples:
        >>> import numpy as np
        >>> from di.pytrees.ravel import check_floating_leaves
        >>> try:
        ...     check_floating_leaves([np.ones(2), np.arange(2)], ["x['a']", "x['b']"])
        ... except Exception as err:
        ...     print(str(err).split(";")[0])
        every leaf of x must be a real floating-point array, but x['b'] is an array of dtype int64
    """
    for leaf, path in zip(leaves, paths):
        if family_of(leaf) is None or not is_floating_dtype(leaf.dtype):
            kind = type(leaf).__name__ if family_of(leaf) is None else f"an array of dtype {leaf.dtype}"
            remedy = "convert it (np.asarray(..., dtype=float)) or pass it as a di.Constant"
            if "complex" in str(getattr(leaf, "dtype", type(leaf).__name__)):
                remedy = (
                    "pass its real and imaginary parts as two real leaves, or pass it as a di.Constant (where an "
                    "operator takes complex leaves, docs/complex.md says so)"
                )
            raise InvalidInputError(
                f"every leaf of x must be a real floating-point array, but {path} is {kind}; {remedy}."
            )


class Raveler:
    """Flattens pytrees shaped like ``x`` into one vector and back.

    Args:
        x: a pytree whose leaves are real floating arrays of one family.

    Raises:
        InvalidInputError: leaves of several families, or a leaf that is not a
            real floating array (named by its path).

    Examples:
        >>> import numpy as np
        >>> from di.pytrees.ravel import Raveler
        >>> raveler = Raveler({"a": np.ones(2), "b": np.zeros((1, 2))})
        >>> raveler.ravel({"a": np.ones(2), "b": np.zeros((1, 2))})
        array([1., 1., 0., 0.])
        >>> raveler.unravel(np.arange(4.0))["b"]
        array([[2., 3.]])
    """

    def __init__(self, x: Any) -> None:
        leaves, self.spec = tree_flatten(x)
        self.structure = Structure(x)
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
        check_floating_leaves(leaves, paths)
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
        leaves = self.structure.leaves(tree)
        if leaves is None:  # another structure: optree's leaves, which the caller's check refuses
            leaves = tree_leaves(tree)
        try:
            shapes = [tuple(leaf.shape) for leaf in leaves]
        except AttributeError:  # a Python number: a 0-d leaf (a tangent {"v": 1.0, ...})
            leaves = _numbers_as_arrays(leaves, xp, self.dtype)
            shapes = [tuple(getattr(leaf, "shape", (None,))) for leaf in leaves]
        if shapes != self.shapes:
            raise PreparationMismatchError(
                "this prep was made for a pytree x whose leaves have other shapes "
                f"({', '.join(str(s) for s in self.shapes)}); this backend computes on x flattened into one "
                "vector of the prepared layout, so a prep made with strict=False cannot take them either. "
                "Prepare again for the new x."
            )
        with record.scope([self.dtype]):  # 64-bit leaves stay 64-bit
            if len(leaves) == 1:  # one copy (the vector is the engine's, never the caller's memory)
                return xp.astype(xp.reshape(leaves[0], (-1,)), self.dtype, copy=True)
            flat = [xp.astype(xp.reshape(leaf, (-1,)), self.dtype, copy=False) for leaf in leaves]
            return xp.concat(flat) if flat else xp.zeros(0, dtype=self.dtype)

    def unravel(
        self, vector: Any, cast: bool = True, split: Callable[[Any, list[int]], list[Any] | None] | None = None
    ) -> Any:
        """The pytree shaped like ``x`` from one vector, in the vector's family (an
        engine's traced vector works too), each leaf in its own dtype unless
        ``cast`` is false (the vector's dtype then). ``split``: the engine's way to
        take a traced vector apart in one operation (see ``Adapter.split_vector``)."""
        leaves = []
        pieces = split(vector, self.offsets) if split is not None else None
        whole = len(self.sizes) == 1  # one leaf is the whole vector: no slice (a traced slice costs a pass)
        for index, (offset, size, shape, dtype) in enumerate(zip(self.offsets, self.sizes, self.shapes, self.dtypes)):
            if pieces is not None:
                piece = pieces[index]
            else:
                piece = vector if whole else vector[offset : offset + size]
            leaf = _reshape(piece, shape)
            if self.mixed and cast:
                leaf = _cast_like(leaf, dtype)
            leaves.append(leaf)
        return self.structure.unflatten(leaves)

    def unravel_leading(self, array: Any, lead: tuple[int, ...], dtype: Any = None) -> Any:
        """Split the last axis of ``array`` (shape ``lead + (size,)``) into a pytree
        shaped like ``x`` whose leaves have shape ``lead + leaf.shape``, each in its
        leaf's dtype, or all in ``dtype`` when given."""
        leaves = []
        for offset, size, shape, own in zip(self.offsets, self.sizes, self.shapes, self.dtypes):
            leaf = _reshape(array[..., offset : offset + size], (*lead, *shape))
            leaves.append(_cast_like(leaf, own if dtype is None else dtype) if self.mixed else leaf)
        return self.structure.unflatten(leaves)

    def unravel_hessian(self, matrix: Any) -> Any:
        """A ``(size, size)`` matrix as a pytree of pytrees: block ``[i][j]`` has
        shape ``leaf_i.shape + leaf_j.shape`` and leaf ``i``'s dtype (the dtype of
        the gradient's leaf ``i`` it differentiates), as a pytree-native engine
        returns it."""
        rows = []
        for offset, size, shape, dtype in zip(self.offsets, self.sizes, self.shapes, self.dtypes):
            block = _reshape(matrix[offset : offset + size], (*shape, self.size))
            rows.append(self.unravel_leading(block, shape, dtype))
        return self.structure.unflatten(rows)


def _numbers_as_arrays(leaves: list[Any], xp: Any, dtype: Any) -> list[Any]:
    """``leaves`` with each Python number (``int``, ``float``) as a 0-d array of the
    namespace ``xp``, on the device of the array leaves; other leaves as they are."""
    import array_api_compat  # (here only: import di stays light)

    arrays = [leaf for leaf in leaves if hasattr(leaf, "shape")]
    on = {"device": array_api_compat.device(arrays[0])} if arrays else {}
    return [
        xp.asarray(leaf, dtype=dtype, **on) if isinstance(leaf, (int, float)) and not hasattr(leaf, "shape") else leaf
        for leaf in leaves
    ]


def _reshape(array: Any, shape: tuple[int, ...]) -> Any:
    """``array`` (of any family, or a traced value) reshaped: by its own ``reshape``
    method, else its engine's (:func:`register_traced_leaves`), else its family's."""
    method = getattr(array, "reshape", None)
    if method is not None:
        return method(shape)
    family = family_of(array)
    reshape = _TRACED_RESHAPES.get(array.__class__) if family is None else None
    if reshape is not None:  # (NumPy's would box the traced value in an object array)
        return reshape(array, shape)
    return get_family(family or "numpy").namespace().reshape(array, shape)


def _cast_like(leaf: Any, dtype: Any) -> Any:
    """Cast an engine array (possibly traced) to the dtype named like ``dtype``,
    whatever family ``dtype`` comes from."""
    name = _dtype_name(dtype)
    if _dtype_name(leaf.dtype) == name:
        return leaf
    family = family_of(leaf)
    if family is None:  # a traced value: its engine's cast, else its own astype
        cast = _TRACED_CASTS.get(leaf.__class__)
        return leaf.astype(name) if cast is None else cast(leaf, name)
    return get_family(family).astype(leaf, name)


_TRACED_CASTS: dict[type, Callable[[Any, str], Any]] = {}


_TRACED_RESHAPES: dict[type, Callable[[Any, tuple[int, ...]], Any]] = {}


def register_traced_leaves(
    cls: type,
    cast: Callable[[Any, str], Any] | None = None,
    reshape: Callable[[Any, tuple[int, ...]], Any] | None = None,
) -> None:
    """How pytree leaves are rebuilt from an engine's traced values of ``cls``, of no
    family (boxes): ``cast(value, dtype_name)``, differentiable in every mode (their
    ``astype`` may not be), and ``reshape(value, shape)``, for values without the
    method. The registry registers them from the engine's record (``traced``)."""
    if cast is not None:
        _TRACED_CASTS[cls] = cast
    if reshape is not None:
        _TRACED_RESHAPES[cls] = reshape


def _dtype_name(dtype: Any) -> str:
    return str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]
