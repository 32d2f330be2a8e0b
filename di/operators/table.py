"""The operator table: what each operator family takes and returns, in one place.

Every operator module (``gradient.py``, ``hvp.py``, ...) reads its row here, and
the shared machinery (:mod:`di.operators.call`, :mod:`di.operators.prepare`)
reads the rows it needs, so a rule such as "pullback takes cotangents ``ty``" is
written once. The docstring paragraphs every operator shares are here too, and
:func:`documented` puts them into each public function's docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from di.backends.capabilities import AUX_FAMILIES, OPERATOR_FAMILIES

__all__ = ["OPERATORS", "Operator", "documented"]


@dataclass(frozen=True)
class Operator:
    """One operator family.

    Attributes:
        family: its name, the prep's ``operator`` (``"gradient"``).
        names: the plain operator and its combined form
            (``("gradient", "value_and_gradient")``).
        tangents: ``"tx"`` (tangents shaped like ``x``), ``"ty"`` (cotangents
            shaped like ``f(x)``) or ``None`` (no tangents).
        takes_aux: whether it takes ``has_aux``.
        scalar_x: whether ``x`` must be a scalar (derivatives of a function of
            one variable).
        takes_out: whether its functions take an ``out=`` buffer.
        layouts: each program's result, part by part (one part: the result
            itself, else the parts of its tuple): ``X`` shaped like ``x``, ``Y``
            like ``f``'s output, ``YX`` (a Jacobian) ``Y``'s structure with
            ``x``'s in each place of an output leaf, ``XX`` (a Hessian) ``x``'s
            structure with ``x``'s in each place, ``X*`` and ``Y*`` a tuple of
            those (one per tangent), ``-`` a scalar. A pytree result is rebuilt
            in the caller's key order from it.

    Examples:
        >>> from di.operators.table import OPERATORS
        >>> OPERATORS["pullback"].tangents, OPERATORS["hvp"].names
        ('ty', ('hvp', 'gradient_and_hvp'))
    """

    family: str
    tangents: str | None = None
    scalar_x: bool = False
    takes_out: bool = True
    layouts: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    @property
    def names(self) -> tuple[str, str]:
        plain, combined = OPERATOR_FAMILIES[self.family]
        return plain, combined

    @property
    def takes_aux(self) -> bool:
        return self.family in AUX_FAMILIES

    def layout(self, name: str) -> tuple[str, ...]:
        """The parts of program ``name``'s result (see :attr:`layouts`).

        Examples:
            >>> from di.operators.table import OPERATORS
            >>> OPERATORS["hessian"].layout("value_gradient_and_hessian")
            ('-', 'X', 'XX')
        """
        return self.layouts[self.names.index(name)]


OPERATORS: dict[str, Operator] = {
    operator.family: operator
    for operator in (
        Operator("derivative", scalar_x=True, layouts=(("Y",), ("Y", "Y"))),
        Operator("gradient", layouts=(("X",), ("-", "X"))),
        Operator("jacobian", layouts=(("YX",), ("Y", "YX"))),
        Operator("pushforward", tangents="tx", takes_out=False, layouts=(("Y*",), ("Y", "Y*"))),
        Operator("pullback", tangents="ty", takes_out=False, layouts=(("X*",), ("Y", "X*"))),
        Operator("hvp", tangents="tx", takes_out=False, layouts=(("X*",), ("X", "X*"))),
        Operator("hessian", layouts=(("XX",), ("-", "X", "XX"))),
        Operator("second_derivative", scalar_x=True, layouts=(("Y",), ("Y", "Y", "Y"))),
    )
}
"""Every operator family, by name."""


# --- docstring paragraphs every operator shares -----------------------------------------

_FRAGMENTS: dict[str, str] = {
    "has_aux": (
        "has_aux: ``f`` returns ``(y, aux)``: only ``y`` is differentiated, and\n"
        "    ``aux`` (any pytree) comes back from the same evaluation of ``f``;\n"
        "    the plain call then returns ``(result, aux)`` and the ``value_and_*``\n"
        "    form ``((y, aux), result)``."
    ),
    "out": (
        "out: optional array of x's family (a mutable one) to write the result into\n"
        "    (checked against the result first); it is returned, and untouched\n"
        "    if the call fails."
    ),
    "strict": (
        "strict: check every prepared call's arguments against this signature\n"
        "    (a few hundred nanoseconds) and raise on a mismatch."
    ),
    "contexts": "*contexts: ``di.Constant`` / ``di.Cache`` wrappers, in ``f``'s order.",
    "value": (
        "value: the caller will run the combined form (``value_and_*``): compiled\n"
        "    backends compile it now and the plain operator on its first call\n"
        "    (default: the plain one now, the combined one on first use). Either\n"
        "    form runs from the prep; a loop that uses one compiles once."
    ),
    "reuse": (
        "The prep may be reused for any ``x`` (and tangents) and context values\n"
        "with the same array family, shape, dtype and device; the values of each\n"
        "call are the ones used. On compiled backends this is where compilation\n"
        "happens, once."
    ),
    "unprepared": (
        "Without a prep the call prepares and then runs (the prep is kept: the next\n"
        "call like it reuses it, see :func:`di.cache_info`)."
    ),
}

F = TypeVar("F", bound=Callable[..., Any])


def documented(function: F) -> F:
    """Put the shared paragraphs into ``function``'s docstring: a line holding only
    ``{name}`` (a key of the fragment table) becomes that paragraph, indented
    like the placeholder.

    Examples:
        >>> from di.operators.table import documented
        >>> @documented
        ... def g():
        ...     '''Args:
        ...         {contexts}
        ...     '''
        >>> g.__doc__.splitlines()[1].strip()
        "*contexts: ``di.Constant`` / ``di.Cache`` wrappers, in ``f``'s order."
    """
    lines = []
    for line in (function.__doc__ or "").splitlines():
        key = line.strip()
        if key.startswith("{") and key.endswith("}") and key[1:-1] in _FRAGMENTS:
            indent = line[: len(line) - len(line.lstrip())]
            lines += [indent + part for part in _FRAGMENTS[key[1:-1]].splitlines()]
        else:
            lines.append(line)
    function.__doc__ = "\n".join(lines)
    # the stub an operator function wraps keeps the same text: documentation tools
    # that follow __wrapped__ (mkdocstrings does) read it there
    wrapped = getattr(function, "__wrapped__", None)
    if wrapped is not None and wrapped.__doc__ is not None:
        wrapped.__doc__ = function.__doc__
    return function
