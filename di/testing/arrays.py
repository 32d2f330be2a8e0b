"""Arrays of any registered family, as the testing toolkit handles them.

Every question about an array (which family, how to copy it, negate it, zero it,
bring it to NumPy, whether it is a sparse matrix or still records a graph) is
asked of its family's record in :mod:`di.families`, so scenarios and checks work
for every family registered with :func:`di.register_family`, in tree or out of
tree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from di.families import Family, families, family_of, get_family

__all__ = [
    "copy_tree",
    "dtype_name",
    "family_record",
    "from_numpy_in",
    "negate",
    "records_graph",
    "sparse_to_numpy",
    "to_float64",
    "to_numpy",
    "tree_map",
    "pytree_leaves",
    "zeros_like",
]


def family_record(value: Any) -> Family | None:
    """The :class:`~di.families.Family` of ``value``, or ``None`` if it is not an array.

    Examples:
        >>> import numpy as np
        >>> from di.testing.arrays import family_record
        >>> family_record(np.zeros(2)).name, family_record(2.0)
        ('numpy', None)
    """
    name = family_of(value)
    return None if name is None else get_family(name)


def dtype_name(dtype: Any) -> str:
    """A dtype of any family (or its name) as a plain name: ``"float32"``.

    Examples:
        >>> import numpy as np
        >>> from di.testing.arrays import dtype_name
        >>> dtype_name(np.float32), dtype_name("float64")
        ('float32', 'float64')
    """
    try:
        return np.dtype(dtype).name
    except Exception:  # a dtype NumPy does not know
        return str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]


def to_numpy(value: Any) -> Any:
    """Bring an array of any family (or a Python number) to NumPy; pass other values on.

    Examples:
        >>> from di.testing.arrays import to_numpy
        >>> to_numpy(2.0), to_numpy("text")
        (array(2.), 'text')
    """
    record = family_record(value)
    if record is not None:
        return record.to_numpy(value)
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        return np.asarray(value)
    return value


def pytree_leaves(tree: Any) -> list[Any]:
    """The leaves of a pytree of dicts (sorted keys), lists and tuples, in order.

    Args:
        tree: an array, a number, or nested dicts/lists/tuples of them.

    Returns:
        The leaves, depth first.

    Examples:
        >>> from di.testing import pytree_leaves
        >>> pytree_leaves({"b": 2.0, "a": (1.0, 3.0)})
        [1.0, 3.0, 2.0]
    """
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in pytree_leaves(tree[key])]
    if isinstance(tree, (list, tuple)):
        return [leaf for item in tree for leaf in pytree_leaves(item)]
    return [tree]


def tree_map(function: Callable[[Any], Any], tree: Any) -> Any:
    """Apply ``function`` to every leaf of a pytree of dicts, lists and tuples.

    Examples:
        >>> from di.testing.arrays import tree_map
        >>> tree_map(lambda v: v * 2, {"a": (1, 2)})
        {'a': (2, 4)}
    """
    if isinstance(tree, dict):
        return {key: tree_map(function, value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_map(function, item) for item in tree)
    return function(tree)


def _copy_leaf(leaf: Any) -> Any:
    record = family_record(leaf)
    return leaf if record is None else record.copy(leaf)


def copy_tree(tree: Any) -> Any:
    """A deep copy of the arrays of a pytree (arrays of an immutable family are
    kept: they cannot change); other leaves are returned as they are.

    Examples:
        >>> import numpy as np
        >>> from di.testing.arrays import copy_tree
        >>> x = np.zeros(2)
        >>> copy_tree({"x": x})["x"] is x
        False
    """
    return tree_map(_copy_leaf, tree)


def to_float64(value: Any) -> Any:
    """A floating array of any family as a NumPy float64 array; other values as
    :func:`to_numpy` gives them.

    Examples:
        >>> import numpy as np
        >>> from di.testing.arrays import to_float64
        >>> to_float64(np.ones(2, dtype=np.float32)).dtype
        dtype('float64')
    """
    array = to_numpy(value)
    if isinstance(array, np.ndarray) and array.dtype.kind == "f":
        return array.astype(np.float64)
    if isinstance(array, np.generic) and np.dtype(array.dtype).kind == "f":
        return np.asarray(array, dtype=np.float64)
    return array


def negate(value: Any) -> Any:
    """The negation of a float or floating array (of any family, in its dtype);
    other values (ints, strings, integer arrays) as they are.

    Examples:
        >>> import numpy as np
        >>> from di.testing.arrays import negate
        >>> negate(1.5), negate(3), negate({"a": np.ones(1)})
        (-1.5, 3, {'a': array([-1.])})
    """
    if isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return -value
    record = family_record(value)
    if record is not None:
        if not record.is_floating(value.dtype):
            return value
        with record.scope((value.dtype,)):
            return -value
    if isinstance(value, (dict, list, tuple)):
        return tree_map(negate, value)
    return value


def zeros_like(value: Any) -> Any:
    """Zeros shaped like ``value``, of its family and dtype (``0.0`` for a float);
    other values as they are.

    Examples:
        >>> import numpy as np
        >>> from di.testing.arrays import zeros_like
        >>> zeros_like(np.full(2, np.nan)), zeros_like(2.5)
        (array([0., 0.]), 0.0)
    """
    if isinstance(value, float):
        return 0.0
    record = family_record(value)
    if record is not None:
        with record.scope((value.dtype,)):
            return record.namespace().zeros_like(value)
    if isinstance(value, (dict, list, tuple)):
        return tree_map(zeros_like, value)
    return value


def from_numpy_in(family: str) -> Callable[[Any], Any]:
    """The conversion of NumPy arrays into arrays of the registered ``family``
    (a copy, so the scenario's NumPy data stays its own); other values pass.

    Raises:
        ValueError: no family of that name is registered.

    Examples:
        >>> import numpy as np
        >>> from di.testing.arrays import from_numpy_in
        >>> from_numpy_in("numpy")(np.ones(1)), from_numpy_in("numpy")(2.0)
        (array([1.]), 2.0)
    """
    try:
        record = get_family(family)
    except KeyError:
        known = ", ".join(repr(f.name) for f in families())
        raise ValueError(f"unknown array family {family!r}; registered families: {known}") from None

    def convert(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return record.from_numpy(np.array(value, copy=True))
        return value

    return convert


def sparse_to_numpy(value: Any) -> tuple[str, np.ndarray] | None:
    """``(family name, dense NumPy array)`` when ``value`` is a sparse matrix of a
    registered family (what ``di.AutoSparse`` returns), else ``None``. Only
    families whose library is loaded are asked: a sparse matrix of another
    cannot exist.

    Examples:
        >>> import numpy as np
        >>> from di.testing.arrays import sparse_to_numpy
        >>> sparse_to_numpy(np.eye(2)) is None
        True
    """
    for record in families():
        if record.module in sys.modules:
            dense = record.sparse_to_numpy(value)
            if dense is not None:
                return record.name, dense
    return None


def records_graph(value: Any) -> bool:
    """Whether an array still records operations for differentiation (a graph
    the caller would carry along, where the engine has one).

    Examples:
        >>> import numpy as np
        >>> from di.testing.arrays import records_graph
        >>> records_graph(np.ones(2))
        False
    """
    record = family_record(value)
    return record is not None and record.records_graph(value)
