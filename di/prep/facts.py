"""What a preparation asks of each of its arguments, found once.

A preparation asks the same questions of ``x`` (and of each context's value and
tangent) at every step: its argument checks, the engine's dtypes, the traces, the
caller's family, the prep's signature. Asked of the value each time, ``x`` had its
family looked up 39 times in one ``prepare_gradient`` and a pytree ``x`` was
flattened again and again; a :class:`Facts` is made once per argument and handed
along.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from di.families import ArraySpec, family_of, spec_of
from di.prep.traced import plain
from di.pytrees import is_pytree, leaf_paths, tree_flatten

__all__ = ["ArgumentFacts", "Facts"]

_UNSET: Any = object()


class Facts:
    """One argument of a preparation and what preparation asks of it: its array
    family and whether it is a pytree (found when it is made), its array leaves,
    its spec and the value a prep records (found when first asked, then kept).

    It holds the argument, as the preparation does; a prep keeps none.

    Args:
        name: how errors name the argument (``"x"``, ``"context 1"``, ``"tx[0]"``).
        value: the argument (a context's value, not the context).

    Examples:
        >>> import numpy as np
        >>> from di.prep.facts import Facts
        >>> facts = Facts("x", {"w": np.ones(2), "b": [np.ones(1)]})
        >>> facts.family, facts.pytree, [(path, family) for path, _, family in facts.leaves]
        (None, True, [("x['b'][0]", 'numpy'), ("x['w']", 'numpy')])
        >>> Facts("x", np.ones(2)).spec
        ArraySpec(numpy float64 (2,))
    """

    __slots__ = ("_leaves", "_plain", "_spec", "family", "name", "pytree", "value")

    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value = name, value
        self.family = family_of(value)
        self.pytree = self.family is None and is_pytree(value)
        self._leaves: Any = _UNSET
        self._plain: Any = _UNSET
        self._spec: Any = _UNSET

    @property
    def leaves(self) -> list[tuple[str, Any, str | None]]:
        """``(path, leaf, family)`` of the array, or of each leaf of the pytree (its
        family ``None`` where it is no array), named from :attr:`name`; nothing for
        other values."""
        if self._leaves is _UNSET:
            if self.family is not None:
                self._leaves = [(self.name, self.value, self.family)]
            elif self.pytree:
                leaves = tree_flatten(self.value)[0]
                paths = leaf_paths(self.value, self.name)
                self._leaves = [(path, leaf, family_of(leaf)) for path, leaf in zip(paths, leaves)]
            else:
                self._leaves = []
        return self._leaves  # type: ignore[no-any-return]

    @property
    def plain(self) -> Any:
        """The value as a prep records and compares it (:func:`di.prep.traced.plain`)."""
        if self._plain is _UNSET:
            value = self.value
            # (an array of another class than a NumPy subclass is its own plain value)
            known = self.family is not None and (value.__class__ is np.ndarray or not isinstance(value, np.ndarray))
            self._plain = value if known else plain(value)
        return self._plain

    @property
    def spec(self) -> ArraySpec | None:
        """The :class:`~di.families.ArraySpec` of an array, ``None`` for other values."""
        if self._spec is _UNSET:
            self._spec = None if self.family is None else spec_of(self.value)
        return self._spec  # type: ignore[no-any-return]


class ArgumentFacts(NamedTuple):
    """The :class:`Facts` of a preparation's ``x`` and of its contexts' values.

    Attributes:
        x: those of ``x``.
        values: those of each context's value, in order (named ``"context 1"``, ...).

    Examples:
        >>> import numpy as np, di
        >>> from di.prep.facts import ArgumentFacts
        >>> facts = ArgumentFacts.of(np.zeros(2), [di.Constant(2.0)])
        >>> facts.x.family, [(value.name, value.family) for value in facts.values]
        ('numpy', [('context 1', None)])
    """

    x: Facts
    values: tuple[Facts, ...]

    @classmethod
    def of(cls, x: Any, contexts: Any) -> ArgumentFacts:
        """The facts of ``x`` and of the values of ``contexts``."""
        return cls(Facts("x", x), tuple(Facts(f"context {i}", c.value) for i, c in enumerate(contexts, start=1)))
