"""How a prep compares a call's arguments with the prepared ones: key functions
and matchers.

A prep remembers, for ``x`` and each context, a *key*: a small tuple of the
argument's type, shape, dtype and (torch) device, computed by a key function
chosen once per argument at preparation. A *matcher* is the predicate a strict
prepared call asks instead (an array's family compares its fields and builds no
key); keys are compared only on the failure path, to say why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from di.families import family_of, get_family
from di.pytrees import is_pytree, tree_flatten
from di.pytrees.structure import Structure

__all__ = ["KeyFunction", "Matcher", "key_function", "matcher_for", "one_family_matcher", "same_selector"]

KeyFunction = Callable[[Any], Any]
Matcher = Callable[[Any], bool]


def same_selector(given: Any, prepared: Any) -> bool:
    """Whether ``given`` is the selector ``prepared`` or equal to it (``==``); a
    value whose ``==`` answers no truth value (an array passed as the backend) is not."""
    if given is prepared:
        return True
    try:
        return bool(given == prepared)
    except Exception:  # an array's elementwise answer: no selector
        return False


def _type_key(value: Any) -> Any:
    return value.__class__


def _tuple_key(keys: Sequence[KeyFunction]) -> KeyFunction:
    """Key of a tuple (tangents, a tuple of static values): its length and the key
    of each element."""
    count = len(keys)

    def key(value: Any) -> Any:
        if value.__class__ is not tuple or len(value) != count:
            return (value.__class__, len(value) if isinstance(value, (tuple, list)) else None)
        return tuple(k(v) for k, v in zip(keys, value))

    return key


def _tree_key(structure: Structure, keys: Sequence[KeyFunction]) -> KeyFunction:
    """Key of a pytree: its structure and the key of each leaf."""

    def key(value: Any) -> Any:
        leaves = structure.leaves(value)
        if leaves is None:
            return ("structure", tree_flatten(value)[1])
        return tuple(k(leaf) for k, leaf in zip(keys, leaves))

    return key


def _tree_matcher(structure: Structure, leaves_match: Callable[[Sequence[Any]], bool]) -> Matcher:
    """A predicate recognising pytrees of ``structure`` whose leaves match, in plain
    Python (a compiler tracing a prepared call follows it)."""

    def matches(given: Any) -> bool:
        leaves = structure.leaves(given)
        return leaves is not None and leaves_match(leaves)

    # (its two parts, for a prep's runner to call inline: a Python call fewer per pytree)
    matches.tree_parts = (structure.leaves, leaves_match)  # type: ignore[attr-defined]
    return matches


def one_family_matcher(values: Sequence[Any]) -> Callable[[Sequence[Any]], bool] | None:
    """A predicate recognising sequences of arrays like ``values`` in one loop of
    their family (:meth:`di.Family.leaves_matcher`), when they are arrays of one
    family; else ``None``."""
    names = {family_of(value) for value in values}
    if len(names) == 1 and None not in names:
        return get_family(names.pop()).leaves_matcher(values)  # type: ignore[arg-type]
    return None


def _leaves_matcher(leaves: Sequence[Any]) -> Callable[[Sequence[Any]], bool]:
    """A predicate recognising sequences of leaves like ``leaves``: their family's
    one loop when they are arrays of one family (the common pytree ``x``), else
    each leaf's matcher."""
    same_family = one_family_matcher(leaves)
    if same_family is not None:
        return same_family
    matchers = [matcher_for(leaf, key_function(leaf)) for leaf in leaves]

    def matches(given: Sequence[Any]) -> bool:
        return all(match(leaf) for match, leaf in zip(matchers, given))

    return matches


def key_function(value: Any) -> KeyFunction:
    """The key function for an argument like ``value``.

    Arrays are keyed as their family says (class, shape, dtype, and device where
    it has several); any other value by its class only, so a new Python float or
    a new static value is accepted (compiled backends then decide whether that
    means a new compile).
    """
    if value.__class__ is tuple:
        return _tuple_key([key_function(item) for item in value])
    if is_pytree(value):
        leaves, spec = tree_flatten(value)
        if not spec.is_leaf():  # (a JAX-only node is keyed by its class)
            return _tree_key(Structure(value), [key_function(leaf) for leaf in leaves])
    family = family_of(value)
    if family is not None:
        return get_family(family).key
    return _type_key


def matcher_for(value: Any, key: KeyFunction) -> Matcher:
    """A predicate recognising arguments like ``value``: for arrays, the family's
    field-by-field matcher, which builds no key tuple (the hot path of a strict
    prepared call); otherwise it compares keys."""
    family = family_of(value)
    if family is None:
        if is_pytree(value):
            leaves, spec = tree_flatten(value)
            if not spec.is_leaf():
                return _tree_matcher(Structure(value), _leaves_matcher(leaves))
        expected = key(value)
        return lambda given: bool(key(given) == expected)
    return get_family(family).matcher(value)
