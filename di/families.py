"""Array families: detection without importing engines, and conversion between them.

An *array family* is one of ``"numpy"``, ``"torch"`` or ``"jax"``. Detection looks
only at modules that are already imported (``sys.modules``), as array-api-compat
does: a torch tensor cannot exist unless torch was imported, so ``di`` never needs
to import an engine to recognise its arrays.

Conversions are zero-copy where the engines allow it (numpy<->torch through
``from_numpy``/``.numpy()``, torch<->jax through DLPack, jax->numpy through
``np.asarray``, which gives a read-only view). numpy->jax copies: JAX treats its
arrays as immutable, so a caller's mutable buffer must never be aliased into one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "ArraySpec",
    "converter",
    "family_of",
    "is_floating_dtype",
    "spec_of",
]

NUMPY = "numpy"
TORCH = "torch"
JAX = "jax"
FAMILIES = (NUMPY, TORCH, JAX)

_FAMILY_BY_TYPE: dict[type, str | None] = {np.ndarray: NUMPY}


def family_of(value: Any) -> str | None:
    """Return the array family of ``value``, or ``None`` if it is not an array.

    No engine is imported: torch and jax arrays are only recognised once their
    engine is in ``sys.modules``, which it must be for such an array to exist.
    numpy scalars (``np.float64(1.0)``) count as numpy arrays.

    Args:
        value: any object.

    Returns:
        ``"numpy"``, ``"torch"``, ``"jax"`` or ``None``.

    Examples:
        >>> import numpy as np
        >>> from di.families import family_of
        >>> family_of(np.zeros(3)), family_of(2.0)
        ('numpy', None)
    """
    cls = type(value)
    try:
        return _FAMILY_BY_TYPE[cls]
    except KeyError:
        family = _classify(cls)
        if family is not None or len(_FAMILY_BY_TYPE) < 256:
            _FAMILY_BY_TYPE[cls] = family
        return family


def _classify(cls: type) -> str | None:
    if issubclass(cls, (np.ndarray, np.generic)):
        return NUMPY
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(cls, torch.Tensor):
        return TORCH
    jax = sys.modules.get("jax")
    if jax is not None and issubclass(cls, jax.Array):
        return JAX
    return None


def is_floating_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` (of any family) is a real floating-point type.

    Args:
        dtype: a numpy, torch or jax dtype.

    Returns:
        ``True`` for float16, bfloat16, float32, float64 (and other real floats).

    Examples:
        >>> import numpy as np
        >>> from di.families import is_floating_dtype
        >>> is_floating_dtype(np.float32), is_floating_dtype(np.int64)
        (True, False)
    """
    is_floating_point = getattr(dtype, "is_floating_point", None)
    if isinstance(is_floating_point, bool):  # torch.dtype
        return is_floating_point
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        return False
    if np_dtype.kind == "f":
        return True
    return np_dtype.kind == "V" and "bfloat16" in np_dtype.name  # ml_dtypes.bfloat16


class ArraySpec:
    """What a prep remembers about one array: family, shape, dtype, device.

    It holds no data, only metadata, so a prep never keeps a caller's array alive.

    Args:
        family: the array family.
        shape: the shape, as a tuple of ints.
        dtype: the family's own dtype object.
        device: the device (``None`` for numpy; a ``torch.device`` or a
            ``jax.Device``/sharding description otherwise).

    Examples:
        >>> import numpy as np
        >>> from di.families import spec_of
        >>> spec_of(np.zeros((2, 3), dtype=np.float32))
        ArraySpec(numpy float32 (2, 3))
    """

    __slots__ = ("device", "dtype", "family", "shape")

    def __init__(self, family: str, shape: tuple[int, ...], dtype: Any, device: Any) -> None:
        self.family = family
        self.shape = shape
        self.dtype = dtype
        self.device = device

    def describe(self) -> str:
        """One-line human description, used in mismatch reports."""
        dtype = str(self.dtype).replace("torch.", "")
        device = "" if self.device is None or str(self.device) in ("cpu", "TFRT_CPU_0") else f" on {self.device}"
        return f"{self.family} {dtype} {self.shape}{device}"

    def __repr__(self) -> str:
        return f"ArraySpec({self.describe()})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ArraySpec)
            and self.family == other.family
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.device == other.device
        )

    def __hash__(self) -> int:
        return hash((self.family, self.shape, str(self.dtype), str(self.device)))


def device_of(value: Any, family: str) -> Any:
    """The device of an array: ``None`` for numpy, ``tensor.device`` for torch,
    the set of devices (or sharding) for jax."""
    if family == TORCH:
        return value.device
    if family == JAX:
        return getattr(value, "sharding", None)
    return None


def spec_of(value: Any) -> ArraySpec:
    """Describe an array.

    Args:
        value: a numpy, torch or jax array.

    Returns:
        Its :class:`ArraySpec`.

    Raises:
        TypeError: ``value`` is not an array of a known family.

    Examples:
        >>> import numpy as np
        >>> from di.families import spec_of
        >>> spec_of(np.float64(1.0)).shape
        ()
    """
    family = family_of(value)
    if family is None:
        raise TypeError(f"not an array: {type(value).__name__}")
    if family == NUMPY and isinstance(value, np.generic):
        value = np.asarray(value)
    return ArraySpec(family, tuple(value.shape), value.dtype, device_of(value, family))


# --- conversion -----------------------------------------------------------------


def identity(value: Any) -> Any:
    return value


def numpy_to_torch(value: Any) -> Any:
    """numpy -> torch, sharing memory when numpy's layout allows it."""
    import torch

    array = np.asarray(value)
    if array.flags.writeable and all(s >= 0 for s in array.strides):
        return torch.from_numpy(array)
    # torch cannot alias read-only or negatively strided memory: copy.
    return torch.from_numpy(np.array(array, copy=True))


def torch_to_numpy(value: Any) -> Any:
    """torch -> numpy, zero-copy for CPU tensors (detached first). bfloat16, which
    numpy lacks, comes out as float32."""
    tensor = value.detach().cpu().resolve_conj().resolve_neg()
    if str(tensor.dtype) == "torch.bfloat16":
        tensor = tensor.float()
    return tensor.numpy()


def is_64_bit(dtype: Any) -> bool:
    """Whether a dtype of any family (or its name) has 8-byte elements: what JAX
    only keeps inside ``jax.enable_x64``."""
    return np.dtype(str(dtype).replace("torch.", "").replace("bfloat16", "float16")).itemsize == 8


def jax_scope(dtype: Any) -> Any:
    """``jax.enable_x64(True)`` for 64-bit dtypes (JAX otherwise makes them 32-bit),
    scoped to one conversion; a no-op scope for the others."""
    import contextlib

    import jax

    if is_64_bit(dtype):
        return jax.enable_x64(True)
    return contextlib.nullcontext()


def torch_to_jax(value: Any) -> Any:
    """torch -> jax through DLPack (zero-copy for contiguous tensors)."""
    import jax.dlpack

    tensor = value.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    with jax_scope(tensor.dtype):
        return jax.dlpack.from_dlpack(tensor)


def jax_to_torch(value: Any) -> Any:
    """jax -> torch through DLPack (zero-copy)."""
    import torch

    return torch.from_dlpack(value)


def jax_to_numpy(value: Any) -> Any:
    """jax -> numpy; on CPU a read-only view of the jax buffer."""
    return np.asarray(value)


def numpy_to_jax(value: Any) -> Any:
    """numpy -> jax; copies (jax arrays are immutable, so a caller's mutable buffer
    must not be aliased). Call inside ``jax.enable_x64(True)`` to keep float64."""
    import jax.numpy as jnp

    with jax_scope(np.asarray(value).dtype):
        return jnp.array(value, copy=True)


_CONVERTERS: dict[tuple[str, str], Callable[[Any], Any]] = {
    (NUMPY, TORCH): numpy_to_torch,
    (TORCH, NUMPY): torch_to_numpy,
    (TORCH, JAX): torch_to_jax,
    (JAX, TORCH): jax_to_torch,
    (JAX, NUMPY): jax_to_numpy,
    (NUMPY, JAX): numpy_to_jax,
}


def converter(source: str | None, target: str) -> Callable[[Any], Any]:
    """The function converting arrays of family ``source`` to family ``target``.

    Args:
        source: family of the input, or ``None`` for non-array values (which pass
            through unchanged).
        target: family wanted.

    Returns:
        A one-argument function; the identity when no conversion is needed.

    Examples:
        >>> import numpy as np
        >>> from di.families import converter
        >>> converter("numpy", "numpy")(np.ones(2))
        array([1., 1.])
    """
    if source is None or source == target:
        return identity
    return _CONVERTERS[(source, target)]


class ArrayOps:
    """The few array operations the generic operator fallbacks need, for one family.

    Args:
        family: ``"numpy"``, ``"torch"`` or ``"jax"``.

    Examples:
        >>> import numpy as np
        >>> from di.families import ArrayOps
        >>> ArrayOps("numpy").stack([np.ones(2), np.zeros(2)]).shape
        (2, 2)
    """

    __slots__ = ("family", "module")

    def __init__(self, family: str) -> None:
        self.family = family
        if family == TORCH:
            import torch

            self.module: Any = torch
        elif family == JAX:
            import jax.numpy as jnp

            self.module = jnp
        else:
            self.module = np

    def stack(self, arrays: Any, axis: int = 0) -> Any:
        """Stack arrays along a new axis."""
        if self.family == TORCH:
            return self.module.stack(list(arrays), dim=axis)
        return self.module.stack(list(arrays), axis=axis)

    def tensordot(self, a: Any, b: Any, axes: int) -> Any:
        """Contract the last ``axes`` axes of ``a`` with the first ``axes`` of ``b``."""
        if self.family == TORCH:
            return self.module.tensordot(a, b, dims=axes)
        return self.module.tensordot(a, b, axes=axes)

    def unstack(self, array: Any) -> tuple[Any, ...]:
        """Split along the first axis."""
        return tuple(array[i] for i in range(array.shape[0]))
