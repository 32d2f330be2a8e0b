"""The user's function on the command line: importing ``MODULE:FUNCTION``, the
random points it is checked at, and the contexts (``--constant``,
``--cache-buffer``) passed after ``x``."""

from __future__ import annotations

import argparse
import builtins
import difflib
import importlib
import importlib.util
import inspect
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from di.cli.common import UsageError, parse_shape

__all__ = [
    "CONTEXT_HELP",
    "OPTIONS",
    "ContextOption",
    "add_context_options",
    "check_arity",
    "load_object",
    "output_shape",
    "point",
    "register_engines",
]

OPTIONS = {"constant": "--constant", "cache": "--cache-buffer"}
"""The option that gives each kind of context."""
CONTEXT_HELP = (
    "pass each argument f takes after x, in order, with --constant VALUE (a Python expression with np "
    "imported, such as 0.5, 'np.eye(3)' or '[1.0, 2.0]', or shape=3,4 for a random array of --dtype) or "
    "--cache-buffer VALUE (a di.Cache, scratch f may overwrite: shape=3 for a NaN-filled array of --dtype)"
)


def load_object(spec: str, what: str = "function") -> Any:
    """Import ``MODULE:NAME`` (a dotted module or a path to a ``.py`` file).

    Raises:
        UsageError: malformed spec, import failure, missing attribute.

    Examples:
        >>> from di.cli.functions import load_object
        >>> load_object("math:sqrt")(4.0)
        2.0
    """
    module_name, sep, name = spec.rpartition(":")
    if not sep or not module_name or not name:
        raise UsageError(f"expected MODULE:{what.upper()}, e.g. mypackage.losses:loss, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise UsageError(f"cannot import {module_name!r}: no such file")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise UsageError(f"cannot import {module_name!r}: not a Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except UsageError:
        raise
    except Exception as err:
        raise UsageError(f"cannot import module {module_name!r}: {type(err).__name__}: {err}") from err
    try:
        return getattr(module, name)
    except AttributeError:
        # the callables the module defines (not those it imports), the nearest names first
        public = sorted(
            n
            for n, value in vars(module).items()
            if not n.startswith("_") and callable(value) and getattr(value, "__module__", None) == module.__name__
        )
        near = difflib.get_close_matches(name, public, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
        if public:
            hint += f" It defines: {', '.join(public[:12])}" + (" ..." if len(public) > 12 else "")
        raise UsageError(f"module {module_name!r} has no {what} {name!r}{hint}") from None


def register_engines(specs: list[str] | None) -> None:
    """Register the engines ``--engine`` names, each a ``MODULE:NAME`` of an
    :class:`~di.backends.engine.Engine` record (:func:`di.register_engine`).

    Raises:
        UsageError: a spec that does not import, or names something else than a record.

    Examples:
        >>> from di.cli.functions import register_engines
        >>> register_engines(["di.engines.finitediff:ENGINE"])
        >>> register_engines(["math:pi"])
        Traceback (most recent call last):
        ...
        di.cli.common.UsageError: --engine math:pi names a float, not an engine record (di.backends.engine.Engine)
    """
    from di.backends.engine import Engine
    from di.backends.selectors import register_engine

    for spec in specs or ():
        record = load_object(spec, "engine")
        if not isinstance(record, Engine):
            raise UsageError(
                f"--engine {spec} names a {type(record).__name__}, not an engine record (di.backends.engine.Engine)"
            )
        register_engine(record)


def point(shape: tuple[int, ...], dtype: str, seed: int) -> Any:
    """A standard normal NumPy array, drawn in float64 and then cast, so the same
    seed gives the same point in every dtype (up to rounding)."""
    import numpy as np

    return np.asarray(np.random.default_rng(seed).standard_normal(shape), dtype=dtype)


# --- contexts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextOption:
    """One ``--constant`` or ``--cache`` option: what kind of context, and its text.

    Attributes:
        kind: ``"constant"`` or ``"cache"``.
        text: a Python expression (``np`` and ``math`` imported), or ``shape=3,4``.

    Examples:
        >>> from di.cli.functions import ContextOption
        >>> ContextOption("constant", "2 * np.ones(2)").value(0, 0).tolist()
        [2.0, 2.0]
        >>> ContextOption("cache", "shape=2").value(0, 0).shape
        (2,)
    """

    kind: str
    text: str

    @property
    def option(self) -> str:
        """The option as it was written: ``--constant TEXT``."""
        return f"{OPTIONS[self.kind]} {self.text}"

    def value(self, index: int, seed: int) -> Any:
        """The value, in float64 where it is floating (:meth:`context` casts it).

        Args:
            index: the context's position after ``x`` (random arrays draw from
                their own seed).
            seed: the check's seed.

        Raises:
            UsageError: a shape or an expression that does not evaluate.
        """
        import numpy as np

        text = self.text.strip()
        if text.startswith("shape="):
            shape = parse_shape(text[len("shape=") :], self.option)
            if self.kind == "cache":
                return np.full(shape, np.nan)
            return point(shape, "float64", seed + 100 + index)
        try:
            value = eval(text, {"__builtins__": builtins, "np": np, "numpy": np, "math": math})
        except Exception as err:
            raise UsageError(
                f"{self.option}: cannot evaluate it ({type(err).__name__}: {err}); write a Python expression "
                f"such as 0.5, 'np.eye(3)' or '[1.0, 2.0]' (np is imported), or shape=3,4 for a random array"
            ) from None
        return np.asarray(value) if isinstance(value, (list, tuple)) else value

    def context(self, value: Any, dtype: str) -> Any:
        """``value`` (floating arrays cast to ``dtype``) as a ``di.Constant`` or ``di.Cache``."""
        import numpy as np

        import di

        if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind == "f":
            value = np.asarray(value, dtype=dtype)
        return di.Cache(value) if self.kind == "cache" else di.Constant(value)


def add_context_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--constant`` and ``--cache-buffer`` (in one list, in the order given)."""
    parser.add_argument(
        OPTIONS["constant"],
        dest="contexts",
        action="append",
        default=[],
        metavar="VALUE",
        type=lambda text: ContextOption("constant", text),
        help="an argument of f after x, read only: a Python expression (np and math imported), e.g. 0.5, "
        "'np.eye(3)', '[1.0, 2.0]', or shape=3,4 for a random array of --dtype; repeat it, in f's order",
    )
    parser.add_argument(
        OPTIONS["cache"],
        dest="contexts",
        action="append",
        metavar="VALUE",
        type=lambda text: ContextOption("cache", text),
        help="an argument of f after x that f may overwrite (a di.Cache): shape=3 for a NaN-filled array of "
        "--dtype, or a Python expression; in f's order among the --constant options",
    )


def check_arity(f: Callable[..., Any], name: str, given: int) -> None:
    """Refuse, with how to fix it, a number of contexts ``f`` cannot take.

    Raises:
        UsageError: ``f`` needs more arguments after ``x`` than ``given``, or
            takes fewer.

    Examples:
        >>> from di.cli.functions import check_arity
        >>> check_arity(lambda x, a=1.0: x, "f", 0)
        >>> check_arity(lambda x, a: x, "f", 0)
        Traceback (most recent call last):
        ...
        di.cli.common.UsageError: f takes 1 argument after x (a) but 0 were given: ...
    """
    try:
        parameters = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: let the call tell
        return
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in positional[1:] if p.default is p.empty]
    keyword_only = [p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    if keyword_only:
        raise UsageError(
            f"{name} needs keyword-only arguments ({', '.join(keyword_only)}): di passes contexts by "
            f"position, f(x, *contexts); wrap it in a function that takes them positionally"
        )
    variadic = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    after_x = [p.name for p in positional[1:]]
    if len(required) > given:
        noun = "argument" if len(required) == 1 else "arguments"
        raise UsageError(
            f"{name} takes {len(required)} {noun} after x ({', '.join(required)}) but {given} "
            f"{'was' if given == 1 else 'were'} given: "
            f"{CONTEXT_HELP}"
        )
    if not variadic and given > len(after_x):
        raise UsageError(
            f"{name} takes {len(after_x)} argument(s) after x but {given} contexts were given "
            f"(--constant / --cache-buffer); pass one per argument, in order"
        )


# --- evaluating f ---------------------------------------------------------------------------


def output_shape(f: Callable[..., Any], x: Any, values: Sequence[Any] = ()) -> tuple[int, ...]:
    """The shape of ``f(x, *values)``, with NumPy arrays first, then in each
    installed array family (a function written for one library only).

    Raises:
        UsageError: ``f`` fails in every family.
    """
    import numpy as np

    from di.families import families, family_of
    from di.testing.arrays import to_numpy

    hub = family_of(np.empty(0))
    attempts: list[Callable[[Any], Any] | None] = [None]  # None: as they are (NumPy)
    for family in families():
        if family.name != hub and importlib.util.find_spec(family.module) is not None:
            attempts.append(family.from_numpy)
    last: Exception | None = None
    for from_numpy in attempts:

        def convert(value: Any, from_numpy: Callable[[Any], Any] | None = from_numpy) -> Any:
            return from_numpy(value) if from_numpy is not None and isinstance(value, np.ndarray) else value

        try:
            return tuple(np.shape(to_numpy(f(convert(x), *(convert(v) for v in values)))))
        except Exception as err:
            last = err
    raise UsageError(f"cannot evaluate the function at x: {type(last).__name__}: {last}")
