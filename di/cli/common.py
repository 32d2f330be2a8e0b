"""What every command shares: exit statuses, usage errors, and reading option values."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
    "EXIT_DISAGREE",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "add_engine_option",
    "default_backends",
    "parse_backends",
    "parse_shape",
    "parse_sizes",
    "split",
]

EXIT_OK, EXIT_DISAGREE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A mistake on the command line or in what it names (exit status 2)."""


def split(text: str) -> list[str]:
    """Split on commas outside parentheses.

    Examples:
        >>> from di.cli.common import split
        >>> split("jax, finitediff(step=1e-3, method='forward'),torch")
        ['jax', "finitediff(step=1e-3, method='forward')", 'torch']
    """
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    """``--engine MODULE:NAME``: an engine from outside ``di``, registered before ``--backends`` is read."""
    parser.add_argument(
        "--engine",
        dest="engines",
        action="append",
        metavar="MODULE:NAME",
        help="register the engine whose record (a di.backends.engine.Engine) is NAME in MODULE (a dotted module or "
        "a path to a .py file) before reading --backends; repeat it for several engines",
    )


def default_backends() -> list[Any]:
    """Every installed engine's default selector, each followed by the variants of
    it that :class:`di.AutoFastest` considers by default (the compiled ones).

    Examples:
        >>> import di
        >>> from di.cli.common import default_backends
        >>> di.AutoFiniteDiff() in default_backends()
        True
    """
    import di

    installed = list(di.available_backends())
    variants = [b for b in di.AutoFastest().default_candidates() if b not in installed]
    backends: list[Any] = []
    for backend in installed:
        backends.append(backend)
        backends += [v for v in variants if type(v) is type(backend) and v not in backends]
    return backends


def parse_backends(text: str | None) -> list[Any]:
    """The selectors of a ``--backends`` value (labels, comma-separated), or the
    :func:`default_backends` when it is empty.

    Raises:
        UsageError: an unknown label; the message lists the known ones.

    Examples:
        >>> from di.cli.common import parse_backends
        >>> parse_backends("finitediff,finitediff-forward")
        [AutoFiniteDiff(method='central', step=None), AutoFiniteDiff(method='forward', step=None)]
    """
    from di.testing import parse_backend

    if not text:
        return default_backends()
    try:
        return [parse_backend(part) for part in split(text)]
    except ValueError as err:
        raise UsageError(f"--backends: {err}") from err


def parse_sizes(text: str) -> list[int]:
    """The sizes of a ``--sizes`` value, sorted, without repeats.

    Raises:
        UsageError: not positive integers.

    Examples:
        >>> from di.cli.common import parse_sizes
        >>> parse_sizes("1000,10,1e2")
        [10, 100, 1000]
    """
    try:
        sizes = [int(float(part)) for part in split(text)]
    except ValueError as err:
        raise UsageError(f"--sizes must be comma-separated integers, not {text!r}") from err
    if not sizes or any(s < 1 for s in sizes):
        raise UsageError("--sizes must be positive integers")
    return sorted(set(sizes))


def parse_shape(text: str, option: str = "--x-shape") -> tuple[int, ...]:
    """A shape written ``100``, ``3,4``, ``3x4`` or ``(3, 4)``; ``''`` or ``scalar`` for ``()``.

    Raises:
        UsageError: not integers, or a negative one.

    Examples:
        >>> from di.cli.common import parse_shape
        >>> parse_shape("3x4"), parse_shape("")
        ((3, 4), ())
    """
    text = text.strip().strip("()")
    if text in ("", "scalar"):
        return ()
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError as err:
        raise UsageError(f"{option} must be comma-separated integers such as 100 or 3,4, not {text!r}") from err
    if any(size < 0 for size in shape):
        raise UsageError(f"{option} must be sizes >= 0, not {text!r}")
    return shape
