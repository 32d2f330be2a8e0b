"""The autograd host: ``g`` as an autograd primitive, its derivatives from the inner backend.

``g`` is a primitive (:func:`autograd.extend.primitive`) over ``x``'s leaves and
the context operands, returning one array or, for several output leaves, an
autograd tuple. Its VJP is the pullback and its JVP the pushforward
(``defvjp_argnums``, ``defjvp_argnums``: one inner call for every leaf of
``x``), each itself a primitive, so autograd meets a clear error rather than a
silent zero when it asks for a second derivative through ``g``.

autograd computes in NumPy: ``f``'s arguments reach the inner engine as NumPy
views (``torch.from_numpy`` shares them, JAX copies), results come back as
NumPy arrays in the dtypes ``f`` returned (pullbacks in ``x``'s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from autograd.builtins import tuple as autograd_tuple
from autograd.core import make_vjp
from autograd.extend import defjvp_argnums, defvjp_argnums, primitive
from autograd.tracer import Box, getval

from di.errors import InvalidInputError, UnsupportedOperatorError
from di.families import converter, family_of
from di.mixing.calls import Call
from di.mixing.core import DifferentiateWith, Host, once
from di.pytrees import tree_flatten

__all__ = ["HOST", "AutogradHost"]


class _Site:
    """One call of ``g``: its :class:`Call`, the number of ``x`` leaves and operands,
    and the dtypes of the leaves on both sides."""

    __slots__ = ("call", "g", "nc", "nx", "outputs", "residual", "x_dtypes", "y_dtypes")

    def __init__(self, g: DifferentiateWith, call: Call, x_dtypes: Sequence[Any], nc: int) -> None:
        self.g, self.call, self.nx, self.nc = g, call, len(x_dtypes), nc
        self.x_dtypes = list(x_dtypes)
        self.y_dtypes = [np.dtype(dtype) for _, dtype in call.output().specs]
        # f's outputs at this call's point, computed before autograd records the call,
        # and the residual of that evaluation, which the pullback takes (f runs once)
        self.outputs: list[Any] | None = None
        self.residual: Any = None

    def arrays(self, leaves: Sequence[Any], dtypes: Sequence[Any]) -> list[Any]:
        """Inner-engine leaves as NumPy arrays the caller owns, in these dtypes."""
        arrays = [converter(family_of(leaf), "numpy")(leaf) for leaf in leaves]
        return [a if a.dtype == dtype else a.astype(dtype) for a, dtype in zip(arrays, dtypes)]

    def packed(self, leaves: list[Any]) -> Any:
        """One leaf as itself; several as an autograd tuple (which autograd differentiates)."""
        return leaves[0] if len(leaves) == 1 else autograd_tuple(leaves)


def _unpacked(value: Any, count: int) -> list[Any]:
    return [value] if count == 1 else list(value)


@primitive
def _value(site: _Site, *arrays: Any) -> Any:
    nx = site.nx
    outputs, site.outputs = site.outputs, None
    if outputs is None:
        outputs = site.call.value(arrays[:nx], arrays[nx:])
    return site.packed(site.arrays(outputs, site.y_dtypes))


@primitive
def _linear(site: _Site, transpose: bool, *arrays: Any) -> Any:
    """The pullback (``transpose``) or pushforward of the trailing arrays at the point."""
    nx, nc = site.nx, site.nc
    x, contexts, linear = arrays[:nx], arrays[nx : nx + nc], list(arrays[nx + nc :])
    if transpose:
        return site.packed(site.arrays(site.call.pullback(x, contexts, [linear])[0], site.x_dtypes))
    return site.packed(site.arrays(site.call.pushforward(x, contexts, [linear])[0], site.y_dtypes))


def _refuse_contexts(site: _Site, argnums: Sequence[int], first: int) -> None:
    for argnum in argnums:
        if first + site.nx <= argnum < first + site.nx + site.nc:
            position = site.call.operand_positions[argnum - first - site.nx] + 1
            raise InvalidInputError(
                f"{site.g!r} inside autograd: autograd asked for the derivative with respect to context {position}, a "
                f"Constant, which g does not differentiate. Make it part of x (a tuple or dict of the arrays to "
                f"differentiate)."
            )


def _second_order(site: _Site) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(
        f"{site.g!r} inside autograd: a second derivative through g (autograd.hessian, grad of grad) needs the "
        f"derivative of {site.g.backend!r}'s pullback or pushforward with respect to x, which g does not provide. "
        f"Compute second derivatives of f with di directly (di.hessian(f, {site.g.backend!r}, x), di.hvp)."
    )


def _value_vjp(argnums: Sequence[int], ans: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    site = args[0]
    _refuse_contexts(site, argnums, 1)
    point = args[1 : 1 + site.nx + site.nc]
    residual, site.residual = site.residual, None

    def pullback(cotangent: Any) -> tuple[Any, ...]:
        nonlocal residual
        cotangents = _unpacked(cotangent, len(site.y_dtypes))
        kept, residual = residual, None  # (spent: a second pullback asks the inner backend)
        if kept is not None and not any(isinstance(c, Box) for c in cotangents):  # (a Box: a second derivative)
            nx = site.nx
            plain = [getval(a) for a in point]
            results = site.call.pullback(plain[:nx], plain[nx:], [list(cotangents)], kept)[0]
            grads = site.arrays(results, site.x_dtypes)
        else:
            grads = _unpacked(_linear(site, True, *point, *cotangents), site.nx)
        return tuple(grads[argnum - 1] for argnum in argnums)

    return pullback


def _value_jvp(argnums: Sequence[int], tangents: Sequence[Any], ans: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
    site = args[0]
    _refuse_contexts(site, argnums, 1)
    point = args[1 : 1 + site.nx + site.nc]
    by_argnum = dict(zip(argnums, tangents))
    x_tangents = [by_argnum.get(1 + i, np.zeros_like(getval(point[i]))) for i in range(site.nx)]
    return _linear(site, False, *point, *x_tangents)


def _linear_vjp(argnums: Sequence[int], ans: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    site, transpose = args[0], args[1]
    if any(argnum < 2 + site.nx + site.nc for argnum in argnums):
        raise _second_order(site)
    point = args[2 : 2 + site.nx + site.nc]
    first_linear = 2 + site.nx + site.nc

    def pullback(cotangent: Any) -> tuple[Any, ...]:
        count = site.nx if transpose else len(site.y_dtypes)
        results = _linear(site, not transpose, *point, *_unpacked(cotangent, count))
        results = _unpacked(results, len(args) - first_linear)
        return tuple(results[argnum - first_linear] for argnum in argnums)

    return pullback


def _linear_jvp(argnums: Sequence[int], tangents: Sequence[Any], ans: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
    site, transpose = args[0], args[1]
    first_linear = 2 + site.nx + site.nc
    if any(argnum < first_linear for argnum in argnums):
        raise _second_order(site)
    by_argnum = dict(zip(argnums, tangents))
    linear = [by_argnum.get(i, np.zeros_like(getval(args[i]))) for i in range(first_linear, len(args))]
    return _linear(site, transpose, *args[2:first_linear], *linear)


defvjp_argnums(_value, _value_vjp)
defjvp_argnums(_value, _value_jvp)
defvjp_argnums(_linear, _linear_vjp)
defjvp_argnums(_linear, _linear_jvp)


class AutogradHost(Host):
    """``g`` inside autograd's reverse and forward modes (see the module's description)."""

    display = "autograd"

    def owns(self, value: Any) -> bool:
        return isinstance(value, Box)

    def linearize(
        self, f: Callable[..., Any], backend: Any, x: Any, values: Sequence[Any]
    ) -> tuple[Any, Callable[[Any], Any] | None] | None:
        """autograd's ``make_vjp`` (see :meth:`Host.linearize`)."""
        return _linearize(f, backend, x, values)

    def call(self, g: DifferentiateWith, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        leaves, treedef = tree_flatten(_opened(x))
        positions = g.operand_positions(self, values)
        operands = [values[i] for i in positions]
        plain = [np.asarray(getval(leaf)) for leaf in leaves]
        plain_operands = [np.asarray(getval(v)) for v in operands]
        x_specs = [(leaf.shape, leaf.dtype.name) for leaf in plain]
        operand_specs = {i: (v.shape, v.dtype.name) for i, v in zip(positions, plain_operands)}
        call = g.call_for(treedef, x_specs, values, operand_specs)
        outputs, residual = call.forward(plain, plain_operands)  # f's one run (it describes the output)
        output = call.output()
        site = _Site(g, call, [leaf.dtype for leaf in plain], len(operands))
        site.outputs, site.residual = outputs, residual
        result = _value(site, *leaves, *operands)
        return output.unflatten(_unpacked(result, len(output.specs)))


def _linearize(
    f: Callable[..., Any], backend: Any, x: Any, values: Sequence[Any]
) -> tuple[Any, Callable[[Any], Any] | None] | None:
    """autograd's ``make_vjp`` of ``f`` at an array ``x`` with an array output."""
    if not isinstance(x, np.ndarray):
        return None
    vjp, y = make_vjp(lambda x: f(x, *values), x)
    if not isinstance(y, np.ndarray) and not isinstance(y, float):
        return y, None
    return y, once(lambda cotangent: vjp(np.asarray(cotangent, dtype=np.result_type(y))))


def _opened(x: Any) -> Any:
    """``x`` with autograd's boxed containers (a dict or list of parameters under
    ``autograd.grad``) opened into containers of boxed arrays."""
    value = getval(x)
    if isinstance(value, dict):
        return {key: _opened(x[key]) for key in value}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_opened(x[i]) for i in range(len(value)))
    return x


HOST = AutogradHost()
