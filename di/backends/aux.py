"""Auxiliary outputs: ``f`` returning ``(y, aux)`` under ``has_aux=True``.

Only ``y`` is differentiated; ``aux`` is any pytree (arrays, Python scalars,
strings, ``None``) computed by the same evaluation of ``f``. Engines pass arrays
through their transforms and compiled programs, but not strings or ``None``
(``jax.jit`` and ``torch.func`` refuse them), so an adapter *splits* ``aux``
inside the engine into its array leaves, which travel as outputs, and an
:class:`AuxSplit` holding the structure and the other leaves, which stays in
Python, and joins them again outside. Container order is kept (``optree``
restores a dict's own key order; JAX would sort it).

Adapter programs built with ``has_aux=True`` return ``(result, aux)``, where
``result`` is what they return without it and ``aux`` is the joined pytree, its
arrays in the engine's family; the operator layer converts every array leaf to
the caller's family (:func:`aux_converter`), NumPy scalars into 0-d arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from di.backends.selectors import AbstractBackend
from di.errors import InvalidOutputError
from di.families import converter, family_of, identity
from di.pytrees import tree_flatten, tree_map

__all__ = ["AuxSplit", "aux_converter", "outputs", "split_aux", "split_output", "value_only", "with_aux"]


def split_output(output: Any, backend: AbstractBackend, operator: str) -> tuple[Any, Any]:
    """``(y, aux)`` from what ``f`` returned under ``has_aux=True``.

    Raises:
        InvalidOutputError: ``f`` did not return a pair, naming what came back.

    Examples:
        >>> import di
        >>> from di.backends.aux import split_output
        >>> split_output((1.0, {"n": 3}), di.AutoFiniteDiff(), "gradient")
        (1.0, {'n': 3})
    """
    if output.__class__ is tuple and len(output) == 2:
        return output  # type: ignore[no-any-return]
    if isinstance(output, (tuple, list)):
        what = f"a {type(output).__name__} of {len(output)} elements"
    else:
        shape = getattr(output, "shape", None)
        what = f"an array of shape {tuple(shape)}" if shape is not None else f"a {type(output).__name__}"
    raise InvalidOutputError(
        f"{operator} with has_aux=True needs f to return a pair (y, aux), but with {backend!r} f returned "
        f"{what}. Return (y, aux), or call without has_aux."
    )


def value_only(f: Callable[..., Any], backend: AbstractBackend, operator: str) -> Callable[..., Any]:
    """``f`` returning ``(y, aux)`` as a function returning ``y``, for evaluations
    whose ``aux`` nobody reads (a perturbed point, a shape probe).

    Examples:
        >>> import di
        >>> from di.backends.aux import value_only
        >>> value_only(lambda x: (2 * x, "note"), di.AutoFiniteDiff(), "jacobian")(3.0)
        6.0
    """

    def value(*args: Any) -> Any:
        return split_output(f(*args), backend, operator)[0]

    return value


class AuxSplit:
    """The part of an ``aux`` pytree that stays in Python: its structure and its
    non-array leaves, with the positions of the arrays that travel through the engine.

    It holds no array (the engine's arrays may be tracers of a finished trace).
    """

    __slots__ = ("_arrays_only", "_keys", "_leaves", "_positions", "_spec", "dict_keys", "dict_pick")

    def __init__(self, spec: Any, leaves: list[Any], positions: tuple[int, ...]) -> None:
        self._spec = spec
        self._leaves = leaves
        self._positions = positions
        self._arrays_only = len(positions) == len(leaves)  # (the arrays are the leaves, in order)
        # a flat dict of arrays (the usual aux): its keys in the order of the leaves, so
        # that joining is one dict comprehension, not an unflatten
        self._keys: list[tuple[Any, int]] | None = None
        # for a flat dict of arrays: its keys, and what picks its arrays in their order
        # (None: the arrays are in it already), for a caller joining it inline
        self.dict_keys: tuple[Any, ...] | None = None
        self.dict_pick: Callable[[Sequence[Any]], Any] | None = None
        if self._arrays_only:
            skeleton = spec.unflatten(range(len(leaves)))
            if skeleton.__class__ is dict and all(index.__class__ is int for index in skeleton.values()):
                self._keys = list(skeleton.items())
                self.dict_keys = tuple(skeleton)
                indices = tuple(skeleton.values())
                if indices != tuple(range(len(indices))):
                    self.dict_pick = itemgetter(*indices)  # (two or more: a tuple)

    def join(self, arrays: Sequence[Any]) -> Any:
        """The ``aux`` pytree with these arrays in the array positions."""
        if self._arrays_only:
            keys = self._keys
            if keys is not None:
                return {key: arrays[index] for key, index in keys}
            return self._spec.unflatten(arrays)
        leaves = list(self._leaves)
        for position, array in zip(self._positions, arrays):
            leaves[position] = array
        return self._spec.unflatten(leaves)


def split_aux(aux: Any, is_array: Callable[[Any], bool]) -> tuple[tuple[Any, ...], AuxSplit]:
    """Split ``aux`` into its array leaves (as ``is_array`` says) and the rest.

    Examples:
        >>> import numpy as np
        >>> from di.backends.aux import split_aux
        >>> arrays, rest = split_aux({"loss": np.ones(2), "note": "ok", "step": None}, lambda v: hasattr(v, "shape"))
        >>> arrays, rest.join([np.zeros(2)])
        ((array([1., 1.]),), {'loss': array([0., 0.]), 'note': 'ok', 'step': None})
    """
    leaves, spec = tree_flatten(aux)
    positions = tuple(i for i, leaf in enumerate(leaves) if is_array(leaf))
    arrays = tuple(leaves[i] for i in positions)
    kept = [None if i in positions else leaf for i, leaf in enumerate(leaves)]
    return arrays, AuxSplit(spec, kept, positions)


def aux_converter(from_family: str, to_family: str) -> Callable[[Any], Any]:
    """Bring the array leaves of an ``aux`` pytree into ``to_family`` (the caller's),
    leaving its other leaves (strings, Python numbers, ``None``) as they are.

    Every array leaf comes back as an array of ``to_family``: those of the engine's
    family ``from_family``, those of any other family ``f`` put there, and NumPy
    scalars (``np.float64``, what NumPy reductions return), which become 0-d arrays.

    Examples:
        >>> import numpy as np
        >>> from di.backends.aux import aux_converter
        >>> aux_converter("numpy", "numpy")({"note": "ok", "loss": np.float64(0.5)})
        {'note': 'ok', 'loss': array(0.5)}
    """
    convert = converter(from_family, to_family)

    def convert_leaf(leaf: Any) -> Any:
        family = family_of(leaf)
        if family is None:
            return leaf
        if isinstance(leaf, np.generic):  # a NumPy scalar: an array of the caller's family
            leaf = np.asarray(leaf)
        return (convert if family == from_family else converter(family, to_family))(leaf)

    if convert is not identity:

        def convert_arrays(aux: Any) -> Any:
            return tree_map(convert_leaf, aux)

        return convert_arrays

    # the classes met as arrays of from_family (no NumPy scalar): a flat dict of them, the
    # usual aux, is recognised by one loop over its values, without a call per leaf
    own_classes: set[type] = set()

    def in_place(aux: Any) -> Any:
        # arrays of the caller's family already (what a compiled program returns): the
        # pytree as it is, without rebuilding it (an optree map, 1-3 us per call)
        if aux.__class__ is dict:
            for item in aux.values():
                if item.__class__ not in own_classes:
                    break
            else:
                return aux
        if _of_family(aux, from_family, 0):
            if aux.__class__ is dict:
                own_classes.update(item.__class__ for item in aux.values() if item.__class__ not in _CONTAINERS)
            return aux
        return tree_map(convert_leaf, aux)

    # (for a step that lays aux out to test a flat dict's classes inline: a Python call fewer)
    in_place.own_classes = own_classes  # type: ignore[attr-defined]
    return in_place


_CONTAINERS = (dict, list, tuple)


def _of_family(tree: Any, family: str, depth: int) -> bool:
    """Whether ``tree`` is an array of ``family`` (no NumPy scalar) or dicts, lists
    and tuples of such arrays, a few levels deep (a walk in Python: optree's own
    costs a microsecond even for one leaf)."""
    kind = tree.__class__
    if kind is dict:
        children: Any = tree.values()
    elif kind is list or kind is tuple:
        children = tree
    else:
        return family_of(tree) == family and not isinstance(tree, np.generic)
    return depth < 8 and all(_of_family(child, family, depth + 1) for child in children)


def outputs(output: Any, has_aux: bool) -> tuple[Any, ...]:
    """What a checked ``f`` returned inside an engine, as a tuple to unpack with
    ``y, *parts = outputs(...)``: ``(y,)``, or under ``has_aux`` ``(y, aux's
    engine part)``.

    Examples:
        >>> from di.backends.aux import outputs
        >>> outputs(1.0, False), outputs((1.0, ("a",)), True)
        ((1.0,), (1.0, ('a',)))
    """
    return output if has_aux else (output,)  # type: ignore[no-any-return]


def with_aux(has_aux: bool, finish: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``finish`` applied to a program's result, leaving its ``aux`` (when it has
    one: a ``(result, aux)`` pair) as it is."""
    if not has_aux:
        return finish

    def finish_result(output: Any) -> Any:
        result, aux = output
        return finish(result), aux

    return finish_result
