"""PyTensor adapter: every operator a graph of ``pytensor.gradient``'s transforms
over ``f`` applied once to symbolic variables, compiled with
``pytensor.function`` (:class:`PyTensorAdapter`).

Each operator is one *core* (:data:`~di.engines.pytensor.graphs.Core`): what it
computes from the symbolic ``y = f(x)``. :class:`~di.engines.pytensor.graphs.SymbolicProgram`
makes the symbolic inputs, applies the core and compiles it, once per signature.
"""

from __future__ import annotations

import di.engines.pytensor.imported  # noqa: F401  (first: PyTensor imported, its recursion limit undone)

# isort: split
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedInputError, grad, hessian_vector_product, jacobian, pullback, pushforward
from pytensor.graph.basic import Variable
from pytensor.graph.traversal import ancestors
from pytensor.tensor.variable import TensorConstant, TensorVariable

from di.backends.capabilities import AUX_FAMILIES, Capabilities
from di.backends.compile import combined_first
from di.backends.engine import TracedValues
from di.backends.misuse import written_x_error
from di.backends.outputs import OutputRules, checking, output_leaf_shapes
from di.backends.protocol import Adapter, Programs
from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.engines.pytensor.graphs import Core, SymbolicProgram, symbolic_like
from di.engines.pytensor.jacobians import jacobian_programs
from di.errors import InvalidOutputError

__all__ = ["RULES", "PyTensorAdapter", "traced_values"]


def traced_values() -> list[TracedValues]:
    """PyTensor's symbolic variables, which ``f`` receives at preparation (its
    record's ``traced`` hook): they hold no value, so other backends refuse them
    by name (``DifferentiateWith`` makes another backend's function a PyTensor
    ``Op``).

    Examples:
        >>> from di.engines.pytensor.adapter import traced_values
        >>> sorted({traced.transform for traced in traced_values()})
        ['pytensor.grad']
    """
    from di.engines.pytensor.graphs import StaticShapeVariable

    classes = (StaticShapeVariable, TensorVariable, TensorConstant, Variable)
    return [TracedValues(cls, "pytensor.grad", _no_value) for cls in classes]


def _no_value(value: Any) -> Any:
    return value


class _Spec:
    """A symbolic output's static shape and dtype, for the output checks."""

    __slots__ = ("dtype", "ndim", "shape")

    def __init__(self, variable: Any) -> None:
        self.shape = tuple(1 if s is None else s for s in variable.type.shape)
        self.ndim = len(self.shape)
        self.dtype = np.dtype(variable.type.dtype)


_CONVERSIONS = (
    ("converted to Python float", "float()"),
    ("converted to Python integer", "int() (or a use as an index)"),
    ("has no attribute 'item'", ".item()"),
    ("has no attribute 'tolist'", ".tolist()"),
)


class _Rules(OutputRules):
    """PyTensor's outputs: symbolic variables, read through their static types."""

    traces = True
    conversion_errors = (TypeError, AttributeError, ValueError)

    def value(self, y: Any) -> Any:
        return _Spec(y) if isinstance(y, Variable) else y

    def is_traced(self, y: Any, x: Any) -> bool:
        if not isinstance(x, Variable):
            return True
        if not isinstance(y, Variable) or not any(node is x for node in ancestors([y])):
            return False
        try:  # on a path from x, but cut off it (pytensor.gradient.disconnected_grad)?
            grad(y, x, disconnected_inputs="raise")
        except DisconnectedInputError:
            return False
        return True

    def scalar(self, y: Any) -> Any:
        return pt.reshape(y, ())

    def accepts_array(self, y: Any) -> bool:
        if isinstance(y, _Spec):
            return y.dtype.kind == "f"
        return super().accepts_array(y)

    def translate(
        self, error: BaseException, backend: AbstractBackend, operator: str, values: Sequence[Any]
    ) -> BaseException | None:
        if isinstance(error, TypeError) and "does not support item assignment" in str(error):
            return written_x_error(backend, operator)  # x[0] = 5.0: symbolic variables are immutable
        if isinstance(error, TypeError) and "converted to Python boolean" in str(error):
            return InvalidOutputError(
                f"{operator} cannot differentiate f with {backend!r}: f used a value computed from x in Python "
                f"control flow (an if, a while, and/or, bool()). PyTensor applies f once, to symbolic variables "
                f"that hold no value, and compiles the graph: Python cannot branch on them. To fix it, write the "
                f"choice as a graph: xp.where(condition, a, b) (xp = di.array_namespace(x), pytensor.tensor.switch), "
                f"or pytensor.ifelse.ifelse(condition, a, b) to compute only the branch taken; loops over values "
                f"with pytensor.scan. Or differentiate f with AutoJAX(), AutoTorch() or AutoAutograd(), which run "
                f"f's Python on every call."
            )
        return None

    def is_conversion_error(self, error: BaseException) -> str:
        text = str(error)
        if "Variable" not in text:
            return ""
        return next((name for marker, name in _CONVERSIONS if marker in text), "")

    def foreign_cause(self, error: BaseException) -> str:
        # np.float64(variable): NumPy cannot make a number of a symbolic variable
        return "numpy" if isinstance(error, ValueError) and "sequence" in str(error) else ""

    def foreign_output(self, y: Any) -> str:
        # np.asarray(variable) is an array of objects holding the variable
        if getattr(getattr(y, "dtype", None), "kind", "") != "O":
            return ""
        return "numpy" if any(isinstance(item, Variable) for item in np.ravel(y)) else ""


RULES = _Rules()


def _outputs(output: Any, has_aux: bool) -> tuple[Any, Any]:
    """``(y, aux)`` from what the checked ``f`` returned, ``y`` symbolic."""
    y, aux = output if has_aux else (output, None)
    return pt.as_tensor_variable(y), aux


def _result(has_aux: bool, result: Any, aux: Any) -> Any:
    return (result, aux) if has_aux else result


def _push(y: Any, x: Any, tangent: Any) -> Any:
    """The pushforward of ``y`` along ``tangent``: the ops' own forward rules,
    or, where an op has none, PyTensor's double pullback."""
    try:
        return pushforward(y, x, tangent, disconnected_outputs="ignore", use_op_pushforward=True)
    except (NotImplementedError, AttributeError, TypeError):
        return pushforward(y, x, tangent, disconnected_outputs="ignore")


def _grad(y: Any, x: Any) -> Any:
    return grad(y, x, disconnected_inputs="ignore")


def _jacobian(y: Any, x: Any, vectorize: bool = True) -> Any:
    """``dy/dx`` of shape ``y.shape + x.shape`` (vectorized pullbacks, or with
    ``vectorize=False`` one pullback per row in a scan)."""
    flat = pt.flatten(y) if y.ndim != 1 else y
    if y.ndim == 0:
        return pt.reshape(_grad(y, x), x.shape)
    try:
        jac = jacobian(flat, x, vectorize=vectorize, disconnected_inputs="ignore")
    except ValueError:  # PyTensor cannot vectorize some graphs (an empty slice of x): one pullback per row
        jac = jacobian(flat, x, vectorize=False, disconnected_inputs="ignore")
    return pt.reshape(jac, (*_static(y), *_static(x)))


def _static(variable: Any) -> tuple[Any, ...]:
    return tuple(variable.shape[i] if s is None else s for i, s in enumerate(variable.type.shape))


def _cotangent_dtype(y: Any, x: Any) -> str:
    """The pullback's cotangent input: in ``x``'s dtype where PyTensor upcast a
    float ``x`` to a wider float ``y`` (``x / x.shape[0]`` with a 32-bit ``x``
    is float64 at n = 1e5), as the expert's own spelling takes it, so a call
    does not convert the cotangent (at n = 1e5 that was half the call); the
    result is cast to ``x``'s dtype in any case."""
    y_dtype, x_dtype = np.dtype(y.dtype), np.dtype(x.dtype)
    if y_dtype.kind == x_dtype.kind == "f" and y_dtype.itemsize > x_dtype.itemsize:
        return str(x.dtype)
    return str(y.dtype)


def _tangents(specs: Sequence[tuple[tuple[int, ...], str]], dtype: str) -> list[Any]:
    return [symbolic_like(shape, dtype) for shape, _ in specs]


class PyTensorAdapter(Adapter):
    """Adapter for :class:`di.AutoPyTensor`.

    Native: every operator, each one compiled ``pytensor.function`` of a graph of
    ``pytensor.gradient``'s transforms: ``grad`` (gradient), ``pullback``,
    ``pushforward`` (the ops' forward rules where they have them), ``jacobian``
    (vectorized pullbacks, or from 256 elements the faster of them and a scan of
    pullbacks: :mod:`~di.engines.pytensor.jacobians`), ``hessian_vector_product``, the Jacobian of the
    gradient (hessian), and pushforwards of pushforwards (second derivative).
    ``f`` runs once per signature, at preparation, on symbolic variables.
    ``Cache`` is refused: a symbolic graph has no buffer to write into.
    """

    capabilities = Capabilities(
        compile_option="compiles",
        aux=AUX_FAMILIES,
        cache=False,
        cache_note=(
            "PyTensor applies f to symbolic variables, which hold no buffer f could write into. Pass the data as a "
            "Constant and build new arrays inside f (pytensor.tensor.set_subtensor for an update), or use AutoTorch, "
            "AutoJAX or AutoFiniteDiff."
        ),
        differentiates="none",
        complex_numbers=False,
        complex_note=(
            "PyTensor's gradients refuse complex intermediate values, which f computes on at a complex x (even "
            "rebuilt as pytensor.tensor.complex(a, b) from real inputs): pytensor.gradient.grad rejects every "
            "complex gradient term, and past that check the ops' own gradients refuse complex ones (add, exp, "
            "sin, log, sqrt, true_div raise NotImplementedError; conj has none; dot and matmul refuse a complex "
            "output), so only products, real, imag, abs and sums would differentiate, and no second order. Use "
            "AutoJAX, AutoTorch, AutoAutograd, AutoTensorFlow, AutoMLX or AutoFiniteDiff, or write f over the real "
            "and imaginary parts as real arrays (the real view: x as xp.stack([xp.real(x), xp.imag(x)]))."
        ),
    )

    def _program(
        self,
        core: Core,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        operator: str,
        *,
        tangents: bool,
        has_aux: bool = False,
    ) -> SymbolicProgram:
        checked = checking(f, self.backend, operator, RULES, has_aux=has_aux)
        return SymbolicProgram(
            self.backend,
            core,
            checked,
            contexts,
            tangents=tangents,
            has_aux=has_aux,
            x_converter=self.input_converters([x])[0],
            context_converters=self.context_converters(contexts),
        )

    def _pair(
        self,
        names: tuple[str, str],
        full: Core,
        plain: Core,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        tx: Sequence[Any] | None = None,
        has_aux: bool = False,
    ) -> Programs:
        """The plain and combined programs of one family, the one this
        preparation asked for compiled now (the other on its first call)."""
        operator = names[0]
        made: dict[str, Callable[..., Any]] = {
            names[0]: self._program(plain, f, x, contexts, operator, tangents=tx is not None, has_aux=has_aux),
            names[1]: self._program(full, f, x, contexts, operator, tangents=tx is not None, has_aux=has_aux),
        }
        first = made[names[1] if combined_first() else names[0]]
        values = [c.value for c in contexts]
        first(x, *([list(tx)] if tx is not None else []), *values)
        return made

    # --- operators ------------------------------------------------------------------

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        def full(fx: Any, x: Any, specs: Any) -> Any:
            y, aux = _outputs(fx(x), has_aux)
            return _result(has_aux, (y, _grad(y, x)), aux), []

        def plain(fx: Any, x: Any, specs: Any) -> Any:
            y, aux = _outputs(fx(x), has_aux)
            return _result(has_aux, _grad(y, x), aux), []

        return self._pair(("gradient", "value_and_gradient"), full, plain, f, x, contexts, has_aux=has_aux)

    def prepare_pushforward_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        def products(fx: Any, x: Any, specs: Any) -> Any:
            y, aux = _outputs(fx(x), has_aux)
            tangents = _tangents(specs, x.dtype)
            return y, tuple(_push(y, x, t) for t in tangents), aux, tangents

        def full(fx: Any, x: Any, specs: Any) -> Any:
            y, dys, aux, tangents = products(fx, x, specs)
            return _result(has_aux, (y, dys), aux), tangents

        def plain(fx: Any, x: Any, specs: Any) -> Any:
            _, dys, aux, tangents = products(fx, x, specs)
            return _result(has_aux, dys, aux), tangents

        return self._pair(("pushforward", "value_and_pushforward"), full, plain, f, x, contexts, tx, has_aux)

    def prepare_pullback_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        def products(fx: Any, x: Any, specs: Any) -> Any:
            y, aux = _outputs(fx(x), has_aux)
            shape = _Spec(y).shape
            cotangents = []
            for spec_shape, _ in specs:
                if tuple(spec_shape) != shape:  # PyTensor would broadcast it, silently
                    raise ValueError(f"a cotangent of shape {tuple(spec_shape)} for an output of shape {shape}")
                cotangents.append(symbolic_like(spec_shape, _cotangent_dtype(y, x)))
            dxs = tuple(pt.cast(pullback(y, x, c, disconnected_inputs="ignore"), x.dtype) for c in cotangents)
            return y, dxs, aux, cotangents

        def full(fx: Any, x: Any, specs: Any) -> Any:
            y, dxs, aux, cotangents = products(fx, x, specs)
            return _result(has_aux, (y, dxs), aux), cotangents

        def plain(fx: Any, x: Any, specs: Any) -> Any:
            _, dxs, aux, cotangents = products(fx, x, specs)
            return _result(has_aux, dxs, aux), cotangents

        return self._pair(("pullback", "value_and_pullback"), full, plain, f, x, contexts, ty, has_aux)

    def prepare_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        def full(fx: Any, x: Any, specs: Any) -> Any:
            y, aux = _outputs(fx(x), has_aux)
            return _result(has_aux, (y, _push(y, x, pt.ones_like(x))), aux), []

        def plain(fx: Any, x: Any, specs: Any) -> Any:
            (result, aux) = full(fx, x, specs)[0] if has_aux else (full(fx, x, specs)[0], None)
            return _result(has_aux, result[1], aux), []

        return self._pair(("derivative", "value_and_derivative"), full, plain, f, x, contexts, has_aux=has_aux)

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        def build(vectorize: bool) -> Programs:
            def full(fx: Any, x: Any, specs: Any) -> Any:
                y, aux = _outputs(fx(x), has_aux)
                return _result(has_aux, (y, pt.cast(_jacobian(y, x, vectorize), y.dtype)), aux), []

            def plain(fx: Any, x: Any, specs: Any) -> Any:
                y, aux = _outputs(fx(x), has_aux)
                return _result(has_aux, pt.cast(_jacobian(y, x, vectorize), y.dtype), aux), []

            return self._pair(("jacobian", "value_and_jacobian"), full, plain, f, x, contexts, has_aux=has_aux)

        return jacobian_programs(build, x, [c.value for c in contexts], has_aux)

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        def products(fx: Any, x: Any, specs: Any) -> Any:
            y, _ = _outputs(fx(x), False)
            tangents = _tangents(specs, x.dtype)
            return (
                _grad(y, x),
                tuple(
                    # a gradient that does not depend on x (f linear in x): zeros, not DisconnectedInputError
                    hessian_vector_product(y, x, t, disconnected_inputs="ignore")
                    for t in tangents
                ),
                tangents,
            )

        def full(fx: Any, x: Any, specs: Any) -> Any:
            g, hvs, tangents = products(fx, x, specs)
            return (g, hvs), tangents

        def plain(fx: Any, x: Any, specs: Any) -> Any:
            _, hvs, tangents = products(fx, x, specs)
            return hvs, tangents

        return self._pair(("hvp", "gradient_and_hvp"), full, plain, f, x, contexts, tx)

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        def full(fx: Any, x: Any, specs: Any) -> Any:
            y, _ = _outputs(fx(x), False)
            g = _grad(y, x)
            return (y, g, _jacobian(g, x)), []

        def plain(fx: Any, x: Any, specs: Any) -> Any:
            y, _ = _outputs(fx(x), False)
            return _jacobian(_grad(y, x), x), []

        return self._pair(("hessian", "value_gradient_and_hessian"), full, plain, f, x, contexts)

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        def full(fx: Any, x: Any, specs: Any) -> Any:
            y, _ = _outputs(fx(x), False)
            one = pt.ones_like(x)
            dy = _push(y, x, one)
            return (y, dy, _push(dy, x, one)), []

        def plain(fx: Any, x: Any, specs: Any) -> Any:
            return full(fx, x, specs)[0][2], []

        names = ("second_derivative", "value_derivative_and_second_derivative")
        return self._pair(names, full, plain, f, x, contexts)

    def output_shapes(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        """Shapes from the static types of ``f``'s symbolic output: nothing is computed."""
        shapes: list[Any] = []

        def probe(fx: Any, x: Any, specs: Any) -> Any:
            shapes.append(fx(x))
            raise _Probed

        program = SymbolicProgram(
            self.backend,
            probe,
            f,
            contexts,
            tangents=False,
            has_aux=False,
            x_converter=self.input_converters([x])[0],
            context_converters=self.context_converters(contexts),
        )
        try:
            program(x, *[c.value for c in contexts])
        except _Probed:
            pass
        except Exception:  # f's own error is the programs' to raise, at preparation
            return None
        y = shapes[0] if shapes else None
        if not isinstance(y, Variable) or None in y.type.shape:
            return None
        return output_leaf_shapes(_Spec(y), self.tree_map)


class _Probed(Exception):
    """Stops a probe of ``f``'s output once its symbolic output is made."""
