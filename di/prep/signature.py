"""The signature a prep records of one argument (:class:`ArgumentCheck`): how a
later call's argument is recognised, how the prepared one is described, and why
another differs.
"""

from __future__ import annotations

from typing import Any

from di.contexts import Context
from di.families import ArraySpec, get_family
from di.prep.description import describe_value
from di.prep.facts import Facts
from di.prep.matching import KeyFunction, Matcher, key_function, matcher_for
from di.prep.traced import plain
from di.pytrees import is_pytree, leaf_paths, tree_flatten

__all__ = ["ArgumentCheck"]


class ArgumentCheck:
    """How one prepared argument is recognised on later calls.

    Args:
        label: ``"x"`` or ``"context 1"``, ...
        wrapper: the context class (``Constant``/``Cache``), ``None`` for ``x``.
        key: the key function.
        expected: the key at preparation.
        description: the human description at preparation.
    """

    __slots__ = ("_annotation", "_description", "_spec", "expected", "key", "label", "leaves", "matcher", "wrapper")

    def __init__(
        self, label: str, wrapper: type | None, key: KeyFunction, expected: Any, description: str | ArraySpec
    ) -> None:
        self.label = label
        self.wrapper = wrapper
        self.key = key
        self.expected = expected
        # an array's description is written when first read (a report, a repr): its spec and
        # annotation, recorded at preparation, hold all it says
        self._description = description if isinstance(description, str) else None
        self._spec = None if isinstance(description, str) else description
        self._annotation = ""
        self.leaves: tuple[Any, list[tuple[KeyFunction, Any, str]]] | None = None
        self.matcher: Matcher = lambda given: bool(key(given) == expected)

    @property
    def description(self) -> str:
        """The human description at preparation (``"Constant numpy float64 (3,)"``)."""
        if self._description is None:
            assert self._spec is not None
            described = self._spec.describe()
            if self._annotation:
                described = f"{described} ({self._annotation})"
            self._description = described if self.wrapper is None else f"{self.wrapper.__name__} {described}"
        return self._description

    @classmethod
    def of(cls, label: str, value: Any, wrapper: type | None = None, facts: Facts | None = None) -> ArgumentCheck:
        """Record ``value`` (the bare value, not its context wrapper), its NumPy
        arrays of a subclass as plain ndarrays (:func:`plain`); ``facts``, when
        given, are ``value``'s (:class:`~di.prep.facts.Facts`)."""
        if facts is None:
            facts = Facts(label, value)
        value = facts.plain
        if facts.family is not None:  # an array: as its family keys, matches and describes it
            family = get_family(facts.family)
            array = cls(label, wrapper, family.key, family.key(value), facts.spec)  # type: ignore[arg-type]
            array._annotation = family.annotation(value)
            array.matcher = family.matcher(value)
            return array
        key = key_function(value)
        described = describe_value(value)
        if wrapper is not None:
            described = f"{wrapper.__name__} {described}"
        check = cls(label, wrapper, key, key(value), described)
        check.matcher = matcher_for(value, key)
        if facts.pytree:
            leaves, spec = tree_flatten(value)
            check.leaves = (
                spec,
                [(key_function(leaf), key_function(leaf)(leaf), describe_value(leaf)) for leaf in leaves],
            )
        return check

    def explain(self, value: Any) -> str:
        """Why ``value`` differs, naming the first differing leaf of a pytree, such
        as ``x['weights'][1]``."""
        inner = value.value if isinstance(value, Context) and value.__class__ is self.wrapper else value
        if self.leaves is not None and is_pytree(inner):
            value = inner
            spec, expected_leaves = self.leaves
            leaves, given_spec = tree_flatten(value)
            if given_spec != spec:
                return f"prepared structure {spec}   given {given_spec}"
            root = "x" if self.label == "x" else self.label.replace(" ", "")
            for path, leaf, (key, expected, description) in zip(leaf_paths(value, root), leaves, expected_leaves):
                try:
                    same = key(leaf) == expected
                except Exception:
                    same = False
                if not same:
                    given = describe_value(leaf)
                    unseen = _unseen(description, given, key, expected, leaf)
                    return f"{path} differs: prepared {description}   given {given}{unseen}"
        given = describe_value(inner)
        prepared = (
            self.description.removeprefix(f"{self.wrapper.__name__} ") if self.wrapper is not None else self.description
        )
        unseen = _unseen(prepared, given, self.key, self.expected, inner)
        return f"prepared {self.description}   given {describe_value(value)}{unseen}"

    def matches(self, value: Any) -> bool:
        """Whether ``value`` (a bare value, or a context for contexts) fits."""
        try:
            if self.wrapper is not None:
                if value.__class__ is not self.wrapper:
                    return False
                value = value.value  # type: ignore[attr-defined]
            return bool(self.key(value) == self.expected or self.key(plain(value)) == self.expected)
        except Exception:
            return False


def _unseen(prepared: str, given: str, key: KeyFunction, expected: Any, value: Any) -> str:
    """What differs when the two descriptions read the same (a class, a device the
    description leaves out): the fields of the keys that differ, or ``""``."""
    if prepared != given:
        return ""
    try:
        found = key(value)
    except Exception:
        return ""
    if isinstance(found, tuple) and isinstance(expected, tuple) and len(found) == len(expected):
        pairs = [(a, b) for a, b in zip(expected, found) if a != b]
    else:
        pairs = [(expected, found)]

    def name(field: Any) -> str:
        return field.__qualname__ if isinstance(field, type) else repr(field)

    differences = ", ".join(f"prepared {name(a)}, given {name(b)}" for a, b in pairs)
    return f" ({differences})" if differences else ""
