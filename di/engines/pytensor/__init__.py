"""PyTensor: its selector, adapter, ``DifferentiateWith`` host, and the array
namespace ``f`` computes with on PyTensor's symbolic variables.

:data:`ENGINE` is the record the registries read; importing this package imports
neither PyTensor nor the adapter. PyTensor's compiled functions take and return
NumPy arrays: it computes in NumPy's family, and its symbolic variables, which
exist only while ``f`` is applied at preparation, are its traced values.
"""

from __future__ import annotations

from di.backends.engine import Engine, NamespaceOverride
from di.engines.pytensor.selector import AutoPyTensor

__all__ = ["ENGINE"]

ENGINE = Engine(
    name="pytensor",
    selectors=(AutoPyTensor,),
    adapter="di.engines.pytensor.adapter:PyTensorAdapter",
    display="PyTensor",
    # FAST_COMPILE first: the default selector of the lists and test matrices compiles in
    # milliseconds (PyTensor's default, Numba, takes a second or more per new graph)
    labels={"pytensor(mode='FAST_COMPILE')": AutoPyTensor(mode="FAST_COMPILE"), "pytensor": AutoPyTensor()},
    fastest=("pytensor(mode='FAST_COMPILE')",),
    module="pytensor",
    extra="pytensor",
    host="di.engines.pytensor.host:HOST",
    # array-api-compat knows no namespace for PyTensor's variables: di answers one over
    # pytensor.tensor, with the array API's names mapped onto PyTensor's functions.
    namespace=NamespaceOverride(
        replaces="pytensor.tensor",
        build="di.engines.pytensor.namespace:build_namespace",
        traced="pytensor.graph.basic:Variable",
        mixes_with="numpy",
    ),
    traced="di.engines.pytensor.adapter:traced_values",
)
"""PyTensor's record."""
