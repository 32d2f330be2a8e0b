"""The :class:`Scenario` record: one operator on one function at one point, with
its analytic references, and the operator table the runners read.

A :class:`Scenario` names one operator (``"gradient"``, ``"hvp"``, ...) and carries
everything needed to check a backend on it: ``f``, ``x``, the contexts, the
tangents (for ``pushforward``, ``pullback`` and ``hvp``), and reference results
``res1`` (first order) and ``res2`` (second order) computed analytically with
NumPy in float64, independently of every backend. Its arrays may be of any
registered array family (:meth:`Scenario.with_family`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from di.contexts import Cache, Constant, Context
from di.families import family_of
from di.testing.arrays import copy_tree, from_numpy_in, negate, to_float64, to_numpy, tree_map, zeros_like

__all__ = ["AUX_OPERATORS", "OPERATORS", "OperatorSpec", "PrepArgs", "Scenario", "replace_scenario"]


# --- the operator table ------------------------------------------------------------


@dataclass(frozen=True)
class OperatorSpec:
    """How the runners call one operator and which references they compare.

    Attributes:
        name: the operator's name, as in ``Scenario.operator``.
        prepare: the name of its ``di.prepare_*`` function.
        call: the name of the plain call (``di.hvp``).
        value_and: the name of the combined form (``di.gradient_and_hvp``).
        call_result: the reference the plain call returns: ``"res1"`` or ``"res2"``.
        value_and_results: the references the combined form returns, in order,
            among ``"y"`` (the value of ``f``), ``"res1"`` and ``"res2"``.
        takes_tangents: whether the operator (and its ``prepare``) takes a tuple
            of tangents after ``x``.
        order: 1 or 2 (second-order operators get looser default tolerances on
            finite differences).

    Examples:
        >>> from di.testing import OPERATORS
        >>> OPERATORS["hvp"].value_and
        'gradient_and_hvp'
    """

    name: str
    prepare: str
    call: str
    value_and: str
    call_result: str
    value_and_results: tuple[str, ...]
    takes_tangents: bool
    order: int

    def missing(self, module: Any) -> list[str]:
        """The names of this operator's functions that ``module`` lacks.

        Args:
            module: the ``di`` module (or any namespace).

        Returns:
            The missing names, empty when the operator is fully available.
        """
        return [name for name in (self.prepare, self.call, self.value_and) if getattr(module, name, None) is None]


OPERATORS: dict[str, OperatorSpec] = {
    spec.name: spec
    for spec in (
        OperatorSpec(
            "derivative", "prepare_derivative", "derivative", "value_and_derivative", "res1", ("y", "res1"), False, 1
        ),
        OperatorSpec("gradient", "prepare_gradient", "gradient", "value_and_gradient", "res1", ("y", "res1"), False, 1),
        OperatorSpec("jacobian", "prepare_jacobian", "jacobian", "value_and_jacobian", "res1", ("y", "res1"), False, 1),
        OperatorSpec(
            "pushforward", "prepare_pushforward", "pushforward", "value_and_pushforward", "res1", ("y", "res1"), True, 1
        ),
        OperatorSpec("pullback", "prepare_pullback", "pullback", "value_and_pullback", "res1", ("y", "res1"), True, 1),
        OperatorSpec("hvp", "prepare_hvp", "hvp", "gradient_and_hvp", "res2", ("res1", "res2"), True, 2),
        OperatorSpec(
            "hessian",
            "prepare_hessian",
            "hessian",
            "value_gradient_and_hessian",
            "res2",
            ("y", "res1", "res2"),
            False,
            2,
        ),
        OperatorSpec(
            "second_derivative",
            "prepare_second_derivative",
            "second_derivative",
            "value_derivative_and_second_derivative",
            "res2",
            ("y", "res1", "res2"),
            False,
            2,
        ),
    )
}


AUX_OPERATORS = frozenset({"derivative", "gradient", "jacobian", "pushforward", "pullback"})
"""The operators whose calls take ``has_aux`` (``f`` returning ``(y, aux)``)."""


@dataclass(frozen=True)
class PrepArgs:
    """The arguments a runner prepares with, before executing on the scenario's own.

    Attributes:
        x: the point to prepare at (same family, shape and dtype as the scenario's).
        tangents: the tangents to prepare with (operators that take tangents).
        contexts: the contexts to prepare with, same kinds and types.

    Examples:
        >>> import numpy as np
        >>> from di.testing import PrepArgs
        >>> PrepArgs(np.zeros(2)).contexts
        ()
    """

    x: Any
    tangents: tuple[Any, ...] | None = None
    contexts: tuple[Context, ...] = ()


@dataclass(frozen=True, init=False, eq=False, repr=False)
class Scenario:
    """One operator on one function at one point, with its reference results.

    Args:
        operator: the operator's name, a key of :data:`OPERATORS` (``"gradient"``,
            ``"derivative"``, ``"jacobian"``, ``"pushforward"``, ``"pullback"``,
            ``"hvp"``, ``"hessian"``, ``"second_derivative"``).
        f: the function, called as ``f(x, *context_values)``.
        x: the point (an array of any family, a Python float for ``derivative``,
            or a pytree of arrays).
        contexts: ``di.Constant`` / ``di.Cache`` wrappers, in ``f``'s order.
        tangents: a tuple of tangents (``pushforward``, ``hvp``: shaped like
            ``x``) or cotangents (``pullback``: shaped like ``f(x)``).
        res1: the first-order reference: the derivative, gradient or jacobian, or
            the tuple of pushforwards/pullbacks; for ``hvp``, ``hessian`` and
            ``second_derivative`` the gradient or derivative their combined forms
            also return.
        res2: the second-order reference: the hessian, the tuple of HVPs, or the
            second derivative.
        name: a readable identifier (default: built from the operator and ``f``).
        prep_args: what to prepare with; default (see :meth:`preparation`): a
            zeros-like ``x`` and zeros-like tangents, numeric ``Constant`` values
            negated, zeros-like ``Cache`` buffers.
        y: the value ``f(x)`` for the combined forms; default: ``f`` evaluated
            with NumPy in float64 (``None`` if that fails, and then the value is
            not checked).
        tags: labels used to select or skip scenarios (``"float32"``,
            ``"constant"``, ``"cache"``, ``"pytree"``, ...).
        has_aux: ``f`` returns ``(y, aux)``; the runners prepare and call with
            ``has_aux=True`` (first-order operators only) and compare ``aux``.
        aux: the reference ``aux``: a pytree whose arrays (numpy, compared like
            results, and expected in ``x``'s family) and other leaves (compared
            with ``==``) the calls must return.

    Raises:
        ValueError: unknown operator, tangents missing for an operator that
            needs them, or ``has_aux`` on an operator that does not take it.

    Examples:
        >>> import numpy as np, di
        >>> from di.testing import Scenario
        >>> s = Scenario("gradient", lambda x: (x * x).sum(), np.array([1.0, 2.0]),
        ...              res1=np.array([2.0, 4.0]))
        >>> s.name, float(s.y)
        ('gradient/<lambda>', 5.0)
    """

    operator: str
    f: Callable[..., Any]
    x: Any
    contexts: tuple[Context, ...] = ()
    tangents: tuple[Any, ...] | None = None
    res1: Any = None
    res2: Any = None
    name: str = ""
    prep_args: PrepArgs | None = None
    y: Any = field(default=None)
    tags: frozenset[str] = frozenset()
    has_aux: bool = False
    aux: Any = None

    def __init__(
        self,
        operator: str,
        f: Callable[..., Any],
        x: Any,
        *,
        contexts: Sequence[Context] = (),
        tangents: Sequence[Any] | None = None,
        res1: Any = None,
        res2: Any = None,
        name: str | None = None,
        prep_args: PrepArgs | None = None,
        y: Any = None,
        tags: Iterable[str] = (),
        has_aux: bool = False,
        aux: Any = None,
    ) -> None:
        if operator not in OPERATORS:
            raise ValueError(f"unknown operator {operator!r}; known: {', '.join(OPERATORS)}")
        if has_aux and operator not in AUX_OPERATORS:
            raise ValueError(f"{operator} does not take has_aux; operators that do: {', '.join(sorted(AUX_OPERATORS))}")
        spec = OPERATORS[operator]
        if spec.takes_tangents and tangents is None:
            raise ValueError(f"a {operator} scenario needs tangents (a tuple of arrays)")
        for context in contexts:
            if not isinstance(context, Context):
                raise TypeError(f"contexts must be di.Constant or di.Cache, not {type(context).__name__}")
        set_ = object.__setattr__
        set_(self, "operator", operator)
        set_(self, "f", f)
        set_(self, "x", x)
        set_(self, "contexts", tuple(contexts))
        set_(self, "tangents", None if tangents is None else tuple(tangents))
        set_(self, "res1", res1)
        set_(self, "res2", res2)
        set_(self, "name", name or f"{operator}/{getattr(f, '__name__', type(f).__name__)}")
        set_(self, "prep_args", prep_args)
        set_(self, "tags", frozenset(tags))
        set_(self, "has_aux", bool(has_aux))
        set_(self, "aux", aux)
        set_(self, "y", y if y is not None else _evaluate_in_float64(f, x, self.contexts, has_aux))

    def __repr__(self) -> str:
        return f"Scenario({self.name!r})"

    @property
    def spec(self) -> OperatorSpec:
        """The :class:`OperatorSpec` of this scenario's operator."""
        return OPERATORS[self.operator]

    @property
    def is_pytree(self) -> bool:
        """Whether ``x`` is a pytree (dict, list or tuple) rather than one array."""
        return isinstance(self.x, (dict, list, tuple))

    def reference(self, which: str) -> Any:
        """The reference named ``"y"``, ``"res1"``, ``"res2"`` or ``"aux"``."""
        return {"y": self.y, "res1": self.res1, "res2": self.res2, "aux": self.aux}[which]

    def preparation(self) -> PrepArgs:
        """The arguments to prepare with: ``prep_args`` or the default.

        The default is a zeros-like ``x``, zeros-like tangents, every numeric
        ``Constant`` negated (ints, strings and other static values kept) and
        every ``Cache`` replaced by a zeros-like buffer, so a prep that kept the
        values it was made with gives wrong answers.

        Returns:
            A :class:`PrepArgs`.
        """
        if self.prep_args is not None:
            return self.prep_args
        contexts: list[Context] = []
        for context in self.contexts:
            if isinstance(context, Constant):
                contexts.append(Constant(negate(context.value), static=context.static))
            elif isinstance(context, Cache):
                contexts.append(Cache(zeros_like(context.value)))
            else:  # pragma: no cover - a third-party context kind
                contexts.append(context)
        tangents = None if self.tangents is None else tuple(zeros_like(t) for t in self.tangents)
        return PrepArgs(zeros_like(self.x), tangents, tuple(contexts))

    def with_family(self, family: str) -> Scenario:
        """The same scenario with ``x``, tangents and array contexts in another family.

        References stay NumPy arrays (the runners compare in NumPy). NumPy
        arrays are converted with the family's ``from_numpy``, which imports its
        library: only call this for an installed family.

        Args:
            family: the name of any registered array family (see
                :func:`di.families.families`; ``di.register_family`` adds one).

        Returns:
            A new :class:`Scenario` named ``<name>/<family>``, or this one for
            NumPy, the family the scenarios are written in.

        Raises:
            ValueError: no family of that name is registered.

        Examples:
            >>> import numpy as np
            >>> from di.testing import Scenario
            >>> s = Scenario("gradient", lambda x: (x * x).sum(), np.ones(2), res1=2 * np.ones(2))
            >>> s.with_family("numpy") is s
            True
        """
        convert = from_numpy_in(family)  # checks the name first
        if family == family_of(np.empty(0)):  # the scenarios' own arrays are NumPy's
            return self

        def convert_context(context: Context) -> Context:
            if isinstance(context, Constant):
                return Constant(tree_map(convert, context.value), static=context.static)
            return type(context)(tree_map(convert, context.value))

        return replace_scenario(
            self,
            x=tree_map(convert, self.x),
            contexts=tuple(convert_context(c) for c in self.contexts),
            tangents=None if self.tangents is None else tuple(tree_map(convert, t) for t in self.tangents),
            name=f"{self.name}/{family}",
            tags=self.tags | {family},
            prep_args=None,
        )


def replace_scenario(scenario: Scenario, **changes: Any) -> Scenario:
    """A copy of ``scenario`` with some fields changed (``dataclasses.replace`` for
    :class:`Scenario`, whose constructor is keyword-only after ``x``).

    Args:
        scenario: the scenario to copy.
        **changes: new values of fields (``operator``, ``f``, ``x``, ``contexts``,
            ``tangents``, ``res1``, ``res2``, ``name``, ``prep_args``, ``y``, ``tags``).

    Returns:
        The new :class:`Scenario`.

    Examples:
        >>> import numpy as np
        >>> from di.testing import Scenario, replace_scenario
        >>> s = Scenario("gradient", lambda x: (x * x).sum(), np.ones(2), res1=2 * np.ones(2))
        >>> replace_scenario(s, name="wrong", res1=np.zeros(2)).name
        'wrong'
    """
    fields = {
        "contexts": scenario.contexts,
        "tangents": scenario.tangents,
        "res1": scenario.res1,
        "res2": scenario.res2,
        "name": scenario.name,
        "prep_args": scenario.prep_args,
        "y": scenario.y,
        "tags": scenario.tags,
        "has_aux": scenario.has_aux,
        "aux": scenario.aux,
    }
    operator = changes.pop("operator", scenario.operator)
    f = changes.pop("f", scenario.f)
    x = changes.pop("x", scenario.x)
    fields.update(changes)
    return Scenario(operator, f, x, **fields)


def _evaluate_in_float64(f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool = False) -> Any:
    """``f`` evaluated with NumPy float64 copies of every array, or ``None`` if it fails."""
    try:
        x64 = tree_map(to_float64, x)
        if isinstance(x, float):
            x64 = np.asarray(x, dtype=np.float64)
        values = [tree_map(to_float64, copy_tree(c.value)) for c in contexts]
        with np.errstate(all="ignore"):
            y = f(x64, *values)
        if has_aux:
            y = y[0]
        return np.array(to_numpy(y), dtype=np.float64, copy=True)
    except Exception:
        return None
