"""Same-point preps (``prepare_pullback_same_point``, ``prepare_hvp_same_point``):
the check that a call is at the prepared point, by value."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.contexts import Constant
from di.errors import UnsupportedOperatorError
from di.families import converter, families, family_of, get_family
from di.prep.traced import tracing
from di.pytrees import tree_flatten

__all__ = ["same_point_check"]


def _traced_point_error(transform: str) -> UnsupportedOperatorError:
    """Same-point preps hold the point's values, which a value traced by an engine
    transform does not have."""
    return UnsupportedOperatorError(
        f"a same-point prep (prepare_pullback_same_point, prepare_hvp_same_point) cannot be made or called "
        f"inside {transform}: it compares the point by value, and the transform traces x without one. Use "
        f"di.prepare_pullback or di.prepare_hvp, whose preps serve every point, inside transforms (or call the "
        f"operator unprepared)."
    )


def _graph_point_error(library: str) -> UnsupportedOperatorError:
    """Same-point preps compute at preparation: their results cannot carry the
    graph of an input that records one."""
    return UnsupportedOperatorError(
        f"a same-point prep (prepare_pullback_same_point, prepare_hvp_same_point) cannot take an x or Constant "
        f"that requires grad (it records a {library} graph for differentiation): it computes its result at "
        f"preparation, which cannot carry the call's graph. Use di.prepare_pullback or di.prepare_hvp, whose "
        f"results do, or pass detached values."
    )


def same_point_check(x: Any, contexts: Sequence[Any]) -> Callable[[Any, Sequence[Any]], bool]:
    """A by-value check that a call is at the prepared point (``x`` and every
    ``Constant``), for same-point preps. Holds NumPy copies of the point: of an
    array, or of each array leaf of a pytree, whose structure it keeps too.

    Examples:
        >>> import numpy as np
        >>> from di.operators.same_point import same_point_check
        >>> at_point = same_point_check(np.ones(2), ())
        >>> at_point(np.ones(2), ()), at_point(np.zeros(2), ())
        (True, False)
        >>> point = {"w": np.ones(2)}
        >>> at_point = same_point_check(point, ())
        >>> point["w"][0] = 2.0  # changed in place: the copy keeps the prepared values
        >>> at_point(point, ()), at_point({"w": np.ones(2)}, ())
        (False, True)
    """

    def snapshot(value: Any) -> Any:
        transform, _ = tracing(value)
        if transform:
            raise _traced_point_error(transform)
        family = family_of(value)
        if family is None:
            tree = _tree_of(value)
            return value if tree is None else _Snapshot(tree[0], [snapshot(leaf) for leaf in tree[1]])
        if get_family(family).records_graph(value):
            raise _graph_point_error(get_family(family).display)
        return np.array(converter(family, "numpy")(value), copy=True)

    x_copy = snapshot(x)
    constants = [(i, snapshot(c.value)) for i, c in enumerate(contexts) if isinstance(c, Constant)]

    def equal(a: Any, b: Any) -> bool:
        if isinstance(b, np.ndarray):
            transform, _ = tracing(a)
            if transform:  # (an engine's traced value that is no array: autograd's boxes)
                raise _traced_point_error(transform)
            return family_of(a) is not None and np.array_equal(snapshot(a), b, equal_nan=True)
        if isinstance(b, _Snapshot):
            tree = _tree_of(a) if family_of(a) is None else None
            return (
                tree is not None
                and tree[0] == b.structure
                and all(equal(leaf, held) for leaf, held in zip(tree[1], b.leaves, strict=True))
            )
        try:
            return bool(a == b)
        except (TypeError, ValueError):  # an object whose == gives no truth value
            return False

    def at_point(x: Any, given: Sequence[Any]) -> bool:
        return equal(x, x_copy) and all(equal(given[i].value, value) for i, value in constants)

    return at_point


class _Snapshot:
    """A same-point prep's copy of a pytree: its structure and a copy of each leaf."""

    __slots__ = ("leaves", "structure")

    def __init__(self, structure: Any, leaves: list[Any]) -> None:
        self.structure = structure
        self.leaves = leaves


def _tree_of(value: Any) -> tuple[Any, list[Any]] | None:
    """``(structure, leaves)`` of a container (``optree``'s, or one that an array
    library registers: its type and leaf count then stand for its structure);
    ``None`` for a single value."""
    leaves, spec = tree_flatten(value)
    if not spec.is_leaf():
        return spec, leaves
    for family in families():
        foreign = family.foreign_leaves(value)
        if foreign is not None:
            return (family.name, type(value), len(foreign)), foreign
    return None
