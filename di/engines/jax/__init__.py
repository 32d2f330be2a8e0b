"""JAX: its selector, adapter, array family and ``DifferentiateWith`` host.

:data:`ENGINE` is the record the registries read; importing this package imports
neither JAX nor the adapter.
"""

from __future__ import annotations

from di.backends.engine import Engine
from di.engines.jax.selector import AutoJAX

__all__ = ["ENGINE"]

ENGINE = Engine(
    name="jax",
    selectors=(AutoJAX,),
    adapter="di.engines.jax.adapter:JAXAdapter",
    display="JAX",
    labels={"jax": AutoJAX(), "jax-jit": AutoJAX(jit=True)},
    fastest=("jax-jit", "jax"),
    compiled=("jax-jit",),
    default_for=("AutoSparse.dense",),
    module="jax",
    extra="jax",
    distributions=("jax", "jaxlib"),
    family="di.engines.jax.family:FAMILY",
    host="di.engines.jax.host:HOST",
    processes="di.engines.jax.meshes:processes_of",
)
"""JAX's record: ``AutoSparse()``'s default dense backend; ``AutoFastest``
measures ``AutoJAX(jit=True)`` and ``AutoJAX()`` by default."""
