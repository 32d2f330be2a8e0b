"""The JAX family: ``jax.Array`` (concrete arrays; tracers are the engine's own).

JAX arrays are immutable: a NumPy buffer is copied into JAX (never aliased, so a
caller's later write cannot change it), and a JAX result is copied into NumPy
(the caller owns a writable array). 64-bit dtypes exist in JAX only inside
``jax.enable_x64``, which :meth:`JaxFamily.scope` enters for one conversion.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from di.errors import DistributedError
from di.families.family import Family, Matcher, by_numpy, extended_precision
from di.families.registry import is_64_bit

__all__ = ["FAMILY", "JaxFamily", "transform_of"]


_TRACES = {
    "DynamicJaxprTracer": "jax.jit (or a jax.lax.scan, jax.lax.while_loop or jax.lax.cond body)",
    "JaxprTracer": "jax.jit (or a jax.lax.scan, jax.lax.while_loop or jax.lax.cond body)",
    "BatchTracer": "jax.vmap",
    "JVPTracer": "jax.jvp (or jax.jacfwd)",
    "LinearizeTracer": "jax.grad (or jax.vjp, jax.jacrev)",
    "ShardMapTracer": "jax.shard_map",
}


def transform_of(value: Any) -> str:
    """The JAX transform tracing ``value`` (``"jax.vmap"``), or ``""`` for a
    concrete array. A tracer tells its kind, not the function that made it: a
    staged trace is ``jax.jit``'s or a control-flow body's, a linearizing one
    ``jax.grad``'s, ``jax.vjp``'s or ``jax.jacrev``'s, and so on."""
    jax_core = sys.modules.get("jax.core")
    if jax_core is None or not isinstance(value, jax_core.Tracer):
        return ""
    return _TRACES.get(type(value).__name__, "a JAX transform")


def _array_types() -> tuple[type, ...]:
    """What holds an abstract value: concrete JAX arrays and tracers."""
    import jax

    return (jax.Array, jax.core.Tracer)


def _readable_to_numpy(value: Any) -> np.ndarray:
    """``np.array(value)``, or :class:`di.DistributedError` for a JAX array with
    shards in other processes (``jax.distributed``)."""
    try:
        return np.array(value)
    except RuntimeError as err:
        if getattr(value, "is_fully_addressable", True):
            raise
        raise DistributedError(
            "a JAX array spanning devices of other processes (jax.distributed) cannot be read whole by any "
            "process, into NumPy or another engine's arrays. Differentiate global arrays with AutoJAX: x a JAX "
            "array on the mesh (jax.make_array_from_process_local_data) gives JAX arrays back; read a result on "
            "every process with jax.experimental.multihost_utils.process_allgather(result)."
        ) from err


def _default_device() -> Any:
    """The device JAX puts new arrays on (``jnp.array`` of a NumPy array)."""
    import jax

    default = getattr(jax.config, "jax_default_device", None)  # (not in its type stubs)
    if default is None or isinstance(default, str):  # (a platform's name)
        return jax.devices(default)[0]
    return default


class JaxFamily(Family):
    """JAX arrays, on any device or sharding."""

    name = "jax"
    display = "JAX"
    module = "jax"
    mutable = False

    def array_types(self, module: ModuleType) -> tuple[type, ...]:
        return (module.Array,)

    def foreign_leaves(self, value: Any) -> list[Any] | None:
        jax = sys.modules.get("jax")
        if jax is None:
            return None
        leaves = jax.tree_util.tree_leaves(value)
        return None if len(leaves) == 1 and leaves[0] is value else leaves

    @property
    def to_numpy(self) -> Callable[[Any], np.ndarray]:  # type: ignore[override]
        """A copy (the caller's array, writable). Results of every prepared call to a
        NumPy caller pass here, by a converter built once: NumPy's own function in
        one process, one that explains an array no process can read whole across
        several (read when a JAX array exists, so JAX's runtime is up)."""
        import jax

        return np.array if jax.process_count() == 1 else _readable_to_numpy

    def from_numpy(self, array: np.ndarray) -> Any:
        import jax.numpy as jnp

        array = np.asarray(array)
        with self.scope((array.dtype,)):
            return jnp.array(array, copy=True)

    def from_dlpack(self, value: Any) -> Any:
        # JAX only reads what it takes: a large host buffer is shared (a copy costs
        # more than the call at 1e6 elements), a small one copied through NumPy
        if by_numpy(value, shared=True):
            return NotImplemented
        import jax.dlpack

        with self.scope((value.dtype,)):
            return jax.dlpack.from_dlpack(value)

    def takes_dtype(self, dtype: Any) -> bool:
        return not extended_precision(dtype)  # JAX has no extended precision (np.longdouble)

    def device(self, value: Any) -> Any:
        return getattr(value, "sharding", None)

    def is_default_device(self, device: Any) -> bool:
        import jax

        devices = getattr(device, "device_set", None)  # (a sharding)
        return devices is not None and devices == {jax.devices("cpu")[0]}

    def placement(self, like: Any) -> Callable[[Any], Any] | None:
        import jax

        sharding = like.sharding
        devices = sharding.device_set
        if len(devices) == 1:
            (device,) = devices
            if device == _default_device():
                return None
            return lambda result: jax.device_put(result, device)
        # Several devices: a result shaped like x gets its sharding, another (a
        # Hessian, a value) is replicated over its devices.
        shape = like.shape
        mesh = jax.sharding.Mesh(np.array(sorted(devices, key=lambda d: d.id)), ("devices",))
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        return lambda result: jax.device_put(result, sharding if result.shape == shape else replicated)

    def describe_dtype(self, dtype: Any) -> str:
        return str(np.dtype(dtype))

    def matcher(self, value: Any) -> Matcher:
        # JAX shares one abstract value (aval: shape, dtype, weak type) between arrays alike: one
        # attribute where shape and dtype are two properties (about 0.4 us a strict prepared call).
        # A tracer (a call inside jax.jit, vmap, grad, scan) is another class with the same
        # abstract value (under vmap, the per-example one): it matches by that value.
        cls, aval = value.__class__, value.aval
        shape, dtype, weak = aval.shape, aval.dtype, aval.weak_type
        array_types = _array_types()

        sharding = getattr(aval, "sharding", None)
        if sharding is not None and not getattr(getattr(sharding, "mesh", None), "empty", True):
            # an array of a mesh with explicit axes: its programs run in that mesh, so an
            # array of another mesh (or the same axes made automatic) is not alike
            def alike(given: Any) -> bool:
                other = given.aval
                return other is aval or (
                    other.shape == shape
                    and other.dtype == dtype
                    and other.weak_type == weak
                    and getattr(other, "sharding", None) == sharding
                )

        else:

            def alike(given: Any) -> bool:
                other = given.aval
                return other is aval or (other.shape == shape and other.dtype == dtype and other.weak_type == weak)

        def matches(given: Any) -> bool:
            if given.__class__ is cls:
                return given.aval is aval or alike(given)
            return isinstance(given, array_types) and alike(given)

        return matches

    def shortcut(self, value: Any) -> tuple[type, str, Any] | None:
        # (an array alike shares value's abstract value: the matcher's own first test)
        return value.__class__, "aval", value.aval

    def key(self, value: Any) -> Any:
        aval = value.aval
        return ("jax", tuple(aval.shape), str(aval.dtype), bool(aval.weak_type))

    def traced_by(self, value: Any) -> str:
        return transform_of(value)

    def annotation(self, value: Any) -> str:
        notes = ["weakly typed"] if getattr(getattr(value, "aval", None), "weak_type", False) else []
        transform = transform_of(value)
        if transform:
            notes.append(f"traced by {transform}")
        return ", ".join(notes)

    def namespace(self) -> Any:
        import jax.numpy

        return jax.numpy

    def scope(self, dtypes: Sequence[Any] = ()) -> contextlib.AbstractContextManager[Any]:
        if any(is_64_bit(dtype) for dtype in dtypes):
            import jax

            return jax.enable_x64(True)  # type: ignore[no-any-return]
        return contextlib.nullcontext()

    def fused(self, function: Callable[..., Any]) -> Callable[..., Any]:
        import jax

        return jax.jit(function)  # type: ignore[no-any-return]

    def astype(self, array: Any, dtype_name: str) -> Any:
        with self.scope((dtype_name,)):
            return array.astype(dtype_name)

    def sparse_matrix(self, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> Callable[[Any], Any]:
        import jax.numpy as jnp
        from jax.experimental import sparse as jsparse

        rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        coordinates = jnp.asarray(np.stack([rows, indices], axis=1).astype(np.int32))

        def bcoo(data: Any) -> Any:
            return jsparse.BCOO((data, coordinates), shape=shape, indices_sorted=True, unique_indices=True)

        return bcoo

    def sparse_to_numpy(self, value: Any) -> np.ndarray | None:
        jax_sparse = sys.modules.get("jax.experimental.sparse")
        if jax_sparse is None or not isinstance(value, jax_sparse.JAXSparse):
            return None
        with self.scope((value.dtype,)):
            return np.asarray(value.todense())

    def sparse_to_scipy(self, value: Any) -> Any:
        jax_sparse = sys.modules.get("jax.experimental.sparse")
        if jax_sparse is None or not isinstance(value, jax_sparse.JAXSparse):
            return None
        import scipy.sparse as sp

        if not isinstance(value, jax_sparse.BCOO) or value.n_batch or value.n_dense or value.ndim != 2:
            return sp.csr_array(self.sparse_to_numpy(value))  # batched or dense blocks: through dense
        with self.scope((value.dtype,)):
            indices, data = np.asarray(value.indices), np.asarray(value.data)
        # (BCOO pads with out-of-range indices; coo_array sums duplicates, as BCOO's todense does)
        inside = (indices[:, 0] < value.shape[0]) & (indices[:, 1] < value.shape[1])
        coo = sp.coo_array((data[inside], (indices[inside, 0], indices[inside, 1])), shape=value.shape)
        return sp.csr_array(coo)

    def index(self, positions: np.ndarray) -> Any:
        return positions.astype(np.int32) if positions.size < 2**31 else positions

    def gather(self, values: Any, positions: Any) -> Any:
        # Indexing with constant NumPy positions: jnp.take's default fill mode made a
        # one-color prepared Hessian's call (n = 100) 15.3 us against 8.2 us of CPU.
        return values[positions]

    def whole(self, value: Any) -> Any:
        from di.engines.jax.meshes import replicated

        return replicated(value)

    def scatter(self, data: Any, positions: Any, size: int) -> Any:
        import jax.numpy as jnp

        with self.scope((data.dtype,)):
            return jnp.zeros(size, data.dtype).at[positions].set(data)

    def block(self, value: Any) -> None:
        block_until_ready = getattr(value, "block_until_ready", None)
        if block_until_ready is not None:
            block_until_ready()


FAMILY = JaxFamily()
