"""The torch family: ``torch.Tensor`` (and its subclasses), on any device."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from di.families.family import Family, Matcher, by_numpy, extended_precision, numpy_lacks

__all__ = ["FAMILY", "TorchFamily", "family_class", "innermost_transform", "transform_of"]

_FAMILY_CLASSES: dict[type, type] = {}


def family_class(cls: type) -> type:
    """The class a prep compares a tensor of class ``cls`` by: ``torch.Tensor`` for
    the plain tensor and subclasses that only tag it (``nn.Parameter``, a user's
    subclass), which are tensors like any other to every engine; a subclass that
    dispatches operators itself (``DTensor``, a fake or wrapped tensor) is its own.

    Examples:
        >>> import torch
        >>> from di.engines.torch.family import family_class
        >>> family_class(torch.nn.Parameter) is torch.Tensor, family_class(float) is float
        (True, True)
    """
    try:
        return _FAMILY_CLASSES[cls]
    except KeyError:
        pass
    torch = sys.modules.get("torch")
    kind = cls
    if (
        torch is not None
        and issubclass(cls, torch.Tensor)
        and cls.__torch_dispatch__ is torch.Tensor.__torch_dispatch__  # type: ignore[attr-defined]
    ):
        kind = torch.Tensor
    if len(_FAMILY_CLASSES) < 1024:
        _FAMILY_CLASSES[cls] = kind
    return kind


_TRANSFORM_NAMES = {
    "Vmap": "torch.func.vmap",
    "Grad": "torch.func.grad (or torch.func.vjp, torch.func.jacrev)",
    "Jvp": "torch.func.jvp (or torch.func.jacfwd)",
}


def innermost_transform() -> str:
    """The innermost active ``torch.func`` transform, as a user writes it
    (``"torch.func.vmap"``; ``jacrev`` and ``vjp`` are ``grad`` levels, ``jacfwd``
    ``jvp`` ones), or ``""`` when none is active."""
    functorch = sys.modules["torch"]._C._functorch
    interpreter = functorch.peek_interpreter_stack()
    if interpreter is None:
        return ""
    kind = str(interpreter.key()).rsplit(".", 1)[-1]
    return _TRANSFORM_NAMES.get(kind, f"torch.func ({kind.lower()})")


def transform_of(tensor: Any) -> str:
    """The ``torch.func`` transform a tensor is wrapped by (``""`` for a plain one)."""
    if not sys.modules["torch"]._C._functorch.is_functorch_wrapped_tensor(tensor):
        return ""
    return innermost_transform() or "a torch.func transform"


def _bfloat16_to_numpy(tensor: Any) -> np.ndarray:
    """A bfloat16 CPU tensor as a NumPy array of ml_dtypes' bfloat16, by its bits
    (as :meth:`TorchFamily.from_numpy` takes one); in float32 where ml_dtypes is
    not installed (NumPy itself has no bfloat16)."""
    try:
        import ml_dtypes
    except ImportError:
        return tensor.float().numpy()  # type: ignore[no-any-return]
    return tensor.view(sys.modules["torch"].int16).numpy().view(ml_dtypes.bfloat16)  # type: ignore[no-any-return]


class TorchFamily(Family):
    """torch tensors. NumPy converts both ways without copying (``from_numpy``,
    ``.numpy()``); tensors on an accelerator reach another DLPack library
    without passing through the host."""

    name = "torch"
    display = "PyTorch"
    module = "torch"

    def array_types(self, module: ModuleType) -> tuple[type, ...]:
        return (module.Tensor,)

    def to_numpy(self, value: Any) -> np.ndarray:
        try:  # the common case, a CPU tensor with nothing to resolve, in one call
            return value.numpy()  # type: ignore[no-any-return]
        except (RuntimeError, TypeError):  # it requires grad, is on a device, has a conj/neg bit, is bfloat16
            pass
        tensor = value.detach().cpu().resolve_conj().resolve_neg()
        if tensor.dtype is sys.modules["torch"].bfloat16:
            return _bfloat16_to_numpy(tensor)
        # (force: a ZeroTensor, which forward mode gives for a zero derivative under vmap,
        # as torch.func.vmap of jacfwd(jacfwd(f)) of a linear f does, becomes its zeros)
        return tensor.numpy(force=True)  # type: ignore[no-any-return]

    def from_numpy(self, array: np.ndarray) -> Any:
        import torch

        array = np.asarray(array)
        if numpy_lacks(array.dtype):  # ml_dtypes' bfloat16 (from JAX): torch takes its bits
            return torch.from_numpy(np.array(array, copy=True).view(np.uint16)).view(torch.bfloat16)
        if array.flags.writeable:
            try:
                return torch.from_numpy(array)
            except ValueError:  # negative strides
                pass
        # torch cannot alias read-only or negatively strided memory: copy.
        return torch.from_numpy(np.array(array, copy=True))

    def from_dlpack(self, value: Any) -> Any:
        if by_numpy(value):
            return NotImplemented
        import torch

        return torch.from_dlpack(value)

    def dlpack_source(self, value: Any) -> Any:
        tensor = value.detach()
        return tensor if tensor.is_contiguous() else tensor.contiguous()

    def takes_dtype(self, dtype: Any) -> bool:
        return not extended_precision(dtype)  # torch has no extended precision (np.longdouble)

    def device(self, value: Any) -> Any:
        return value.device

    def is_default_device(self, device: Any) -> bool:
        return getattr(device, "type", str(device)) == "cpu"

    def describe_dtype(self, dtype: Any) -> str:
        return str(dtype).replace("torch.", "")

    def is_floating(self, dtype: Any) -> bool:
        return bool(dtype.is_floating_point)

    def matcher(self, value: Any) -> Matcher:
        # The class compared first by identity (the hot path), then as its family's: an
        # nn.Parameter is a tensor like the plain one a prep was made with.
        cls, shape, dtype, device = value.__class__, value.shape, value.dtype, value.device
        kind = family_class(cls)
        if device.type == "cpu":
            return lambda given: (
                (given.__class__ is cls or family_class(given.__class__) is kind)
                and given.shape == shape
                and given.dtype == dtype
                and given.is_cpu
            )
        return lambda given: (
            (given.__class__ is cls or family_class(given.__class__) is kind)
            and given.shape == shape
            and given.dtype == dtype
            and given.device == device
        )

    def leaves_matcher(self, values: Sequence[Any]) -> Callable[[Sequence[Any]], bool]:
        # One loop reading each tensor's fields inline (a model's parameters, checked at
        # every call): a call of a matcher per tensor costs about as much as its reads.
        # torch's dtypes are singletons, compared by identity.
        specs = tuple((value.__class__, value.shape, value.dtype) for value in values)
        devices = tuple(value.device for value in values)
        if all(device.type == "cpu" for device in devices):

            def on_cpu(given: Sequence[Any]) -> bool:
                for tensor, (cls, shape, dtype) in zip(given, specs):
                    if tensor.__class__ is not cls and family_class(tensor.__class__) is not family_class(cls):
                        return False
                    if tensor.dtype is not dtype or not tensor.is_cpu or tensor.shape != shape:
                        return False
                return True

            return on_cpu

        def on_devices(given: Sequence[Any]) -> bool:
            for tensor, (cls, shape, dtype), device in zip(given, specs, devices):
                if tensor.__class__ is not cls and family_class(tensor.__class__) is not family_class(cls):
                    return False
                if tensor.dtype is not dtype or tensor.device != device or tensor.shape != shape:
                    return False
            return True

        return on_devices

    def key(self, value: Any) -> Any:
        return (family_class(value.__class__), tuple(value.shape), value.dtype, value.device)

    def traced_by(self, value: Any) -> str:
        return transform_of(value)

    def annotation(self, value: Any) -> str:
        transform = transform_of(value)
        return f"traced by {transform}" if transform else ""

    def namespace(self) -> Any:
        import array_api_compat.torch

        return array_api_compat.torch

    def astype(self, array: Any, dtype_name: str) -> Any:
        import torch

        return array.to(getattr(torch, dtype_name))

    def write_out(self, out: Any, result: Any) -> Any:
        out.detach().copy_(result)
        return out

    def read_only(self, array: Any) -> bool | str:
        """An expanded tensor (a stride of 0 along a dimension longer than 1:
        several elements at one memory location) refuses writes: torch's copy
        into it raises, after the work.

        Examples:
            >>> import torch
            >>> from di.engines.torch.family import FAMILY
            >>> bool(FAMILY.read_only(torch.zeros(1).expand(3))), FAMILY.read_only(torch.zeros(3, 2).t())
            (True, False)
        """
        torch = sys.modules["torch"]
        try:  # 1: yes, 0: no, 2: too hard to tell (torch writes then, as it does)
            overlaps = int(torch._debug_has_internal_overlap(array)) == 1
        except (AttributeError, RuntimeError):  # (a private function: the stride test where it is gone)
            overlaps = any(stride == 0 and size > 1 for stride, size in zip(array.stride(), array.shape))
        if overlaps:
            return (
                "an expanded torch tensor: several of its elements share one memory location (a stride of 0), "
                "and torch cannot write into it"
            )
        return False

    def sparse_matrix(self, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> Callable[[Any], Any]:
        import torch

        rows, columns = torch.from_numpy(indptr.astype(np.int64)), torch.from_numpy(indices.astype(np.int64))

        def csr(data: Any) -> Any:
            # Index tensors are cloned: the prep's copies must not be shared with results.
            return torch.sparse_csr_tensor(rows.clone(), columns.clone(), data, size=shape, check_invariants=False)

        return csr

    def sparse_to_numpy(self, value: Any) -> np.ndarray | None:
        torch = sys.modules["torch"]
        if not isinstance(value, torch.Tensor) or value.layout is torch.strided:
            return None
        return self.to_numpy(value.to_dense())

    def sparse_to_scipy(self, value: Any) -> Any:
        torch = sys.modules["torch"]
        if not isinstance(value, torch.Tensor) or value.layout is torch.strided:
            return None
        import scipy.sparse as sp

        value = value.detach()
        if value.layout is torch.sparse_csr and value.dim() == 2:
            return sp.csr_array(
                (self.to_numpy(value.values()), value.col_indices().cpu().numpy(), value.crow_indices().cpu().numpy()),
                shape=tuple(value.shape),
                copy=True,
            )
        if value.layout is torch.sparse_coo and value.dim() == 2 and value.dense_dim() == 0:
            value = value.coalesce()
            rows, columns = value.indices().cpu().numpy()
            return sp.csr_array(
                sp.coo_array((self.to_numpy(value.values()), (rows, columns)), shape=tuple(value.shape))
            )
        return sp.csr_array(self.sparse_to_numpy(value))  # other layouts: through dense

    def records_graph(self, value: Any) -> bool:
        return bool(value.requires_grad or value.grad_fn is not None)

    def copy(self, value: Any) -> Any:
        return value.detach().clone()

    def index(self, positions: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(positions.astype(np.int64))

    def scatter(self, data: Any, positions: Any, size: int) -> Any:
        result = data.new_zeros(size)
        result[positions] = data
        return result

    def block(self, value: Any) -> None:
        if getattr(value, "is_cuda", False):
            sys.modules["torch"].cuda.synchronize(value.device)


FAMILY = TorchFamily()
