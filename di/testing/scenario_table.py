"""The records the built-in scenario tables are written in, and the builder that
turns their rows into :class:`~di.testing.Scenario` objects.

A table row says *what* a scenario is: its operator, the function (an
:class:`Analytic`: ``f`` with its analytic derivatives), how to draw ``x``, the
contexts and the tangents (:class:`Uniform`, :class:`Fixed`, :class:`NaNs`,
:class:`Point`, :data:`SAME_X`), and its tags. A :class:`RowGroup` builds its
rows once per dtype from one random generator, in table order, so the points
depend only on the seed and the order of the rows. Every drawn array is rounded
to the scenario's dtype and the references are computed in float64 from the
rounded values, so they are exact for the stored point. No engine is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from di.contexts import Cache, Constant, Context
from di.testing.scenario import Scenario

__all__ = ["SAME_X", "Analytic", "Fixed", "NaNs", "Point", "Row", "RowGroup", "Uniform"]

DTYPE_NAMES = {np.float64: ("float64", "f64"), np.float32: ("float32", "f32")}
"""The dtypes of the tables: the tag and the name suffix of each."""


# --- how values are drawn --------------------------------------------------------------------------


@dataclass(frozen=True, init=False)
class Uniform:
    """An array of ``shape`` drawn uniformly from ``[low, high)``.

    Args:
        *shape: the array's shape; none for a 0-d array.
        low: the lower bound.
        high: the upper bound.

    Examples:
        >>> import numpy as np
        >>> from di.testing.scenario_table import Uniform
        >>> Uniform(2, 3).draw(np.random.default_rng(0)).shape
        (2, 3)
    """

    shape: tuple[int, ...]
    low: float = -1.0
    high: float = 1.0

    def __init__(self, *shape: int, low: float = -1.0, high: float = 1.0) -> None:
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """Draw the values (float64) from ``rng``."""
        return rng.uniform(self.low, self.high, self.shape)


@dataclass(frozen=True)
class Fixed:
    """A given value, as an array (``Fixed(0.3)`` is the 0-d array ``0.3``).

    A Python float itself (``x=0.7``, ``Constant(1.5)``) is passed to ``f`` as it is.

    Examples:
        >>> import numpy as np
        >>> from di.testing.scenario_table import Fixed
        >>> Fixed(0.3).draw(np.random.default_rng(0))
        array(0.3)
    """

    value: float

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """The value as an array; ``rng`` is not used."""
        return np.asarray(self.value)


@dataclass(frozen=True, init=False)
class NaNs:
    """An array of ``shape`` filled with NaN: a ``Cache`` buffer that ``f`` must overwrite.

    Examples:
        >>> import numpy as np
        >>> from di.testing.scenario_table import NaNs
        >>> NaNs(2).draw(np.random.default_rng(0))
        array([nan, nan])
    """

    shape: tuple[int, ...]

    def __init__(self, *shape: int) -> None:
        object.__setattr__(self, "shape", shape)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """The buffer; ``rng`` is not used."""
        return np.full(self.shape, np.nan)


@dataclass(frozen=True)
class Point:
    """The value named ``name`` among the points a :class:`RowGroup` draws before its rows.

    Examples:
        >>> from di.testing.scenario_table import Point
        >>> Point("x_vec").name
        'x_vec'
    """

    name: str


@dataclass(frozen=True)
class _SameX:
    """The ``x`` of the row before (rounded to this row's dtype)."""

    def __repr__(self) -> str:
        return "SAME_X"


SAME_X = _SameX()
"""``x=SAME_X``: the point of the row before, for two scenarios at one point."""


# --- the functions and their derivatives -----------------------------------------------------------


def _push(jacobian: np.ndarray, tangent: np.ndarray) -> np.ndarray:
    return np.tensordot(jacobian, tangent, axes=tangent.ndim)


def _pull(jacobian: np.ndarray, cotangent: np.ndarray) -> np.ndarray:
    return np.tensordot(cotangent, jacobian, axes=cotangent.ndim)


@dataclass(frozen=True)
class Analytic:
    """A scenario function with its analytic derivatives, in NumPy float64.

    Every derivative takes ``f``'s own arguments (``x`` and the context values);
    ``push``, ``pull`` and ``hvp`` take the tangent after them. A derivative left
    out is derived from the others where it can be (``push`` and ``pull`` from
    ``first``, ``hvp`` from ``second``).

    Attributes:
        f: the function, written with ``xp = di.array_namespace(x)``.
        first: the first derivative: the gradient, the derivative or the jacobian
            (shaped ``f(x).shape + x.shape``).
        second: the hessian or the second derivative.
        push: the pushforward of one tangent (default: ``first`` contracted with it).
        pull: the pullback of one cotangent (default: it contracted with ``first``).
        hvp: the Hessian-vector product with one tangent (default: ``second @ v``).

    Examples:
        >>> import numpy as np
        >>> from di.testing.scenario_table import Analytic
        >>> square = Analytic(lambda x: (x * x).sum(), first=lambda x: 2 * x)
        >>> square.references("pushforward", np.array([1.0, 2.0]), (), (np.array([1.0, 0.0]),))
        ((array(2.),), None)
    """

    f: Callable[..., Any]
    first: Callable[..., Any] | None = None
    second: Callable[..., Any] | None = None
    push: Callable[..., Any] | None = None
    pull: Callable[..., Any] | None = None
    hvp: Callable[..., Any] | None = None

    def references(
        self, operator: str, x: Any, contexts: tuple[Any, ...], tangents: tuple[Any, ...] | None
    ) -> tuple[Any, Any]:
        """``res1`` and ``res2`` of ``operator`` at ``x`` (all arguments in float64).

        Args:
            operator: the scenario's operator.
            x: the point.
            contexts: the context values, in ``f``'s order.
            tangents: the tangents, for the operators that take them.

        Returns:
            ``(res1, res2)``; ``res2`` is ``None`` for first-order operators.

        Raises:
            ValueError: a derivative the operator needs is missing.
        """
        args = (x, *contexts)
        if operator == "pushforward":
            push = self.push or (lambda *a: _push(self._need("first", operator)(*a[:-1]), a[-1]))
            return tuple(push(*args, t) for t in tangents or ()), None
        if operator == "pullback":
            pull = self.pull or (lambda *a: _pull(self._need("first", operator)(*a[:-1]), a[-1]))
            return tuple(pull(*args, t) for t in tangents or ()), None
        res1 = self._need("first", operator)(*args)
        if operator == "hvp":
            hvp = self.hvp or (lambda *a: self._need("second", operator)(*a[:-1]) @ a[-1])
            return res1, tuple(hvp(*args, v) for v in tangents or ())
        if operator in ("hessian", "second_derivative"):
            return res1, self._need("second", operator)(*args)
        return res1, None

    def _need(self, which: str, operator: str) -> Callable[..., Any]:
        derivative = getattr(self, which)
        if derivative is None:
            raise ValueError(f"a {operator} scenario of {self.f.__name__} needs its {which!r} derivative")
        return derivative


# --- rows and groups -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One scenario of a table.

    Attributes:
        operator: the operator (a key of :data:`~di.testing.OPERATORS`).
        function: the function and its derivatives.
        label: the middle of the name ``operator/label/f64``; default ``f``'s name.
        x: how to draw the point: a sampler, a :class:`Point`, :data:`SAME_X`, a
            Python float, or a dict of those (a pytree ``x``).
        contexts: ``di.Constant`` and ``di.Cache`` whose values say how to draw them
            (a Python float stays as it is).
        tangents: how to draw each tangent, for the operators that take them.
        tags: tags besides the dtype's, the group's and ``"constant"``/``"cache"``
            (added when the row has such a context).
        dtype: this row's dtype, if not the group's.

    Examples:
        >>> import numpy as np
        >>> from di.testing.scenario_table import Analytic, Row, RowGroup, Uniform
        >>> row = Row("gradient", Analytic(lambda x: (x * x).sum(), first=lambda x: 2 * x), "square", x=Uniform(3))
        >>> RowGroup((row,)).build(np.random.default_rng(0))[0].name
        'gradient/square/f64'
    """

    operator: str
    function: Analytic
    label: str = ""
    x: Any = None
    contexts: tuple[Context, ...] = ()
    tangents: tuple[Any, ...] | None = None
    tags: tuple[str, ...] = ()
    dtype: Any = None


@dataclass(frozen=True)
class RowGroup:
    """Rows built together from one random generator: a scenario group.

    Calling the group with a generator builds its scenarios (a
    ``ScenarioGroup`` of :data:`~di.testing.scenarios.SCENARIO_GROUPS`).

    Attributes:
        rows: the rows, built in order (the order fixes the points).
        dtypes: the group is built once per dtype, in order, with one generator.
        tags: tags of every scenario of the group.
        points: draws the values that :class:`Point` names, before the rows.
    """

    rows: tuple[Row, ...]
    dtypes: tuple[Any, ...] = (np.float64,)
    tags: tuple[str, ...] = ()
    points: Callable[[np.random.Generator], Mapping[str, np.ndarray]] | None = None

    def __call__(self, rng: np.random.Generator) -> list[Scenario]:
        return self.build(rng)

    def build(self, rng: np.random.Generator) -> list[Scenario]:
        """The scenarios of every row, for every dtype.

        Args:
            rng: the generator every value is drawn from.

        Returns:
            The scenarios, in the order of the dtypes, then of the rows.
        """
        points = dict(self.points(rng)) if self.points is not None else {}
        scenarios: list[Scenario] = []
        for group_dtype in self.dtypes:
            previous_x: tuple[Any, Any] | None = None
            for row in self.rows:
                builder = _RowBuilder(rng, row.dtype or group_dtype, points, previous_x)
                scenarios.append(builder.scenario(row, self.tags))
                previous_x = builder.x
        return scenarios


@dataclass
class _RowBuilder:
    """Draws one row's values (``x``, then the contexts, then the tangents) and builds its scenario."""

    rng: np.random.Generator
    dtype: Any
    points: dict[str, np.ndarray]
    previous_x: tuple[Any, Any] | None
    x: tuple[Any, Any] = field(default=(None, None))

    def scenario(self, row: Row, group_tags: Iterable[str]) -> Scenario:
        self.x = x, x64 = self.value(row.x)
        contexts, contexts64 = [], []
        for context in row.contexts:
            value, value64 = self.value(context.value)
            contexts.append(Constant(value, static=context.static) if isinstance(context, Constant) else Cache(value))
            contexts64.append(value64)
        tangents = tangents64 = None
        if row.tangents is not None:
            drawn = [self.value(t) for t in row.tangents]
            tangents, tangents64 = tuple(t for t, _ in drawn), tuple(t for _, t in drawn)
        res1, res2 = row.function.references(row.operator, x64, tuple(contexts64), tangents64)
        dtype_tag, suffix = DTYPE_NAMES[self.dtype]
        context_tags = {c.kind for c in row.contexts}  # "constant", "cache"
        return Scenario(
            row.operator,
            row.function.f,
            x,
            contexts=contexts,
            tangents=tangents,
            res1=res1,
            res2=res2,
            name=f"{row.operator}/{row.label or row.function.f.__name__}/{suffix}",
            tags={dtype_tag, *group_tags, *context_tags, *row.tags},
        )

    def value(self, spec: Any) -> tuple[Any, Any]:
        """The value ``spec`` gives, in the row's dtype, and the same value in float64."""
        if isinstance(spec, dict):
            pairs = {key: self.value(item) for key, item in spec.items()}
            return {k: v for k, (v, _) in pairs.items()}, {k: v64 for k, (_, v64) in pairs.items()}
        if isinstance(spec, float):
            return spec, spec
        if spec is SAME_X:
            if self.previous_x is None:
                raise ValueError("SAME_X in the first row of a group")
            return self._rounded(self.previous_x[0])
        if isinstance(spec, Point):
            return self._rounded(self.points[spec.name])
        if isinstance(spec, (Uniform, Fixed, NaNs)):
            return self._rounded(spec.draw(self.rng))
        raise TypeError(f"a scenario table cannot draw {spec!r}")

    def _rounded(self, values: Any) -> tuple[np.ndarray, np.ndarray]:
        """``values`` in the row's dtype and that back in float64, where the references are
        computed, so that they are exact for the stored point."""
        stored = np.asarray(values, dtype=self.dtype)
        return stored, stored.astype(np.float64)
