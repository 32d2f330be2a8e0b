"""The backends to test every engine with, read from the engine registry.

A test suite that parametrises over :func:`engine_backends` runs on every
installed engine, including one registered later with
:func:`di.register_engine`, without an edit: each engine's record says which
selector is its default and which of its labelled selectors compile
(:attr:`~di.backends.engine.Engine.labels`,
:attr:`~di.backends.engine.Engine.compiled`).
"""

from __future__ import annotations

from di.backends.selectors import AbstractBackend, engines

__all__ = ["engine_backends"]


def engine_backends(*, compiled: bool = True, every_label: bool = False) -> list[AbstractBackend]:
    """The selectors of every installed engine, for a test matrix.

    Args:
        compiled: add each engine's compiled selectors: those its record declares
            ``compiled`` (the ones :class:`di.AutoFastest` measures with
            ``include_compiled``, cheap enough to compile in every test), after its
            default selector.
        every_label: give every labelled selector of each engine instead (other
            schemes, options, and compiled variants that cost seconds to compile).

    Returns:
        The selectors, engine by engine in the registry's order (the built-in
        engines first), each engine's default selector first; engines that are
        not installed, and engines without a labelled selector, are left out.

    Examples:
        >>> import di
        >>> from di.testing import engine_backends
        >>> engine_backends(compiled=False) == di.available_backends()
        True
        >>> di.AutoFiniteDiff(method="forward") in engine_backends(every_label=True)
        True
    """
    selectors: list[AbstractBackend] = []
    for engine in engines():
        labels = list(engine.labels)
        if not labels:
            continue
        chosen = labels if every_label else [labels[0], *(engine.compiled if compiled else ())]
        for label in chosen:
            selector = engine.labels[label]
            if selector.is_installed and selector not in selectors:
                selectors.append(selector)
    return selectors
