"""The ``di`` errors for two mistakes in ``f`` every engine meets in its own words:
a write into ``x``, and a function of another engine's library called on the
values this engine traces. Each engine recognises its own error (its
:class:`~di.backends.outputs.OutputRules`, in its folder) and raises these, chained
to it, so one mistake reads the same whichever engine runs ``f``.
"""

from __future__ import annotations

from di.backends.selectors import AbstractBackend, engines
from di.errors import InvalidInputError, InvalidOutputError

__all__ = ["MUTATION_RULE", "foreign_engine_error", "written_x_error"]

MUTATION_RULE = (
    "x and every Constant are read only (the mutation rule, docs/preparation.md): build a new array instead "
    "(x + 1, xp.where(mask, 0.0, x), xp.concat(...)), or write into a di.Cache passed as scratch space where the "
    "engine takes one."
)


def _engine(backend: AbstractBackend) -> str:
    return getattr(backend, "engine_display", "") or type(backend).__name__


def written_x_error(backend: AbstractBackend, operator: str) -> InvalidInputError:
    """The error for an ``f`` that wrote into ``x`` (``x[0] = 5.0``, ``x += 1``).

    Examples:
        >>> import di
        >>> from di.backends.misuse import written_x_error
        >>> str(written_x_error(di.AutoFiniteDiff(), "gradient")).split(":")[1].split(",")[0].strip()
        'f wrote into x in place (x[i] = ...'
    """
    return InvalidInputError(
        f"{operator} with {backend!r}: f wrote into x in place (x[i] = ..., x += ...), which "
        f"{_engine(backend)} refuses: it would differentiate another function than f, or none. {MUTATION_RULE}"
    )


def foreign_engine_error(backend: AbstractBackend, operator: str, error: BaseException) -> InvalidOutputError:
    """The error for an ``f`` that called a function of another array library (written
    for another engine: ``torch.sin``) on a value ``backend``'s engine traces.

    Examples:
        >>> import di
        >>> from di.backends.misuse import foreign_engine_error
        >>> "array_namespace" in str(foreign_engine_error(di.AutoJAX(), "gradient", TypeError("sin()")))
        True
    """
    engine = _engine(backend)
    own = type(backend)
    hosts = sorted(
        f"di.DifferentiateWith(f, {type(record.default).__name__}())"
        for record in engines()
        if record.host and record.default is not None and own not in record.selectors
    )
    mixing = f" ({', '.join(hosts)})" if hosts else ""
    cause = str(error).splitlines()[0] if str(error) else type(error).__name__
    return InvalidOutputError(
        f"{operator} cannot differentiate f with {backend!r}: f called a function of another array library on a "
        f"value {engine} traces ({type(error).__name__}: {cause}), as an f written for another engine does. Write f "
        f"with the array API (xp = di.array_namespace(x); xp.sin(x)) so every engine runs it, or keep f as it is and "
        f"let the engine it is written for differentiate it inside {engine}: g = DifferentiateWith(f, that "
        f"engine's selector){mixing}, then {operator} of g."
    )
