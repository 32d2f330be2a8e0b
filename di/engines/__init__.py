"""The engines that come with ``di``, one package each.

Each package holds all of its engine's code (selector, adapter, array family,
``DifferentiateWith`` host, namespace override) and, in its ``__init__``, the
one :class:`~di.backends.engine.Engine` record that describes it. This list is
all ``di`` knows of them: the registry registers these records the first time it
is asked, through :func:`di.register_engine`, exactly as an engine from outside
registers its own, and ``di.AutoJAX`` and the like are found through them. An
engine added in tree is its folder, one line here and one in ``di/__init__.py``
(its selector's import for type checkers); ``tests/test_layering.py`` holds it.
"""

from __future__ import annotations

__all__ = ["BUILTIN_ENGINES", "BUILTIN_REPLACED_NAMESPACES"]

_BUILTIN: tuple[tuple[str, str | None], ...] = (
    # (the record's path, and the namespace its record replaces in di.array_namespace, if any)
    ("di.engines.jax:ENGINE", None),
    ("di.engines.torch:ENGINE", None),
    ("di.engines.autograd:ENGINE", "autograd.numpy.numpy_wrapper"),
    ("di.engines.tensorflow:ENGINE", "tensorflow"),
    ("di.engines.mlx:ENGINE", "mlx.core"),
    ("di.engines.pytensor:ENGINE", "pytensor.tensor"),
    ("di.engines.finitediff:ENGINE", None),
)

BUILTIN_ENGINES: tuple[str, ...] = tuple(path for path, _ in _BUILTIN)
"""The ``"module:NAME"`` path of each built-in engine's record, in the order
:func:`di.available_backends` lists them."""

BUILTIN_REPLACED_NAMESPACES: frozenset[str] = frozenset(name for _, name in _BUILTIN if name is not None)
"""The namespaces (by ``__name__``) the built-in engines' records replace in
:func:`di.array_namespace` (each record's ``namespace.replaces``), known before the
records are loaded: until an engine is registered, an array of any other namespace
is answered without loading them, so that a ``torch.compile`` trace of ``f`` met
before any use of ``di`` does not load them (their loading takes a lock, which
dynamo cannot trace). ``tests/test_namespace.py`` keeps it equal to the records'."""
