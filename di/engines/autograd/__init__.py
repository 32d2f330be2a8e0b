"""HIPS autograd: its selector, adapter, ``DifferentiateWith`` host, and the array
namespace ``f`` computes with on autograd's traced values.

:data:`ENGINE` is the record the registries read; importing this package imports
neither autograd nor the adapter. autograd computes in NumPy's family.
"""

from __future__ import annotations

from di.backends.engine import Engine, NamespaceOverride
from di.engines.autograd.selector import AutoAutograd

__all__ = ["ENGINE"]

ENGINE = Engine(
    name="autograd",
    selectors=(AutoAutograd,),
    adapter="di.engines.autograd.adapter:AutogradAdapter",
    display="autograd",
    fastest=("autograd",),
    module="autograd",
    extra="autograd",
    host="di.engines.autograd.host:HOST",
    # array-api-compat answers autograd.numpy for autograd's boxes; its array-API names
    # (concat, vecdot, ...) are NumPy's functions, which drop the boxes: autograd would
    # silently return zeros. di answers a namespace whose functions autograd differentiates.
    namespace=NamespaceOverride(
        replaces="autograd.numpy.numpy_wrapper",
        build="di.engines.autograd.namespace:build_namespace",
        traced="autograd.tracer:Box",
        mixes_with="numpy",
    ),
    traced="di.engines.autograd.adapter:traced_values",
)
"""autograd's record."""
