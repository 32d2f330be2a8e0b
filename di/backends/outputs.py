"""What ``f`` must return, checked once for every engine.

One contract, the same on every backend:

* ``gradient``, ``hvp`` and ``hessian`` need a real floating scalar: a 0-d array,
  or an array of one element (shape ``(1,)``, ``(1, 1)``, ...), which counts as
  that scalar. ``value_and_gradient`` (and the other combined forms) then return
  the value as a 0-d array.
* The other operators need a real floating array (or, on engines that take
  them, a pytree of such arrays).
* An engine that differentiates by tracing ``f`` (automatic differentiation)
  needs ``f``'s output computed from ``x`` by the engine. A Python number, or a
  scalar the engine did not compute from ``x`` (``float(...)``, ``.item()``, a
  detached or newly built array), carries no derivative: it is refused with
  :class:`di.InvalidOutputError` saying what to write instead, never turned into
  zeros. A function constant in ``x`` returns an array computed from ``x``
  (``xp.sum(x) * 0 + c``), whose derivative is zero.
* Finite differences only evaluate ``f``: a Python float is a scalar like any
  other there.

Each engine describes its outputs with an :class:`OutputRules` (how to look
inside a traced value, whether a value was traced from ``x``, how to make a
one-element array a scalar); :func:`checking` and :func:`check_output` apply
the contract with them, and every message comes from this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NoReturn

from di.backends.aux import split_output
from di.backends.selectors import AbstractBackend
from di.errors import InvalidOutputError
from di.families import is_floating_dtype
from di.families.registry import family_of, get_family

__all__ = [
    "SCALAR_OPERATORS",
    "OutputRules",
    "check_output",
    "checking",
    "describe_output",
    "foreign_code_error",
    "is_one_element",
    "is_real_floating_array",
    "is_real_scalar",
    "output_leaf_shapes",
    "raise_bad_output",
    "raise_translated",
    "raise_untraced_output",
    "translated",
    "untraced_output_error",
]

SCALAR_OPERATORS = frozenset({"gradient", "hvp", "hessian"})
"""The operators whose ``f`` returns a scalar."""


def describe_output(y: Any) -> str:
    """Describe a value ``f`` returned, for error messages.

    Examples:
        >>> import numpy as np
        >>> from di.backends.outputs import describe_output
        >>> describe_output(np.zeros((2, 3))), describe_output(None)
        ('an array of shape (2, 3) and dtype float64', 'a NoneType')
    """
    shape = getattr(y, "shape", None)
    dtype = getattr(y, "dtype", None)
    if shape is not None:
        return f"an array of shape {tuple(shape)} and dtype {dtype}"
    return f"a {type(y).__name__}"


def is_real_floating_array(y: Any) -> bool:
    """Whether ``y`` is a real floating array of any family (or a traced one, or a
    Python float): what jacobian, pushforward, pullback and derivative need.

    Examples:
        >>> import numpy as np
        >>> from di.backends.outputs import is_real_floating_array
        >>> is_real_floating_array(np.ones(2)), is_real_floating_array(np.arange(2))
        (True, False)
    """
    if isinstance(y, float):
        return True
    dtype = getattr(y, "dtype", None)
    return dtype is not None and hasattr(y, "shape") and is_floating_dtype(dtype)


def is_real_scalar(y: Any) -> bool:
    """Whether ``y`` is a real floating scalar (0-d floating array of any family,
    an engine's traced scalar, or a Python float).

    Examples:
        >>> import numpy as np
        >>> from di.backends.outputs import is_real_scalar
        >>> is_real_scalar(np.float32(1.0)), is_real_scalar(np.ones(1))
        (True, False)
    """
    if isinstance(y, float):
        return True
    shape = getattr(y, "shape", None)
    if shape is None or tuple(shape) != ():
        return False
    return is_floating_dtype(y.dtype)


def is_one_element(shape: Any) -> bool:
    """Whether ``shape`` holds exactly one element: ``()``, ``(1,)``, ``(1, 1)``, ...

    Examples:
        >>> from di.backends.outputs import is_one_element
        >>> is_one_element(()), is_one_element((1, 1)), is_one_element((2,))
        (True, True, False)
    """
    return all(size == 1 for size in shape)


def output_leaf_shapes(y: Any, tree_map: Callable[[Callable[[Any], Any], Any], Any]) -> Any:
    """An output's structure with each leaf's shape in its place (mapped with the
    engine's ``tree_map``: an array's shape, a dict of shapes, ...), to compare
    cotangents with (``==``: a one-leaf dict differs from an array of its shape);
    ``None`` when a leaf is not a real floating array (the programs refuse such an
    output with their own error).

    Examples:
        >>> import numpy as np
        >>> from di.backends.outputs import output_leaf_shapes
        >>> from di.pytrees import tree_map
        >>> output_leaf_shapes({"a": np.ones(2), "b": np.ones((1, 3))}, tree_map)
        {'a': (2,), 'b': (1, 3)}
    """
    refused: list[Any] = []

    def shape(leaf: Any) -> Any:
        if not is_real_floating_array(leaf):
            refused.append(leaf)
        return tuple(getattr(leaf, "shape", ()))

    skeleton = tree_map(shape, y)
    return None if refused or skeleton == [] or skeleton == () else skeleton


def raise_bad_output(y: Any, backend: AbstractBackend, operator: str = "gradient") -> NoReturn:
    """Raise :class:`InvalidOutputError` for an ``f`` whose output ``operator``
    cannot use: a real scalar (or one-element array) for gradient, hvp and
    hessian; a real floating array for the others.

    Raises:
        InvalidOutputError: always, naming what ``f`` returned and what to do.

    Examples:
        >>> import numpy as np, di
        >>> from di.backends.outputs import raise_bad_output
        >>> try:
        ...     raise_bad_output(np.ones(3), di.AutoFiniteDiff())
        ... except di.InvalidOutputError as err:
        ...     print(str(err).split(",")[0])
        gradient needs f to return a real scalar
    """
    shape = getattr(y, "shape", None)
    complex_output = isinstance(y, complex) or "complex" in str(getattr(y, "dtype", ""))
    if operator not in SCALAR_OPERATORS:
        if complex_output:
            hint = " Differentiate its real and imaginary parts separately."
        elif isinstance(y, tuple) and len(y) == 2:
            hint = (
                " If f returns (y, aux), pass has_aux=True. Pytree outputs are supported by AutoJAX; with other "
                "backends, stack them into one array."
            )
        elif isinstance(y, (dict, list, tuple)):
            hint = " Pytree outputs are supported by AutoJAX; with other backends, stack them into one array."
        else:
            hint = " Return a floating-point array of x's array family."
        raise InvalidOutputError(
            f"{operator} needs f to return a real floating-point array, but with {backend!r} f returned "
            f"{describe_output(y)}.{hint}"
        )
    if isinstance(y, tuple) and len(y) == 2:
        hint = " If f returns (y, aux), pass has_aux=True."
    elif shape is not None and not is_one_element(tuple(shape)):
        hint = " Reduce it to a scalar (for example with .sum()), or use jacobian for array outputs."
    elif complex_output:
        hint = (
            f" {operator} needs a real-valued f (also at a complex x). Return its real part (xp.real(y)) or its "
            f"squared modulus (xp.abs(y) ** 2)."
        )
    else:
        hint = " Return a floating-point 0-d array (or an array of one element)."
    raise InvalidOutputError(
        f"{operator} needs f to return a real scalar, but with {backend!r} f returned {describe_output(y)}.{hint}"
    )


def raise_untraced_output(y: Any, backend: AbstractBackend, operator: str) -> NoReturn:
    """Raise :class:`InvalidOutputError` for an output that the engine did not
    compute from ``x``: a Python number, or a detached or newly built scalar.

    Raises:
        InvalidOutputError: always, saying what to write instead.

    Examples:
        >>> import di
        >>> from di.backends.outputs import raise_untraced_output
        >>> try:
        ...     raise_untraced_output(1.5, di.AutoJAX(), "gradient")
        ... except di.InvalidOutputError as err:
        ...     print(str(err).split(":")[1].split(".")[0].strip())
        f returned a Python float, which carries no derivative
    """
    raise untraced_output_error(y, backend, operator)


def untraced_output_error(y: Any, backend: AbstractBackend, operator: str, cause: str = "") -> InvalidOutputError:
    """The :class:`InvalidOutputError` of :func:`raise_untraced_output`; with
    ``cause`` (the engine's account, such as ``"float()"``), the error for an
    ``f`` that the engine stopped while it turned a traced value into a Python
    number.

    Examples:
        >>> import di
        >>> from di.backends.outputs import untraced_output_error
        >>> "float()" in str(untraced_output_error(None, di.AutoJAX(), "gradient", "float()"))
        True
    """
    if cause:
        what = f"f turned a value computed from x into a Python number with {cause}"
    elif isinstance(y, (bool, int, float, complex)) and not hasattr(y, "shape"):
        what = f"f returned a Python {type(y).__name__}, which carries no derivative"
    else:
        what = f"f returned {describe_output(y)} that was not computed from x, so it carries no derivative"
    return InvalidOutputError(
        f"{operator} cannot differentiate f with {backend!r}: {what}. Derivatives cannot pass through float(), "
        f".item(), .tolist(), .detach() or a conversion into a new array (np.asarray, xp.asarray): keep the "
        f"computation in array operations on x (xp = di.array_namespace(x); return xp.sum(x ** 2), not "
        f"float(...)). If f does not depend on x, return an array computed from x, such as xp.sum(x) * 0 + c, "
        f"whose derivative is zero."
    )


_FOREIGN = {
    "numpy": "f called NumPy on a value {engine} traces (a NumPy function such as np.sin, or np.asarray)",
    "closure": "f combined a NumPy array it closes over with a value {engine} traces",
    "either": (
        "f called NumPy on a value {engine} traces (a NumPy function such as np.sin, or np.asarray), or combined "
        "it with a NumPy array it closes over"
    ),
}
"""What an engine's refusal of NumPy inside ``f`` means (:meth:`OutputRules.foreign_cause`)."""


def foreign_code_error(backend: AbstractBackend, operator: str, cause: str) -> InvalidOutputError:
    """The :class:`InvalidOutputError` for an ``f`` that hands a traced value to NumPy
    (``cause`` ``"numpy"``), mixes one with a NumPy array it closes over
    (``"closure"``), or either (``"either"``, when the engine's error does not
    say which): what happened and how to write ``f`` instead.

    Examples:
        >>> import di
        >>> from di.backends.outputs import foreign_code_error
        >>> "DifferentiateWith" in str(foreign_code_error(di.AutoJAX(), "gradient", "numpy"))
        True
    """
    engine = getattr(backend, "engine_display", "") or type(backend).__name__
    what = _FOREIGN[cause].format(engine=engine)
    fixes = []
    if cause in ("numpy", "either"):
        fixes.append(
            f"write f with the array API (xp = di.array_namespace(x); xp.sin(x), not np.sin(x)), or, for a "
            f"NumPy-only function (scipy.optimize.rosen, a simulator), let another backend differentiate it inside "
            f"{engine}: g = di.DifferentiateWith(f, di.AutoFiniteDiff()) is f with finite-difference derivatives"
        )
    if cause in ("closure", "either"):
        fixes.append(
            f"pass the data as a context, di.{operator}(f, backend, x, di.Constant(data)) with f(x, data), so that f "
            f"receives it as an array {engine} takes"
        )
    return InvalidOutputError(
        f"{operator} cannot differentiate f with {backend!r}: {what}, which {engine} cannot trace. To fix it, "
        + "; or ".join(fixes)
        + "."
    )


def translated(
    error: BaseException, backend: AbstractBackend, operator: str, rules: OutputRules, values: Sequence[Any] = ()
) -> BaseException:
    """The ``di`` error for an engine's ``error`` raised inside ``f`` (one of the
    rules' :attr:`~OutputRules.conversion_errors`): the engine's own reading of it
    (:meth:`OutputRules.translate`), or ``f`` turned a traced value into a Python
    number, or gave one to NumPy; otherwise ``error`` itself. ``values``: the
    context values ``f`` was called with, where the engine can tell which one the
    error is about.

    Examples:
        >>> import di
        >>> from di.backends.outputs import OutputRules, translated
        >>> error = ValueError("other")
        >>> translated(error, di.AutoFiniteDiff(), "gradient", OutputRules()) is error
        True
    """
    own = rules.translate(error, backend, operator, values)
    if own is not None:
        return own
    cause = rules.is_conversion_error(error)
    if cause:
        return untraced_output_error(None, backend, operator, cause)
    foreign = rules.foreign_cause(error)
    if foreign:
        return foreign_code_error(backend, operator, foreign)
    return error


def raise_translated(
    error: BaseException, backend: AbstractBackend, operator: str, rules: OutputRules, values: Sequence[Any] = ()
) -> NoReturn:
    """Raise the :func:`translated` ``di`` error of ``error``, chained to it, or
    ``error`` itself (its type and message kept) when there is none."""
    di_error = translated(error, backend, operator, rules, values)
    if di_error is error:
        raise error
    raise di_error from error


class OutputRules:
    """How one engine's outputs are inspected: subclass it in the engine's module.

    The defaults describe an engine that only evaluates ``f`` (finite
    differences): any real floating output is usable, a Python float included.

    Attributes:
        traces: whether the engine differentiates by tracing ``f`` (its outputs
            must then be computed from ``x``).
        conversion_errors: the exception types the engine raises inside ``f``
            when ``f`` turns a traced value into a Python number or hands it to
            NumPy; each is checked by :meth:`is_conversion_error` and
            :meth:`foreign_cause`.

    Examples:
        >>> from di.backends.outputs import OutputRules
        >>> OutputRules().traces
        False
    """

    traces: ClassVar[bool] = False
    conversion_errors: tuple[type[BaseException], ...] = ()

    def value(self, y: Any) -> Any:
        """What to read ``y``'s shape and dtype from (a traced value's own value,
        when reading the traced one costs more)."""
        return y

    def is_traced(self, y: Any, x: Any) -> bool:
        """Whether the 0-d output ``y`` was computed from ``x`` by the engine
        (``True`` when ``x`` is not being traced)."""
        return True

    def scalar(self, y: Any) -> Any:
        """A one-element output as a 0-d one (by its family's namespace where the
        array has no ``reshape`` method, as TensorFlow's tensors)."""
        reshape = getattr(y, "reshape", None)
        if reshape is not None:
            return reshape(())
        family = family_of(y)
        return get_family(family).namespace().reshape(y, ()) if family is not None else y.reshape(())

    def accepts_array(self, y: Any) -> bool:
        """Whether the operators other than the scalar ones can use ``y``."""
        return is_real_floating_array(y)

    def translate(
        self, error: BaseException, backend: AbstractBackend, operator: str, values: Sequence[Any]
    ) -> BaseException | None:
        """The engine's own ``di`` error for ``error`` (one of
        :attr:`conversion_errors`), which it can explain better than the generic
        readings below (a write into ``x``; which of ``x`` and ``values`` a refused
        value came from), or ``None``. Asked only once ``f`` raised."""
        return None

    def is_conversion_error(self, error: BaseException) -> str:
        """What the engine's ``error`` (one of :attr:`conversion_errors`) says
        ``f`` did (``"float()"``), or ``""`` when it is another error."""
        return ""

    def foreign_cause(self, error: BaseException) -> str:
        """Whether the engine's ``error`` (one of :attr:`conversion_errors`) says ``f``
        gave a traced value to NumPy (``"numpy"``), mixed one with a NumPy array
        it closes over (``"closure"``), or either (``"either"``); ``""`` for
        another error."""
        return ""

    def foreign_output(self, y: Any) -> str:
        """Whether an output ``y`` that no operator can use says ``f`` gave a traced
        value to NumPy (``"numpy"``: an engine whose traced values NumPy wraps in
        an array of objects), as :meth:`foreign_cause` reads an error; ``""``
        otherwise. Asked only of a refused output."""
        return ""


def check_output(
    y: Any, x: Any, backend: AbstractBackend, operator: str, rules: OutputRules, *, untraced: bool = False
) -> Any:
    """``y`` as ``operator`` uses it (a one-element output of a scalar operator
    made 0-d), or :class:`InvalidOutputError`.

    Args:
        y: what ``f`` returned (``y`` alone under ``has_aux``).
        x: the input ``f`` was called with (to tell whether ``y`` was traced from it).
        backend: the selector, named in errors.
        operator: the operator, deciding scalar or array.
        rules: the engine's :class:`OutputRules`.
        untraced: accept an output not computed from ``x`` (the constant
            derivative of a linear ``f``, from an engine's own program).

    Returns:
        ``y``, or ``y`` reshaped to a scalar.

    Raises:
        InvalidOutputError: ``y`` is unusable, or carries no derivative.

    Examples:
        >>> import numpy as np, di
        >>> from di.backends.outputs import OutputRules, check_output
        >>> check_output(np.ones((1, 1)), np.ones(2), di.AutoFiniteDiff(), "gradient", OutputRules()).shape
        ()
    """
    if isinstance(y, float) and not hasattr(y, "shape"):  # a Python float (a NumPy scalar has a shape)
        if rules.traces and not untraced:
            raise_untraced_output(y, backend, operator)
        return y
    value = rules.value(y)
    if operator in SCALAR_OPERATORS:
        shape = getattr(value, "shape", None)
        if shape is None or not is_one_element(shape) or not is_floating_dtype(value.dtype):
            _refuse_output(value, backend, operator, rules)
        if len(shape):
            y = rules.scalar(y)
    elif not rules.accepts_array(value):
        _refuse_output(value, backend, operator, rules)
    if rules.traces and not untraced and getattr(value, "ndim", -1) == 0 and not rules.is_traced(y, x):
        raise_untraced_output(y, backend, operator)
    return y


def _refuse_output(value: Any, backend: AbstractBackend, operator: str, rules: OutputRules) -> NoReturn:
    """Raise :class:`InvalidOutputError` for an output ``operator`` cannot use:
    :func:`foreign_code_error` where the engine reads it as NumPy called on a
    traced value, :func:`raise_bad_output` otherwise."""
    cause = rules.foreign_output(value)
    if cause:
        raise foreign_code_error(backend, operator, cause)
    raise_bad_output(value, backend, operator)


def checking(
    f: Callable[..., Any],
    backend: AbstractBackend,
    operator: str,
    rules: OutputRules,
    *,
    has_aux: bool = False,
    aux: Callable[[Any, tuple[Any, ...]], Any] | None = None,
    accept: Callable[[Any], bool] | None = None,
) -> Callable[..., Any]:
    """``f`` with its output checked by :func:`check_output` at every call.

    Args:
        f: the user's function, called as ``f(x, *values)``.
        backend: the selector, named in errors.
        operator: the operator the output is checked for.
        rules: the engine's :class:`OutputRules`.
        has_aux: ``f`` returns ``(y, aux)``; only ``y`` is checked, and the
            checked function returns ``(y, aux)``.
        aux: under ``has_aux``, what the checked function returns beside ``y``
            instead of ``aux`` itself: ``aux(aux, values)``.
        accept: an engine's quick test of the common case (a traced 0-d float),
            passing ``y`` as it is without the full check.

    Returns:
        The checked function.

    Raises:
        InvalidOutputError: at a call, as :func:`check_output`; also when the
            engine stops ``f`` turning a traced value into a Python number or
            handing it to NumPy (the engine's error is its cause).

    Examples:
        >>> import numpy as np, di
        >>> from di.backends.outputs import OutputRules, checking
        >>> f = checking(lambda x: x[:1] * 2.0, di.AutoFiniteDiff(), "gradient", OutputRules())
        >>> f(np.ones(3))
        array(2.)
    """
    conversions = rules.conversion_errors
    # an engine's program, whose output its own rules checked: what looks untraced
    # there is a derivative that does not depend on x (that of a linear f)
    untraced = getattr(f, "checked_program", False)

    def checked(x: Any, *values: Any) -> Any:
        try:
            output = f(x, *values)
        except conversions as err:
            raise_translated(err, backend, operator, rules, values)
        if not has_aux:
            if accept is not None and accept(output):
                return output
            return check_output(output, x, backend, operator, rules, untraced=untraced)
        y, extra = split_output(output, backend, operator)
        if accept is None or not accept(y):
            y = check_output(y, x, backend, operator, rules, untraced=untraced)
        return (y, extra) if aux is None else (y, aux(extra, values))

    return checked
