"""JAX arrays on meshes, and across processes (``jax.distributed``).

An array sharded over a mesh whose axes are *explicit* (``jax.make_mesh``'s
default) carries its sharding in its type: eager JAX then computes a scalar
(a loss) on that mesh only inside the mesh's context, ``jax.set_mesh`` (JAX's
"Length of device assignment 1 is not equal to the size of the mesh" otherwise),
and an indexing gather needs its output's sharding. :func:`explicit_mesh` finds
the mesh, :func:`in_mesh` runs an eager program in it, :func:`replicated` gives
an array whose indexing needs no sharding choice.

An array spanning several processes (after ``jax.distributed.initialize``) is
read back only where it is addressable: :func:`processes_of` answers the
:class:`~di.backends.processes.Processes` of such values, whose decisions are
broadcast from process 0 (``multihost_utils.broadcast_one_to_all``) and whose
results are compared by their process-local shards.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from di.backends.processes import Processes

__all__ = ["JAXProcesses", "MeshScope", "explicit_mesh", "in_mesh", "processes_of", "replicated", "spans_processes"]


def _concrete_leaves(values: Sequence[Any]) -> list[Any]:
    return [
        leaf
        for leaf in jax.tree_util.tree_leaves(list(values))
        if isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer)
    ]


try:
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - another JAX layout

    def _trace_state_clean() -> bool:
        return True


def explicit_mesh(values: Sequence[Any]) -> Any:
    """The mesh of the first concrete array among ``values`` (pytree leaves)
    sharded over a mesh with explicit axes, or ``None``."""
    for leaf in _concrete_leaves(values):
        mesh = getattr(leaf.sharding, "mesh", None)
        if mesh is not None and getattr(mesh, "explicit_axes", None):
            return mesh
    return None


def in_mesh(program: Callable[..., Any], mesh: Any) -> Callable[..., Any]:
    """``program`` run inside ``jax.set_mesh(mesh)``, which eager JAX needs for
    arrays of a mesh with explicit axes (entered only where no mesh is set)."""

    @functools.wraps(program)
    def meshed(*args: Any) -> Any:
        if not jax.sharding.get_abstract_mesh().empty or not _trace_state_clean():
            return program(*args)  # a mesh set already, or traced into a program (compiled in its mesh)
        with jax.set_mesh(mesh):
            return program(*args)

    return meshed


def replicated(value: Any) -> Any:
    """``value`` (concrete or traced) whole on every device of its mesh when its
    type carries an explicit sharding, so that reshaping and indexing it need no
    output sharding; otherwise ``value`` itself."""
    sharding = jax.typeof(value).sharding
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or not getattr(mesh, "explicit_axes", None) or all(part is None for part in sharding.spec):
        return value
    return jax.sharding.reshard(value, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


def spans_processes(value: Any) -> bool:
    """Whether ``value`` is a concrete JAX array some of whose shards live in other processes."""
    return isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer) and not value.is_fully_addressable


class JAXProcesses(Processes):
    """The processes of a JAX multi-process run (``jax.distributed``)."""

    def __init__(self) -> None:
        super().__init__(jax.process_count(), jax.process_index(), "JAX multi-process")

    def broadcast_text(self, text: str) -> str:
        from jax.experimental import multihost_utils

        data = np.frombuffer(text.encode(), dtype=np.uint8)
        length = multihost_utils.broadcast_one_to_all(np.array([data.size], dtype=np.int32))
        padded = np.zeros(int(np.asarray(length)[0]), dtype=np.uint8)
        padded[: min(data.size, padded.size)] = data[: padded.size]
        return bytes(np.asarray(multihost_utils.broadcast_one_to_all(padded), dtype=np.uint8)).decode()

    def local(self, result: Any) -> Any:
        def part(leaf: Any) -> Any:
            if not spans_processes(leaf):
                return leaf
            shards = sorted(leaf.addressable_shards, key=lambda shard: shard.device.id)
            return np.concatenate([np.asarray(shard.data).reshape(-1) for shard in shards])

        return jax.tree_util.tree_map(part, result)


def processes_of(values: Sequence[Any]) -> JAXProcesses | None:
    """:class:`JAXProcesses` when a value spans processes, else ``None`` (asked
    of JAX's runtime only when a value is a JAX array: asking starts it)."""
    leaves = _concrete_leaves(values)
    if not leaves or jax.process_count() == 1:
        return None
    return JAXProcesses() if any(spans_processes(leaf) for leaf in leaves) else None


class MeshScope:
    """The scope of a call on arrays of a mesh with explicit axes: the mesh's
    context (:func:`in_mesh`), and ``enable_x64`` where the inputs are 64-bit.
    Called, it returns the context manager (an adapter's ``scope``)."""

    __slots__ = ("mesh", "x64")

    def __init__(self, mesh: Any, x64: bool) -> None:
        self.mesh = mesh
        self.x64 = x64

    def __call__(self) -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        if jax.sharding.get_abstract_mesh().empty and _trace_state_clean():
            stack.enter_context(jax.set_mesh(self.mesh))  # type: ignore[arg-type]
        if self.x64 and not jax.enable_x64.value:
            stack.enter_context(jax.enable_x64(True))
        return stack
