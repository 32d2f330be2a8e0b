"""Whether candidates' results agree: each result's arrays as float64 NumPy
arrays (sparse matrices densified, engines' own pytrees read through their
registries), compared entry by entry within the tolerances of the least precise
dtype (:func:`default_tolerances`, :func:`agree`), and how far apart they are
(:func:`relative_difference`), which :class:`di.AutoFastest` votes with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from di.families import families, family_of, get_family
from di.pytrees import tree_leaves

__all__ = [
    "agree",
    "default_tolerances",
    "finite_entry_difference",
    "float64_leaves",
    "leaf_differences",
    "relative_difference",
]


def float64_leaves(result: Any) -> tuple[list[np.ndarray], list[str]]:
    """The result's arrays as float64 NumPy arrays, and their dtypes' names."""
    leaves = tree_leaves(result)
    if any(family_of(leaf) is None and not isinstance(leaf, float) for leaf in leaves):
        leaves = _foreign_leaves(result) or leaves
    arrays, dtypes = [], []
    for leaf in leaves:
        leaf = _densified(leaf)
        family = family_of(leaf)
        if family is not None:
            record = get_family(family)
            arrays.append(np.asarray(record.to_numpy(leaf)).astype(np.float64))
            dtypes.append(record.describe_dtype(leaf.dtype))
        elif isinstance(leaf, float):
            arrays.append(np.asarray(leaf, dtype=np.float64))
            dtypes.append("float")
        else:
            raise TypeError(f"the result holds a {type(leaf).__name__}, not an array")
    return arrays, dtypes


def _densified(leaf: Any) -> Any:
    """A sparse-matrix result (``di.AutoSparse``'s, in any family) as a dense array of
    its family, so that it compares with dense candidates' results entry by entry
    (flattened: a sparse Jacobian is 2-D where a dense one has ``x``'s shape)."""
    if getattr(leaf, "is_sparse", False) or getattr(leaf, "is_sparse_csr", False):
        return leaf.to_dense()
    if family_of(leaf) is None and hasattr(leaf, "todense"):
        dense = leaf.todense()
        return np.asarray(dense) if family_of(dense) is None else dense
    return leaf


def _foreign_leaves(result: Any) -> list[Any] | None:
    """The leaves of a result whose nodes only an engine's pytree registry knows."""
    for record in families():
        leaves = record.foreign_leaves(result)
        if leaves is not None:
            return leaves
    return None


def default_tolerances(dtypes: Sequence[str]) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing results of these dtypes: those of the least precise.

    Examples:
        >>> from di.fastest.agreement import default_tolerances
        >>> default_tolerances(["float64"]), default_tolerances(["float64", "float32"])
        ((1e-05, 1e-08), (0.001, 0.0001))
    """
    if any(("16" in dtype) for dtype in dtypes):
        return 3e-2, 1e-2
    if any(dtype == "float32" for dtype in dtypes):
        return 1e-3, 1e-4
    return 1e-5, 1e-8


def finite_entry_difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float] | None:
    """Two arrays of one shape compared entry by entry: ``(the largest absolute
    difference, the largest |a|, the largest |b|)`` over the entries where both are
    finite; ``None`` when their non-finite entries differ (NaN against NaN and equal
    infinities are equal; a finite entry against a non-finite one differs).

    Examples:
        >>> import numpy as np
        >>> from di.fastest.agreement import finite_entry_difference
        >>> finite_entry_difference(np.array([np.inf, 1.0]), np.array([np.inf, 3.0]))
        (2.0, 1.0, 3.0)
        >>> finite_entry_difference(np.array([np.nan, 1.0]), np.array([np.inf, 1.0])) is None
        True
    """
    finite = np.isfinite(a) & np.isfinite(b)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    if np.any(~finite & ~same):
        return None
    a, b = a[finite], b[finite]
    difference = float(np.max(np.abs(a - b), initial=0.0))
    return difference, float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0))


def leaf_differences(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> list[tuple[float, float]] | None:
    """For each pair of leaves: the largest absolute difference and the largest
    absolute entry (finite entries); ``None`` when the leaves' number or shapes
    differ, or non-finite entries do (see :func:`finite_entry_difference`)."""
    if len(a) != len(b):
        return None
    found = []
    for left, right in zip(a, b):
        if left.shape != right.shape:
            if left.size != right.size:
                return None
            left, right = left.reshape(-1), right.reshape(-1)  # a sparse 2-D result against a dense one
        compared = finite_entry_difference(left, right)
        if compared is None:
            return None
        difference, left_scale, right_scale = compared
        found.append((difference, max(left_scale, right_scale)))
    return found


def agree(a: Sequence[np.ndarray], b: Sequence[np.ndarray], rtol: float, atol: float) -> bool:
    """Whether two results agree: on every leaf, the largest difference is at most
    ``rtol`` times the largest entry plus ``atol``.

    Examples:
        >>> import numpy as np
        >>> from di.fastest.agreement import agree
        >>> agree([np.array([1.0, 2.0])], [np.array([1.0, 2.00001])], 1e-5, 1e-8)
        True
        >>> agree([np.array([0.0, 1e-12])], [np.array([0.0, -1e-12])], 1e-5, 1e-8)  # noise around zero
        True
        >>> agree([np.array([1.0, 2.0])], [np.array([1.0, 3.0])], 1e-5, 1e-8)
        False
    """
    pairs = leaf_differences(a, b)
    return pairs is not None and all(difference <= rtol * scale + atol for difference, scale in pairs)


def relative_difference(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """The largest difference between two results, relative to their largest entry
    (``inf`` when their shapes or non-finite entries differ).

    Examples:
        >>> import numpy as np
        >>> from di.fastest.agreement import relative_difference
        >>> relative_difference([np.array([1.0, 2.0])], [np.array([1.0, 2.2])])  # doctest: +ELLIPSIS
        0.0909...
    """
    pairs = leaf_differences(a, b)
    if pairs is None:
        return math.inf
    return max((d / s if d else 0.0) if s else (math.inf if d else 0.0) for d, s in pairs) if pairs else 0.0
