"""autograd's one-argument ``make_vjp`` / ``make_jvp`` at a point, as autograd's own
differential operators run them, without the wrapper those operators put around a
function of many arguments (it builds two functions and formats their names and
docstrings from ``f``'s at every call: more Python than the rest of a prepared call)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autograd.core import make_jvp as unary_jvp
from autograd.core import make_vjp as unary_vjp
from autograd.extend import vspace

__all__ = ["jvp_at", "value_and_grad_at", "vjp_at"]


def vjp_at(f: Callable[..., Any], x: Any, values: Sequence[Any]) -> tuple[Callable[[Any], Any], Any]:
    """``autograd.make_vjp(f)(x, *values)``: autograd's ``make_vjp`` of one
    argument, as its wrapper for functions of many arguments (``make_vjp``,
    ``grad``, ``value_and_grad``) runs it, without what that wrapper builds at
    each call (two functions, whose names and docstrings it formats from ``f``'s)."""
    return unary_vjp((lambda x: f(x, *values)) if values else f, x)


def jvp_at(f: Callable[..., Any], x: Any, values: Sequence[Any]) -> Callable[[Any], tuple[Any, Any]]:
    """``autograd.make_jvp(f)(x, *values)``, as :func:`vjp_at`."""
    return unary_jvp((lambda x: f(x, *values)) if values else f, x)


def value_and_grad_at(f: Callable[..., Any], x: Any, values: Sequence[Any]) -> tuple[Any, Any]:
    """``autograd.value_and_grad(f)(x, *values)`` (:func:`vjp_at`)."""
    vjp, y = vjp_at(f, x, values)
    space = vspace(y)
    if space.size != 1:
        raise TypeError("Grad only applies to real scalar-output functions. Try jacobian or elementwise_grad.")
    return y, vjp(space.ones())
