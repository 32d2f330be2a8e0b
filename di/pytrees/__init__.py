"""Pytrees: nested tuples, lists, dicts, namedtuples and registered dataclasses with
array leaves, handled with ``optree``.

Backends whose engine takes pytrees receive them as they are. For the others
:class:`~di.pytrees.ravel.Raveler` flattens a pytree into one vector, so every
operator works on every backend, and unflattens results back into the structure
of ``x``, leaf by leaf in each leaf's own dtype.

On a prep's hot path, pytrees shaped like the prepared ``x`` are flattened and
rebuilt by a :class:`~di.pytrees.structure.Structure`: plain Python made once
from ``x`` at preparation, which an engine's compiler tracing the call
(``torch.compile``) follows as it follows ``f``, where ``optree``'s compiled
functions would stop it.

This module holds what every pytree question starts from: ``optree``'s
flattening, mapping and leaf paths, and whether a value is a pytree at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from di.errors import InvalidInputError
from di.families import families, family_of, get_family

__all__ = [
    "check_flattens",
    "foreign_pytree",
    "is_pytree",
    "leaf_paths",
    "load_optree",
    "traced_by",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_unflatten",
]


def load_optree() -> Any:
    """The ``optree`` module, imported on first use of a pytree (``import di`` stays light)."""
    import optree

    return optree


def tree_flatten(tree: Any) -> tuple[list[Any], Any]:
    """Leaves and structure of a pytree (``None`` is an empty subtree)."""
    return load_optree().tree_flatten(tree)  # type: ignore[no-any-return]


def tree_unflatten(spec: Any, leaves: Any) -> Any:
    """The pytree of structure ``spec`` with these leaves."""
    return load_optree().tree_unflatten(spec, leaves)


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of a pytree, in ``tree_flatten``'s order."""
    return load_optree().tree_leaves(tree)  # type: ignore[no-any-return]


def tree_map(function: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Apply ``function`` to every leaf (and the matching leaves of ``rest``)."""
    return load_optree().tree_map(function, tree, *rest)


def check_flattens(value: Any, name: str) -> None:
    """Refuse an argument ``optree`` cannot flatten: a container that holds itself
    (directly or deeper), or one nested deeper than ``optree`` goes.

    Args:
        value: the argument (``x``, a context's value, a tangent).
        name: how the error names it (``"x"``, ``"context 1"``, ``"tx[0]"``).

    Raises:
        InvalidInputError: naming ``name``, with ``optree``'s ``RecursionError``
            as its cause.

    Examples:
        >>> import numpy as np
        >>> from di.pytrees import check_flattens
        >>> check_flattens({"w": np.ones(2)}, "x")
        >>> cycle = [np.ones(2)]
        >>> cycle.append(cycle)
        >>> check_flattens(cycle, "x")
        Traceback (most recent call last):
        ...
        di.errors.InvalidInputError: x cannot be flattened as a pytree: ...
    """
    try:
        tree_leaves(value)
    except RecursionError as err:
        raise InvalidInputError(
            f"{name} cannot be flattened as a pytree: it holds itself (a list, tuple or dict inside itself, "
            f"directly or deeper), or nests deeper than optree goes. Pass it without the cycle."
        ) from err


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


def traced_by(value: Any) -> str:
    """The engine transform tracing ``value`` or one of its leaves (``"jax.vmap"``,
    ``"torch.func.grad"``), as the leaf's array family says; ``""`` when every
    leaf is a concrete array (or no array).

    Examples:
        >>> import numpy as np
        >>> from di.pytrees import traced_by
        >>> traced_by({"w": np.ones(2)})
        ''
    """
    family = family_of(value)
    if family is not None:
        return get_family(family).traced_by(value)
    if not is_pytree(value):
        return ""
    for leaf in tree_leaves(value):
        family = family_of(leaf)
        transform = get_family(family).traced_by(leaf) if family is not None else ""
        if transform:
            return transform
    return ""


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
    return [accessor.codify(root) for accessor in load_optree().tree_accessors(tree)]
