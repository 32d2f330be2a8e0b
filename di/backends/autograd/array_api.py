"""What :func:`di.array_namespace` needs to know of autograd, without importing it.

array-api-compat answers ``autograd.numpy`` for autograd's traced values
(``ArrayBox``); its array-API names (``concat``, ``vecdot``, ...) are NumPy's
functions, which autograd never learned to differentiate: they drop the boxes,
and autograd silently returns zeros. :mod:`di.namespace` finds this table (it
lists the engine packages for an ``array_api`` module) and answers instead the
namespace :mod:`di.backends.autograd.namespace` builds, whose functions autograd
differentiates. Nothing here imports autograd: the traced-value class is looked
up only once autograd is loaded (a traced value cannot exist before).
"""

from __future__ import annotations

__all__ = ["ARRAY_NAMESPACES"]

ARRAY_NAMESPACES: dict[str, dict[str, str]] = {
    "autograd.numpy.numpy_wrapper": {
        "build": "di.backends.autograd.namespace:build_namespace",
        "traced": "autograd.tracer:Box",
        "mixes_with": "numpy",
    },
}
"""array-api-compat's namespace name -> ``build``: the ``module:function`` making
di's namespace; ``traced``: the ``module:Class`` of the engine's traced values
(recognised even where array-api-compat refuses them beside other arrays);
``mixes_with``: the array family they may be mixed with in one call."""
