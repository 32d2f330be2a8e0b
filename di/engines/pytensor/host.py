"""The PyTensor host: ``g = di.DifferentiateWith(f, backend)`` as a PyTensor ``Op``.

Called on PyTensor's symbolic variables (inside ``f`` applied by
``AutoPyTensor``, or in a graph a user builds), ``g`` is one node of the graph:
an ``Op`` whose ``perform`` calls the inner backend's prepared value program,
whose ``pullback`` (what ``pytensor.grad`` and ``Lop`` call; PyTensor 3's name
for ``L_op``) is a further ``Op`` calling the inner pullback, and whose
``pushforward`` (``Rop``; PyTensor 3's ``R_op``) one calling the inner
pushforward. Those two are linear in their last inputs, and each one's own
pullback is the other: a second derivative through ``g`` that needs more (the
derivative of the inner derivatives with respect to the point) is refused
clearly.

PyTensor's compiled functions take and return NumPy arrays: ``f``'s arguments
reach the inner engine as NumPy views (converted as its family converts), and
the results come back as NumPy arrays in the dtypes the graph declares.
Symbolic shapes must be static: ``x``'s leaves and the operands are typed by
their shapes, which a graph ``AutoPyTensor`` builds always has.
"""

from __future__ import annotations

import di.engines.pytensor.imported  # noqa: F401  (first: PyTensor imported, its recursion limit undone)

# isort: split
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, grad_undefined
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op

from di.errors import InvalidInputError, UnsupportedOperatorError
from di.families import converter, family_of
from di.mixing.calls import Call
from di.mixing.core import DifferentiateWith, Host

__all__ = ["HOST", "PyTensorHost"]


class _Site:
    """One symbolic call of ``g``: its :class:`Call`, how many ``x`` leaves and
    operands it has, and the dtypes on both sides."""

    def __init__(self, g: DifferentiateWith, call: Call, x_types: Sequence[Any], operand_count: int) -> None:
        self.g, self.call = g, call
        self.nx, self.nc = len(x_types), operand_count
        self.x_types = list(x_types)
        self.y_specs = list(call.output().specs)

    def arrays(self, leaves: Sequence[Any], dtypes: Sequence[str]) -> list[Any]:
        """Inner-engine leaves as NumPy arrays of these dtypes, owned by PyTensor."""
        out = []
        for leaf, dtype in zip(leaves, dtypes):
            array = np.asarray(converter(family_of(leaf), "numpy")(leaf))
            out.append(np.array(array, dtype=dtype, copy=True))
        return out

    def y_types(self) -> list[Any]:
        return [pt.tensor(dtype=np.dtype(dtype).name, shape=tuple(shape)) for shape, dtype in self.y_specs]

    @property
    def y_dtypes(self) -> list[str]:
        return [np.dtype(dtype).name for _, dtype in self.y_specs]

    @property
    def x_dtypes(self) -> list[str]:
        return [t.dtype for t in self.x_types]


class _Value(Op):
    """``g``'s value: inputs ``x``'s leaves then the operands, outputs ``f``'s leaves."""

    def __init__(self, site: _Site) -> None:
        self.site = site

    def make_node(self, *inputs: Any) -> Apply:
        return Apply(self, [pt.as_tensor_variable(v) for v in inputs], self.site.y_types())

    def perform(self, node: Any, inputs: Sequence[Any], output_storage: Any) -> None:
        site = self.site
        leaves = site.call.value(list(inputs[: site.nx]), list(inputs[site.nx :]))
        for storage, array in zip(output_storage, site.arrays(leaves, site.y_dtypes)):
            storage[0] = array

    def pullback(self, inputs: Sequence[Any], outputs: Sequence[Any], cotangents: Sequence[Any]) -> list[Any]:
        site = self.site
        cotangents = [
            pt.zeros_like(y) if isinstance(c.type, DisconnectedType) else c for y, c in zip(outputs, cotangents)
        ]
        products = _Linear(site, transpose=True)(*inputs, *cotangents)
        products = products if isinstance(products, list) else [products]
        return [*products, *(_no_operand_gradient(self, i, v, site) for i, v in enumerate(inputs[site.nx :]))]

    def pushforward(self, inputs: Sequence[Any], outputs: Sequence[Any], tangents: Sequence[Any]) -> list[Any]:
        site = self.site
        for i in range(site.nx, len(inputs)):
            if not isinstance(tangents[i].type, DisconnectedType):
                _refuse_operand(site, i - site.nx)
        x_tangents = [
            pt.zeros_like(x) if isinstance(t.type, DisconnectedType) else t for x, t in zip(inputs[: site.nx], tangents)
        ]
        products = _Linear(site, transpose=False)(*inputs, *x_tangents)
        return products if isinstance(products, list) else [products]


class _Linear(Op):
    """The inner pullback (``transpose``) or pushforward at the point: inputs the
    point (``x``'s leaves, the operands) then the cotangents or tangents."""

    def __init__(self, site: _Site, transpose: bool) -> None:
        self.site, self.transpose = site, transpose

    def make_node(self, *inputs: Any) -> Apply:
        site = self.site
        outputs = (
            [pt.tensor(dtype=t.dtype, shape=t.type.shape) for t in site.x_types] if self.transpose else site.y_types()
        )
        return Apply(self, [pt.as_tensor_variable(v) for v in inputs], outputs)

    def perform(self, node: Any, inputs: Sequence[Any], output_storage: Any) -> None:
        site = self.site
        point, operands, linear = inputs[: site.nx], inputs[site.nx : site.nx + site.nc], inputs[site.nx + site.nc :]
        if self.transpose:
            leaves = site.call.pullback(list(point), list(operands), [list(linear)])[0]
            arrays = site.arrays(leaves, site.x_dtypes)
        else:
            leaves = site.call.pushforward(list(point), list(operands), [list(linear)])[0]
            arrays = site.arrays(leaves, site.y_dtypes)
        for storage, array in zip(output_storage, arrays):
            storage[0] = array

    def pullback(self, inputs: Sequence[Any], outputs: Sequence[Any], cotangents: Sequence[Any]) -> list[Any]:
        site = self.site
        first_linear = site.nx + site.nc
        # linear in its last inputs: their cotangent is the other linear map; the point's would
        # need the derivative of the inner derivative, which g does not provide
        cotangents = [
            pt.zeros_like(o) if isinstance(c.type, DisconnectedType) else c for o, c in zip(outputs, cotangents)
        ]
        products = _Linear(site, not self.transpose)(*inputs[:first_linear], *cotangents)
        products = products if isinstance(products, list) else [products]
        return [*(_second_order(self, i, v, site) for i, v in enumerate(inputs[:first_linear])), *products]

    def pushforward(self, inputs: Sequence[Any], outputs: Sequence[Any], tangents: Sequence[Any]) -> list[Any]:
        site = self.site
        first_linear = site.nx + site.nc
        if any(not isinstance(t.type, DisconnectedType) for t in tangents[:first_linear]):
            raise _second_order_error(site)
        linear = [
            pt.zeros_like(v) if isinstance(t.type, DisconnectedType) else t
            for v, t in zip(inputs[first_linear:], tangents[first_linear:])
        ]
        products = _Linear(site, self.transpose)(*inputs[:first_linear], *linear)
        return products if isinstance(products, list) else [products]


def _no_operand_gradient(op: Op, index: int, value: Any, site: _Site) -> Any:
    """A context operand is not differentiated: its gradient is undefined (an
    error, saying so, if a graph asks for it)."""
    position = site.call.operand_positions[index] + 1
    return grad_undefined(
        op, site.nx + index, value, f"{site.g!r}: context {position} is a Constant, which g does not differentiate"
    )


def _second_order(op: Op, index: int, value: Any, site: _Site) -> Any:
    return grad_undefined(op, index, value, str(_second_order_error(site)))


def _second_order_error(site: _Site) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(
        f"{site.g!r} inside PyTensor: a second derivative through g (pytensor.grad of a gradient, a Hessian) needs "
        f"the derivative of {site.g.backend!r}'s pullback or pushforward with respect to x, which g does not "
        f"provide. Compute second derivatives of f with di directly (di.hessian(f, {site.g.backend!r}, x), di.hvp)."
    )


def _refuse_operand(site: _Site, index: int) -> None:
    position = site.call.operand_positions[index] + 1
    raise InvalidInputError(
        f"{site.g!r} inside PyTensor: a tangent reached context {position}, a Constant, which g does not "
        f"differentiate. Make it part of x (a tuple or dict of the arrays to differentiate)."
    )


def _static_shape(value: Any, what: str, g: DifferentiateWith) -> tuple[int, ...]:
    shape = value.type.shape
    if None in shape:
        raise InvalidInputError(
            f"{g!r} inside PyTensor: {what} has the symbolic shape {shape}, with lengths PyTensor does not know "
            f"before it runs; g needs static shapes to prepare its backend. Give the input a static shape "
            f"(pytensor.tensor.tensor(shape=...), pytensor.tensor.specify_shape), as AutoPyTensor's inputs have."
        )
    return tuple(shape)


class PyTensorHost(Host):
    """``g`` inside PyTensor's graphs (see the module's description)."""

    display = "PyTensor"

    def owns(self, value: Any) -> bool:
        return isinstance(value, Variable)

    def call(self, g: DifferentiateWith, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        symbolic = [pt.as_tensor_variable(leaf) for leaf in leaves]
        positions = g.operand_positions(self, values)
        operands = [pt.as_tensor_variable(values[i]) for i in positions]
        x_specs = [(_static_shape(v, f"leaf {i} of x", g), v.dtype) for i, v in enumerate(symbolic)]
        operand_specs = {i: (_static_shape(v, f"context {i + 1}", g), v.dtype) for i, v in zip(positions, operands)}
        call = g.call_for(treedef, x_specs, values, operand_specs)
        output = call.output(None, None)
        site = _Site(g, call, symbolic, len(operands))
        result = _Value(site)(*symbolic, *operands)
        results = result if isinstance(result, list) else [result]
        return output.unflatten(results)


HOST = PyTensorHost()
