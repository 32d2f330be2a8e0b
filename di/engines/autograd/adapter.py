"""HIPS autograd adapter: reverse mode (``make_vjp``) and forward mode (``make_jvp``)
over NumPy code."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import autograd
import autograd.numpy as anp
import numpy as np
from autograd.differential_operators import make_hvp, make_vjp
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.tracer import Box, getval

from di.backends.aux import split_output
from di.backends.capabilities import AUX_FAMILIES, Capabilities
from di.backends.engine import TracedValues
from di.backends.misuse import foreign_engine_error, written_x_error
from di.backends.outputs import SCALAR_OPERATORS, OutputRules, checking, untraced_output_error
from di.backends.protocol import Adapter, Programs
from di.backends.selectors import AbstractBackend
from di.backends.transforms import Composition
from di.contexts import Context
from di.engines.autograd.primitives import jvp_at, value_and_grad_at, vjp_at
from di.errors import DIError, UnsupportedOperatorError
from di.families import converter, family_of, identity
from di.pytrees import tree_map

__all__ = ["AutogradAdapter", "traced_values"]


def traced_values() -> list[TracedValues]:
    """The values autograd traces in place of arrays (its record's ``traced`` hook):
    boxes around NumPy arrays. Inside an outer autograd transform (``autograd.grad``
    of a function calling ``di``), ``x`` is a box: ``AutoAutograd`` nests its
    transforms (second derivatives), and other backends refuse it by name.

    Examples:
        >>> from di.engines.autograd.adapter import traced_values
        >>> [traced.transform for traced in traced_values()]
        ['autograd.grad']
    """
    return [TracedValues(ArrayBox, "autograd.grad", getval, cast=_cast)]


def _cast(value: Any, dtype_name: str) -> Any:
    """A box cast by the array namespace's ``astype``, which autograd differentiates
    in both modes (its own ``astype`` has no forward rule): a pytree's leaves of
    other dtypes are rebuilt so inside forward mode."""
    from di.engines.autograd.casting import astype

    return astype(value, dtype_name)


_CONVERSIONS = (("float()", "float()"), ("'item'", ".item()"), ("'tolist'", ".tolist()"), ("int()", "int()"))
# autograd's refusal of forward mode through a primitive with a vjp rule (defvjp) and no jvp rule
_NO_JVP = re.compile(r"JVP of (.+) wrt argnums .* not defined")
_FORWARD_OPERATORS = frozenset({"pushforward", "derivative"})


def _no_jvp_error(error: BaseException, backend: AbstractBackend, operator: str) -> UnsupportedOperatorError | None:
    """:class:`di.UnsupportedOperatorError` for autograd's ``NotImplementedError``
    about a primitive with no forward rule, met by a forward-mode operator;
    ``None`` for any other error (``f``'s own).

    Examples:
        >>> import di
        >>> from di.engines.autograd.adapter import _no_jvp_error
        >>> error = NotImplementedError("JVP of p wrt argnums (0,) not defined")
        >>> str(_no_jvp_error(error, di.AutoAutograd(), "pushforward")).split(":")[0]
        'AutoAutograd() cannot differentiate f in forward mode'
    """
    match = _NO_JVP.search(str(error))
    if match is None or isinstance(error, DIError) or operator not in _FORWARD_OPERATORS:
        return None
    name = match.group(1)
    return UnsupportedOperatorError(
        f"{backend!r} cannot differentiate f in forward mode: f calls {name}, an autograd primitive with a reverse "
        f"rule (defvjp) and no forward one, and AutoAutograd's pushforward and derivative use autograd's forward "
        f"mode. To fix it, ask for pullback, gradient, jacobian, hvp or hessian (reverse mode, which runs the "
        f"rule); or give {name} a forward rule with autograd.extend.defjvp; or differentiate f with AutoJAX, "
        f"AutoTorch or AutoFiniteDiff."
    )


_FOREIGN_CALL = re.compile(r"must be \w+, not \w*Box")
"""Another library's refusal of an autograd box (``must be Tensor, not ArrayBox``)."""


class _Rules(OutputRules):
    """autograd outputs: numpy values, boxed (``ArrayBox``) when computed from a
    traced ``x``; read through the box (its own properties cost microseconds)."""

    traces = True
    # NotImplementedError: a primitive without a forward rule (_no_jvp_error). ValueError:
    # np.float64(box) (a NumPy scalar type), whose failed float() is the ValueError's cause
    conversion_errors = (TypeError, AttributeError, NotImplementedError, ValueError)

    def value(self, y: Any) -> Any:
        return getval(y)

    def is_traced(self, y: Any, x: Any) -> bool:
        # autograd's own test (tracer.trace): a box of x's trace, not of an outer one
        return not isinstance(x, Box) or (isinstance(y, Box) and y._trace == x._trace)

    def scalar(self, y: Any) -> Any:
        return anp.reshape(y, ())

    def translate(
        self, error: BaseException, backend: AbstractBackend, operator: str, values: Sequence[Any]
    ) -> BaseException | None:
        if isinstance(error, NotImplementedError):
            return _no_jvp_error(error, backend, operator)
        if isinstance(error, TypeError):
            text = str(error)
            if "Box' object does not support item assignment" in text:  # x[0] = 5.0
                return written_x_error(backend, operator)
            if _FOREIGN_CALL.search(text):  # torch.sin(x): another library's function refused a box
                return foreign_engine_error(backend, operator, error)
        return None

    def is_conversion_error(self, error: BaseException) -> str:
        if isinstance(error, ValueError):
            # np.float64(box), np.float32(box): NumPy's ValueError, caused by float(box)'s TypeError
            cause = error.__cause__
            if not isinstance(cause, TypeError) or "Box" not in str(cause) or "float()" not in str(cause):
                return ""
            return "float() (a NumPy scalar type such as np.float64(...) calls it)"
        text = str(error)
        if "Box" not in text:
            return ""
        return next((name for marker, name in _CONVERSIONS if marker in text), "")

    def foreign_cause(self, error: BaseException) -> str:
        # np.sin(box): NumPy makes an array of objects and calls each one's sin method
        text = str(error)
        return "numpy" if "Box" in text and "loop of ufunc does not support" in text else ""

    def foreign_output(self, y: Any) -> str:
        # np.asarray(box) is an array of objects holding the boxes
        if getattr(getattr(y, "dtype", None), "kind", "") != "O":
            return ""
        return "numpy" if any(isinstance(item, Box) for item in np.ravel(y)) else ""


_RULES = _Rules()


def _boxed_float_scalar(y: Any) -> bool:
    """The common gradient output, told from the boxed numpy value: an ArrayBox's
    own shape and dtype properties cost microseconds each."""
    if y.__class__ is not ArrayBox:
        return False
    value = y._value
    return value.__class__ is not ArrayBox and value.shape == () and value.dtype.kind == "f"


def _boxed_float_array(y: Any) -> bool:
    """The common output of the other operators: a boxed floating array of at
    least one dimension (0-d outputs get the full check, which looks for the box)."""
    if y.__class__ is not ArrayBox:
        return False
    value = y._value
    return value.__class__ is np.ndarray and value.ndim > 0 and value.dtype.kind == "f"


_BFLOAT16 = "bfloat16"


def _differentiable(x: Any) -> Any:
    """``x`` as a numpy array autograd can differentiate: bfloat16 (which autograd
    lacks) is computed in float32; the operator layer casts results back. A box
    (a call inside an outer autograd transform) is differentiated as it is."""
    if isinstance(x, Box):
        return x
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype.name == _BFLOAT16 else x


def _numpy(value: Any, dtype: Any) -> Any:
    """A tangent of any family as a numpy array of ``dtype`` (a box as it is)."""
    if isinstance(value, Box):
        return value
    return np.asarray(converter(family_of(value), "numpy")(value) if family_of(value) else value, dtype=dtype)


def _as_they_are(x: Any, values: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """The inputs of a prep whose arguments autograd takes as they are."""
    return x, values


def _array(value: Any, dtype: Any = None) -> Any:
    """A result as a numpy array (of ``dtype``); inside an outer autograd transform
    the result is a box, which stays one so the outer transform differentiates it."""
    if isinstance(value, Box):
        return value
    return np.asarray(value, dtype=dtype)


def _owned(value: Any, x: Any, values: Sequence[Any]) -> Any:
    """``value`` (``f``'s output, a leaf of its ``aux``, or a product), or a copy of
    it where it shares memory with ``x`` or a context value (or the tangent it
    was computed from: it is one of them, or a view of one): results are the
    caller's to write, and the arguments are never written. An array ``f``
    computed has no base and is none of them: a look at its class and base,
    nothing more."""
    if value.__class__ is not np.ndarray:
        return value
    if value.base is None and value is not x:
        for v in values:  # (a loop: no generator on the hot path)
            if value is v:
                break
        else:
            return value
    for item in (x, *values):
        if isinstance(item, np.ndarray) and np.may_share_memory(value, item):
            return value.copy()
    return value


def _stack(rows: list[Any]) -> Any:
    return anp.stack(rows) if any(isinstance(row, Box) for row in rows) else np.stack(rows)


class _AuxCapture:
    """``f`` returning ``(y, aux)`` as a function returning ``y`` that autograd can
    trace, with ``aux`` kept, unboxed, for the call under way in this thread
    (autograd calls ``f`` once per transform, in the caller's thread)."""

    def __init__(self, f: Callable[..., Any], backend: Any, operator: str) -> None:
        self._f, self._backend, self._operator = f, backend, operator
        self._local = threading.local()

    def value(self, x: Any, *values: Any) -> Any:
        """``y``; ``aux`` is kept for :meth:`take`."""
        y, aux = split_output(self._f(x, *values), self._backend, self._operator)
        x_value = getval(x)
        self._local.aux = tree_map(lambda leaf: _owned(getval(leaf), x_value, values), aux)
        return y

    def take(self) -> Any:
        """The ``aux`` of this thread's latest evaluation."""
        aux = self._local.aux
        del self._local.aux
        return aux


def _capturing(
    f: Callable[..., Any], backend: Any, operator: str, has_aux: bool
) -> tuple[Callable[..., Any], Callable[[Any], Any]]:
    """``(f_y, attach)``: the function to differentiate, and what turns a result
    into ``(result, aux)`` (the result itself without ``has_aux``)."""
    if not has_aux:
        return f, identity
    capture = _AuxCapture(f, backend, operator)

    def attach(result: Any) -> Any:
        return result, capture.take()

    return capture.value, attach


class AutogradAdapter(Adapter):
    """Adapter for :class:`di.AutoAutograd`.

    Native: gradient (``value_and_grad``), pullback (``make_vjp``), pushforward
    (``make_jvp``, true forward mode), jacobian (one vjp per output element), hvp
    (``make_hvp``), hessian (the jacobian of ``grad``). ``x`` and array contexts are
    handed to autograd as numpy arrays (torch tensors zero-copy through ``.numpy()``).
    ``Cache`` is refused at preparation: autograd's traced values cannot be written.
    """

    capabilities = Capabilities(
        compositions=(
            Composition(
                "autograd.grad",
                frozenset({"same point"}),
                note="Any autograd transform of a function calling di (grad, jacobian, hessian, make_vjp): "
                "AutoAutograd's own transforms nest, so second derivatives are autograd's.",
            ),
        ),
        aux=AUX_FAMILIES,
        cache=False,
        cache_note=(
            "autograd cannot write traced values into arrays. Use AutoTorch, AutoJAX or AutoFiniteDiff, "
            "or pass the buffer as a Constant and build new arrays inside f."
        ),
    )

    def prepare_value_program(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        """``f``'s value, copied where it is ``x``, a context value or a view of one."""
        value = super().prepare_value_program(f, x, contexts)
        inputs = self._inputs(x, contexts)

        def owned_value(x: Any, *values: Any) -> Any:
            y = value(x, *values)
            if y.__class__ is np.ndarray and (y.base is not None or y is x or any(y is v for v in values)):
                y = _owned(y, *inputs(x, values))
            return y

        return owned_value

    def split_vector(self, vector: Any, offsets: Sequence[int]) -> list[Any] | None:
        """``anp.split``: its derivative is one concatenation, where each slice's is a
        full-size ``np.add.at`` (a pytree of large leaves paid it per leaf)."""
        return list(anp.split(vector, list(offsets[1:])))

    def _inputs(self, x: Any, contexts: Sequence[Context]) -> Callable[..., tuple[Any, tuple[Any, ...]]]:
        """``inputs(x, values) -> (x, values)`` as autograd takes them; what needs no
        conversion is passed as it is (decided at preparation: the signature check
        keeps x's class and dtype for the prep's lifetime)."""
        to_numpy_x = self.input_converters([x])[0]
        convert_contexts = self.input_converters([c.value for c in contexts])
        convert_x = (
            to_numpy_x is not identity
            or (x.__class__ is not np.ndarray and not isinstance(x, Box))
            or str(getattr(x, "dtype", "")).endswith(_BFLOAT16)
        )
        convert_any = any(convert is not identity for convert in convert_contexts)
        if not (convert_x or convert_any):
            return _as_they_are

        def inputs(x: Any, values: Sequence[Any]) -> tuple[Any, tuple[Any, ...]]:
            if convert_x:
                x = _differentiable(to_numpy_x(x))
            if convert_any:
                values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            return x, values  # type: ignore[return-value]

        return inputs

    def _checked(self, f: Callable[..., Any], operator: str) -> Callable[..., Any]:
        if operator in SCALAR_OPERATORS:
            return checking(f, self.backend, operator, _RULES, accept=_boxed_float_scalar)
        checked = checking(f, self.backend, operator, _RULES, accept=_boxed_float_array)
        if getattr(f, "checked_program", False):
            return checked  # an engine's program: an untraced output is a derivative constant in x
        backend = self.backend

        def traced_output(x: Any, *values: Any) -> Any:
            # The shared check refuses an untraced scalar only: an array that autograd did not trace
            # from x (rebuilt from x._value, np.asarray of a getval) would give zeros, where
            # autograd only warns "Output seems independent of input"
            y = checked(x, *values)
            if x.__class__ is ArrayBox and not (y.__class__ is ArrayBox and y._trace == x._trace):
                if not _RULES.is_traced(y, x):
                    raise untraced_output_error(y, backend, operator)
            return y

        return traced_output

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        backend = self.backend
        f, attach = _capturing(f, backend, "gradient", has_aux)
        arguments = self._inputs(x, contexts)
        converts = arguments is not _as_they_are  # (the common case: no call to arguments)

        checked = checking(f, backend, "gradient", _RULES, accept=_boxed_float_scalar)

        def gradient(x: Any, *values: Any) -> Any:
            if converts:
                x, values = arguments(x, values)
            g = value_and_grad_at(checked, x, values)[1]
            return g if g.__class__ is np.ndarray and g.dtype == x.dtype else _array(g, dtype=x.dtype)

        def value_and_gradient(x: Any, *values: Any) -> Any:
            x, values = arguments(x, values)
            y, g = value_and_grad_at(checked, x, values)
            return _owned(_array(y), x, values), _array(g, dtype=x.dtype)

        if not has_aux:
            return {"gradient": gradient, "value_and_gradient": value_and_gradient}
        return {
            "gradient": lambda *args: attach(gradient(*args)),
            "value_and_gradient": lambda *args: attach(value_and_gradient(*args)),
        }

    def prepare_pullback_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        inputs = self._inputs(x, contexts)
        f, attach = _capturing(f, self.backend, "pullback", has_aux)
        checked = self._checked(f, "pullback")

        def pulled_back(x: Any, ty: Sequence[Any], values: Sequence[Any]) -> tuple[Any, tuple[Any, ...]]:
            x, values = inputs(x, values)
            vjp, y = vjp_at(checked, x, values)
            y = _owned(_array(y), x, values)
            products = []
            for t in ty:
                cotangent = _numpy(t, y.dtype)
                if cotangent.shape != y.shape:  # autograd's vjp would broadcast it, silently
                    raise ValueError(f"a cotangent of shape {cotangent.shape} for an output of shape {y.shape}")
                # a product that is its cotangent (f is linear) is copied
                products.append(_owned(_array(vjp(cotangent), dtype=x.dtype), cotangent, ()))
            return y, tuple(products)

        def value_and_pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            return attach(pulled_back(x, ty, values))

        def pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            return attach(pulled_back(x, ty, values)[1])

        return {"pullback": pullback, "value_and_pullback": value_and_pullback}

    def prepare_pushforward_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        inputs = self._inputs(x, contexts)
        f, attach = _capturing(f, self.backend, "pushforward", has_aux)
        checked = self._checked(f, "pushforward")

        def pushed_forward(x: Any, tx: Sequence[Any], values: Sequence[Any]) -> tuple[Any, tuple[Any, ...]]:
            x, values = inputs(x, values)
            if not tx:
                return _owned(_array(f(x, *values)), x, values), ()
            jvp = jvp_at(checked, x, values)
            # make_jvp evaluates f at x once per tangent (each leaves the same aux)
            products, y = [], None
            for t in tx:
                tangent = _numpy(t, x.dtype)
                y, dy = jvp(tangent)
                # a product that is its tangent (f is linear: the identity, a reshape) is copied
                products.append(_owned(_array(dy), tangent, ()))
            return _owned(_array(y), x, values), tuple(products)

        def value_and_pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            return attach(pushed_forward(x, tx, values))

        def pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            return attach(pushed_forward(x, tx, values)[1])

        return {"pushforward": pushforward, "value_and_pushforward": value_and_pushforward}

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        inputs = self._inputs(x, contexts)
        f, attach = _capturing(f, self.backend, "jacobian", has_aux)
        checked = self._checked(f, "jacobian")

        def jacobian_with_value(x: Any, values: Sequence[Any]) -> tuple[Any, Any]:
            # autograd.jacobian's algorithm (a vjp per output element), keeping the value.
            x, values = inputs(x, values)
            vjp, y = vjp_at(checked, x, values)
            y = _owned(_array(y), x, values)
            basis = np.eye(y.size, dtype=y.dtype).reshape((y.size, *y.shape))
            # a row comes back in x's dtype where f casts (astype's vjp casts back):
            # derivatives in the output's space are in its dtype, as on the other engines
            rows = [_array(vjp(e), dtype=y.dtype) for e in basis]
            jac = _stack(rows) if rows else np.zeros((0, *x.shape), dtype=y.dtype)
            return y, jac.reshape(y.shape + x.shape)

        def value_and_jacobian(x: Any, *values: Any) -> Any:
            return attach(jacobian_with_value(x, values))

        def jacobian(x: Any, *values: Any) -> Any:
            return attach(jacobian_with_value(x, values)[1])

        return {"jacobian": jacobian, "value_and_jacobian": value_and_jacobian}

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        inputs = self._inputs(x, contexts)
        hvp_maker = make_hvp(self._checked(f, "hvp"))

        def gradient_and_hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            x, values = inputs(x, values)
            hvp, g = hvp_maker(x, *values)  # the vjp of the gradient: H symmetric, so H v
            return _array(g, dtype=x.dtype), tuple(_array(hvp(_numpy(t, x.dtype)), dtype=x.dtype) for t in tx)

        def hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            return gradient_and_hvp(x, tx, *values)[1]

        return {"hvp": hvp, "gradient_and_hvp": gradient_and_hvp}

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        inputs = self._inputs(x, contexts)
        checked = self._checked(f, "hessian")
        # jacobian(grad(f)), not autograd.hessian (jacobian(jacobian)), whose inner stack and
        # reshape are differentiated in each of the n passes; the vjp's value is the gradient.
        gradient_vjp = make_vjp(autograd.grad(checked))

        def gradient_and_hessian(x: Any, values: Sequence[Any]) -> tuple[Any, Any]:
            if x.size == 0:  # autograd's jacobian cannot stack zero rows
                return np.zeros(x.shape, dtype=x.dtype), np.zeros(x.shape + x.shape, dtype=x.dtype)
            vjp, g = gradient_vjp(x, *values)
            basis = np.eye(x.size, dtype=getval(g).dtype).reshape((x.size, *x.shape))
            rows = _stack([vjp(e) for e in basis])
            return _array(g, dtype=x.dtype), _array(rows, dtype=x.dtype).reshape(x.shape + x.shape)

        def value_gradient_and_hessian(x: Any, *values: Any) -> Any:
            x, values = inputs(x, values)
            g, hessian = gradient_and_hessian(x, values)
            return _owned(_array(checked(x, *values)), x, values), g, hessian

        def hessian(x: Any, *values: Any) -> Any:
            x, values = inputs(x, values)
            return gradient_and_hessian(x, values)[1]

        return {"hessian": hessian, "value_gradient_and_hessian": value_gradient_and_hessian}

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        inputs = self._inputs(x, contexts)
        checked = self._checked(f, "second_derivative")
        # reverse over reverse: autograd nests its reverse mode reliably
        derivative_function = autograd.jacobian(checked)
        second_function = autograd.jacobian(derivative_function)

        def value_derivative_and_second_derivative(x: Any, *values: Any) -> Any:
            x, values = inputs(x, values)
            y = _owned(_array(checked(x, *values)), x, values)
            # in y's dtype, as the other engines give derivatives in the output's space
            # (reverse mode gives x's where f casts to another dtype)
            dy = _array(derivative_function(x, *values), dtype=y.dtype)
            return y, dy, _array(second_function(x, *values), dtype=y.dtype)

        def second_derivative(x: Any, *values: Any) -> Any:
            x, values = inputs(x, values)
            d2y = second_function(x, *values)
            if d2y.dtype == x.dtype:  # f may cast: the output's dtype decides
                return _array(d2y, dtype=getattr(checked(x, *values), "dtype", None))
            return _array(d2y)

        return {
            "second_derivative": second_derivative,
            "value_derivative_and_second_derivative": value_derivative_and_second_derivative,
        }
