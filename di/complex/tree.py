"""The real view of a pytree ``x`` with complex leaves: each complex leaf replaced
by its real view (shape ``(2, *leaf.shape)``), the real leaves kept as they are.

The request becomes one over that real pytree, which every backend takes as it
takes any pytree of real leaves (as it is, or raveled into one vector), and
each result is mapped back leaf by leaf with the array's converters
(:class:`di.complex.strategy._Converters`), so a complex leaf gets exactly what
a complex array ``x`` gets: the gradient ``df/da + i df/db``, the jacobian's
columns in the same convention, the real Hessian's blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from di.complex.view import RealView, _rebuilt, _split_output, is_complex_value
from di.errors import InvalidInputError
from di.families import family_of, get_family
from di.pytrees.structure import Structure

__all__ = ["TreeView"]


class TreeView:
    """How a pytree ``x`` with complex leaves is split into its real view (each
    complex leaf its own :class:`~di.complex.view.RealView`, in its own precision)
    and how trees shaped like it are rebuilt.

    Args:
        x: the caller's pytree, with at least one complex array leaf.

    Examples:
        >>> import numpy as np
        >>> from di.complex.tree import TreeView
        >>> view = TreeView({"w": np.array([1 + 2j]), "b": np.ones(1)})
        >>> real = view.split({"w": np.array([1 + 2j]), "b": np.ones(1)})
        >>> real["w"].tolist(), real["b"].tolist()
        ([[1.0], [2.0]], [1.0])
        >>> view.combine(real)["w"]
        array([1.+2.j])
    """

    __slots__ = ("complex_dtype", "ndims", "structure", "views")

    def __init__(self, x: Any) -> None:
        self.structure = Structure(x)
        leaves = self.structure.leaves(x) or []
        self.views: list[RealView | None] = []
        for leaf in leaves:
            family = family_of(leaf)
            if family is None or not is_complex_value(leaf):
                self.views.append(None)
                continue
            name = "complex64" if get_family(family).describe_dtype(leaf.dtype) == "complex64" else "complex128"
            self.views.append(RealView(family, name))
        self.ndims = [len(tuple(getattr(leaf, "shape", ()))) for leaf in leaves]
        wide = any(view is not None and view.wide for view in self.views)
        self.complex_dtype = "complex128" if wide else "complex64"  # (what the engine's arrays must hold)

    def first(self) -> RealView:
        """The view of the first complex leaf (for what does not depend on a leaf)."""
        return next(view for view in self.views if view is not None)

    def _leaves(self, tree: Any) -> list[Any]:
        leaves = self.structure.leaves(tree)
        if leaves is None:
            raise InvalidInputError(
                "a tangent of a pytree x with complex leaves must have x's structure (the same nodes and leaves)"
            )
        return leaves

    def split(self, tree: Any) -> Any:
        """``tree`` (shaped like ``x``) with each complex leaf's place holding its
        real view (a real leaf there gets a zero imaginary part)."""
        leaves = self._leaves(tree)
        return self.structure.unflatten(
            [leaf if view is None else view.split(leaf) for view, leaf in zip(self.views, leaves)]
        )

    def combine(self, tree: Any) -> Any:
        """The caller's tree from a real one shaped like the real view."""
        return self.map_leaves(tree, lambda view, ndim, real: view.combine(real))

    def map_leaves(self, tree: Any, convert: Callable[[RealView, int, Any], Any]) -> Any:
        """``tree`` (shaped like the real view) with ``convert(view, leaf ndim, leaf)``
        applied to each complex leaf's place."""
        leaves = self._leaves(tree)
        converted = [
            leaf if view is None else convert(view, ndim, leaf)
            for view, ndim, leaf in zip(self.views, self.ndims, leaves)
        ]
        return self.structure.unflatten(converted)

    def real_function(self, f: Callable[..., Any], split_output: bool, has_aux: bool) -> Callable[..., Any]:
        """``g(real tree, *values) = f(the complex tree, *values)``, its complex output
        split into its real view when ``split_output`` (as
        :func:`~di.complex.view.real_function` does for an array)."""
        structure, dtypes = self.structure, [None if v is None else v.complex_dtype for v in self.views]

        def rebuilt(tree: Any) -> Any:
            leaves = structure.leaves(tree)
            assert leaves is not None  # (the engine passes the real view's structure)
            return structure.unflatten(
                [leaf if dtype is None else _rebuilt(leaf, dtype) for dtype, leaf in zip(dtypes, leaves)]
            )

        def g(r: Any, *values: Any) -> Any:
            y = f(rebuilt(r), *values)
            if not split_output:
                return y
            if has_aux:
                return _split_output(y[0]), y[1]
            return _split_output(y)

        g.real_view_of = f  # type: ignore[attr-defined]
        g.complex_dtype = self.complex_dtype  # type: ignore[attr-defined]
        return g
