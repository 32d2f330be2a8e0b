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

__all__ = ["BUILTIN_ENGINES"]

BUILTIN_ENGINES: tuple[str, ...] = (
    "di.engines.jax:ENGINE",
    "di.engines.torch:ENGINE",
    "di.engines.autograd:ENGINE",
    "di.engines.tensorflow:ENGINE",
    "di.engines.mlx:ENGINE",
    "di.engines.pytensor:ENGINE",
    "di.engines.finitediff:ENGINE",
)
"""The ``"module:NAME"`` path of each built-in engine's record, in the order
:func:`di.available_backends` lists them."""
