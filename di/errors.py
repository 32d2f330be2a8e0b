"""Errors and warnings raised by ``di``.

Every error ``di`` raises itself derives from :class:`DIError`, and also from the
built-in exception a caller would catch for the same mistake (``TypeError`` for a
wrong type, ``ValueError`` for a wrong value, ``ImportError`` for a missing engine),
so ``except TypeError`` keeps working around ``di`` calls. Errors raised inside the
user's function are never wrapped: they reach the caller with their own type.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendNotInstalledError",
    "DIError",
    "DistributedError",
    "InvalidInputError",
    "InvalidOptionError",
    "InvalidOptionTypeError",
    "InvalidOutputError",
    "OutBufferError",
    "PreparationMismatchError",
    "RecompileLimitError",
    "RecompileWarning",
    "UnsupportedContextError",
    "UnsupportedOperatorError",
]


def type_label(value: Any) -> str:
    """The type of ``value`` as error messages name it: a builtin by its name
    (``list``), any other class with its library (``array_api_strict.Array``), so
    that an array of a library ``di`` does not know is not read as "not an array".

    Examples:
        >>> import numpy as np
        >>> from di.errors import type_label
        >>> type_label([1.0]), type_label(np.float32(1.0))
        ('list', 'numpy.float32')
    """
    cls = type(value)
    library = cls.__module__.split(".")[0]
    return cls.__name__ if library == "builtins" else f"{library}.{cls.__name__}"


class DIError(Exception):
    """Base class of every error raised by ``di`` itself.

    Examples:
        >>> import di
        >>> issubclass(di.PreparationMismatchError, di.DIError)
        True
    """


class BackendNotInstalledError(DIError, ImportError):
    """A backend was selected whose engine is not installed.

    The message names the missing engine and the ``pip`` command that installs it.

    Examples:
        >>> import di
        >>> issubclass(di.BackendNotInstalledError, ImportError)
        True
    """


class PreparationMismatchError(DIError, ValueError):
    """A prep was used with arguments other than those it was prepared for.

    The message has one line per argument (``f``, ``backend``, ``x``, each context),
    each marked ``ok`` or ``differs`` with the prepared and the given signature.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x * x).sum()
        >>> prep = di.prepare_gradient(f, di.AutoFiniteDiff(), np.zeros(3))
        >>> try:
        ...     di.gradient(f, prep, di.AutoFiniteDiff(), np.zeros(4))
        ... except di.PreparationMismatchError as err:
        ...     print(str(err).splitlines()[0])
        this prep was made for other arguments.
    """


class UnsupportedContextError(DIError, TypeError):
    """A backend cannot use a kind of context (for example autograd and ``Cache``).

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x, c: (x * x).sum()
        >>> try:
        ...     di.prepare_gradient(f, di.AutoAutograd(), np.zeros(3), di.Cache(np.zeros(3)))
        ... except di.UnsupportedContextError as err:
        ...     print(str(err).split(":")[0])
        AutoAutograd() cannot use Cache contexts
    """


class UnsupportedOperatorError(DIError, NotImplementedError):
    """A backend cannot compute an operator, even through the generic fallbacks.

    Examples:
        >>> import di
        >>> issubclass(di.UnsupportedOperatorError, NotImplementedError)
        True
    """


class InvalidInputError(DIError, TypeError):
    """An argument has a type ``di`` cannot differentiate or pass on.

    Raised for an ``x`` that is not a floating array (int, bool, complex, a list,
    ``None``...) and for a raw value passed where a context (``Constant`` or
    ``Cache``) is expected.

    Examples:
        >>> import numpy as np, di
        >>> try:
        ...     di.gradient(lambda x: x.sum(), di.AutoFiniteDiff(), np.arange(3))
        ... except di.InvalidInputError as err:
        ...     print(str(err).split(" for ")[0])
        x must be a real floating-point array
    """


class InvalidOptionError(DIError, ValueError):
    """An option has a value ``di`` cannot take: an option of a backend selector
    (``AutoFiniteDiff(step=-1)``, ``AutoJAX(mode="fast")``, ``AutoFastest([])``),
    of a sparsity source (``DenseSparsity(points=0)``, a 1-D ``KnownSparsity``
    pattern), an unknown name given to :func:`di.backend`, or an adapter or
    selector given to :func:`di.register_backend` that cannot serve.

    The message names the selector, the option and the values it takes.
    :class:`InvalidOptionTypeError` is its flavour for a value of the wrong type.

    Examples:
        >>> import di
        >>> try:
        ...     di.AutoFiniteDiff(step=-1.0)
        ... except di.InvalidOptionError as err:
        ...     print(err)
        AutoFiniteDiff(step=-1.0): step must be a positive float
        >>> issubclass(di.InvalidOptionError, ValueError)
        True
    """


class InvalidOptionTypeError(InvalidOptionError, TypeError):
    """An option has a value of a type ``di`` cannot take (``AutoTorch(compile_options=3)``,
    one selector where ``AutoFastest`` takes a list of them, an adapter instance
    where :func:`di.register_backend` takes its class).

    It is an :class:`InvalidOptionError` and a ``TypeError``, so ``except
    TypeError`` keeps working.

    Examples:
        >>> import di
        >>> try:
        ...     di.AutoFastest(di.AutoFiniteDiff())
        ... except di.InvalidOptionTypeError as err:
        ...     print(str(err).split(",")[0])
        AutoFastest(candidates=...) takes a list of backend selectors
        >>> issubclass(di.InvalidOptionTypeError, TypeError)
        True
    """


class InvalidOutputError(DIError, TypeError):
    """``f`` returned something the operator cannot use.

    For ``gradient`` this is anything but a real scalar: an array with more than
    one element (the message gives its shape), a complex or integer value, ``None``.

    Examples:
        >>> import numpy as np, di
        >>> try:
        ...     di.gradient(lambda x: x * 2, di.AutoFiniteDiff(), np.ones(3))
        ... except di.InvalidOutputError as err:
        ...     print(str(err).split(",")[0])
        gradient needs f to return a real scalar
    """


class OutBufferError(DIError, ValueError):
    """The ``out=`` buffer does not fit the result (shape, dtype or array family).

    The buffer is left untouched.

    Examples:
        >>> import numpy as np, di
        >>> try:
        ...     di.gradient(lambda x: (x * x).sum(), di.AutoFiniteDiff(), np.ones(3),
        ...                 out=np.empty(4))
        ... except di.OutBufferError as err:
        ...     print(str(err).split(":")[0])
        out does not fit the gradient
    """


class RecompileLimitError(DIError, RuntimeError):
    """A compiled backend reached its engine's recompile limit and cannot fall back.

    ``AutoTorch(compile=True)`` compiles with ``fullgraph=True``: when ``f``
    changes something ``torch.compile`` guards on at every call (a Python global
    it bumps, a Python number it reads), each call compiles again until dynamo's
    ``recompile_limit``, where it stops. The message names the guard that kept
    failing and what to change in ``f``. :class:`RecompileWarning` is raised
    before, from the second unexpected recompile on.

    Examples:
        >>> import di
        >>> issubclass(di.RecompileLimitError, di.DIError), issubclass(di.RecompileLimitError, RuntimeError)
        (True, True)
    """


class DistributedError(DIError, RuntimeError):
    """A call that would not be right, or would hang, across the processes of a
    distributed run (JAX multi-process, torch DDP or FSDP), refused.

    The message names the runtime and what works instead: a result no process
    can read whole, a gradient that would be one process's where the training
    averages it, an operator the runtime cannot differentiate, processes that
    decided differently at preparation.

    Examples:
        >>> import di
        >>> issubclass(di.DistributedError, di.DIError), issubclass(di.DistributedError, RuntimeError)
        (True, True)
    """


class RecompileWarning(UserWarning):
    """A compiled backend keeps compiling again, or fell back to eager execution.

    Examples:
        >>> import di
        >>> issubclass(di.RecompileWarning, UserWarning)
        True
    """
