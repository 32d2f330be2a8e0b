"""Tensors as torch's autograd takes them: leaves that require grad, recording
whatever the caller's grad mode, tangents in the primal's dtype and device, and
Python scalars as 0-d tensors for ``torch.compile``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from di.families import converter, family_of
from di.pytrees import is_pytree, tree_leaves, tree_map

__all__ = [
    "as_dtype",
    "float_leaves_to_tensors",
    "grad_along",
    "grad_of_scalar",
    "leaf",
    "like",
    "normal_tensors",
    "python_scalar",
    "recording",
    "requires_grad",
    "scalar_to_tensor",
]


_PLAIN_VALUES = frozenset({float, int, bool, str, type(None)})
_TENSOR = torch.Tensor

try:  # what torch.autograd.grad calls once it has checked its arguments
    from torch.autograd.graph import _engine_run_backward
except ImportError:  # (an older torch: grad itself, each time)
    _engine_run_backward = None  # type: ignore[assignment]


def requires_grad(value: Any) -> bool:
    """Whether ``value`` (a tensor, a pytree of them such as a dict ``Constant``
    of parameters, or anything else) requires grad."""
    kind = value.__class__
    if kind is _TENSOR:
        return value.requires_grad  # type: ignore[no-any-return]
    if kind is tuple or kind is list:  # (a batch (X, y): no flatten, no failed attribute lookup)
        for item in value:
            found = getattr(item, "requires_grad", None)
            if found is None:
                break  # something else inside: the general look below
            if found is True:
                return True
        else:
            return False
    else:
        found = getattr(value, "requires_grad", None)  # (isinstance of torch.Tensor costs more)
        if found is not None:
            return found is True
    if kind in _PLAIN_VALUES or not is_pytree(value):
        return False
    return any(getattr(leaf, "requires_grad", False) is True for leaf in tree_leaves(value))


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Record ``f`` for autograd whatever the caller's grad mode: ``no_grad`` and
    ``inference_mode`` around a di call never change a derivative (under them
    ``f`` would run unrecorded and its gradient would read as zero)."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


def leaf(tensor: Any) -> Any:
    """A detached alias of ``tensor`` that requires grad: the input autograd
    differentiates with respect to. An inference tensor (made under
    ``inference_mode``) cannot require grad, so it is cloned into a normal one."""
    try:
        return tensor.detach().requires_grad_()
    except RuntimeError:
        if not tensor.is_inference():
            raise
        return tensor.clone().requires_grad_()


def normal_tensors(values: Sequence[Any]) -> tuple[Any, ...]:
    """Context values with inference tensors cloned into normal ones, which
    autograd can save for the backward pass (``Cache`` buffers made under
    ``inference_mode`` cannot be written outside it either way)."""
    return tuple(v.clone() if isinstance(v, torch.Tensor) and v.is_inference() else v for v in values)


def as_dtype(tangent: Any, primal: Any) -> Any:
    """torch.func.jvp can promote the tangent of a 0-d computation with a Python
    float to float64 while the primal stays float32: give the tangent the
    primal's dtype, as eager autograd would."""
    return tangent if tangent.dtype == primal.dtype else tangent.to(primal.dtype)


def like(tangent: Any, reference: Any) -> Any:
    """A tangent of any family as a tensor of ``reference``'s dtype and device. A
    pytree (the cotangent of an ``f`` that returns one) is left as it is: the
    check of ``f``'s output refuses such an ``f`` with the remedy."""
    if (
        tangent.__class__ is torch.Tensor
        and tangent.dtype is reference.dtype
        and tangent.get_device() == reference.get_device()  # an int: cheaper than comparing devices
    ):
        return tangent  # the common case
    family = family_of(tangent)
    if not family and is_pytree(tangent):
        return tangent
    tensor = converter(family, "torch")(tangent) if family else torch.tensor(tangent)
    if tensor.dtype != reference.dtype or tensor.device != reference.device:
        tensor = tensor.to(dtype=reference.dtype, device=reference.device)
    return tensor


def scalar_to_tensor(dtype: Any) -> Callable[[Any], Any]:
    """Python scalars become 0-d tensors, so torch.compile traces instead of
    guarding on (and recompiling for) each value. Floats take ``x``'s dtype so the
    result's dtype is what eager code would give."""

    def to_tensor(value: Any) -> Any:
        return torch.tensor(value, dtype=dtype)

    return to_tensor


def float_leaves_to_tensors(convert: Callable[[Any], Any], dtype: Any) -> Callable[[Any], Any]:
    """``convert``, then the Python float leaves of the pytree it returns as 0-d
    tensors of ``dtype``: dynamo would guard on each float and compile again for
    each new value, as it would for a float context of its own."""

    to_tensor = scalar_to_tensor(dtype)

    def to_tensors(value: Any) -> Any:
        return tree_map(lambda leaf: to_tensor(leaf) if type(leaf) is float else leaf, convert(value))

    return to_tensors


def python_scalar(value: Any) -> Any:
    """A NumPy integer or bool scalar as the Python int or bool of its value (what
    dynamo compiles in as a constant); anything else as it is."""
    return value.item() if isinstance(value, (np.integer, np.bool_)) else value


def grad_of_scalar(y: Any, inputs: tuple[Any, ...], create_graph: bool) -> tuple[Any, ...]:
    """``torch.autograd.grad(y, inputs, allow_unused=True, create_graph=create_graph)``.
    Where ``y`` is a 0-d floating tensor and nothing overrides torch functions (no
    tensor subclass with ``__torch_function__``, no mode), ``grad``'s own checks all
    pass and it only builds ``ones_like(y)`` before calling the engine: that is done
    here directly, without ``grad``'s argument handling in Python (about 45k
    instructions a call under callgrind, more than the rest of di's hot path: a
    gradient at n = 1e3 takes 300k in all, the 7-leaf ML call 960k)."""
    if (
        _engine_run_backward is None
        or _has_torch_function(inputs)  # (first: a mode then sees what grad reads, not these reads)
        or y.__class__ is not _TENSOR
        or y.ndim
        or not y.is_floating_point()
    ):
        return torch.autograd.grad(y, inputs, allow_unused=True, create_graph=create_graph)
    return _engine_run_backward(  # type: ignore[no-any-return]
        (y,), (torch.ones_like(y),), create_graph, create_graph, inputs, True, accumulate_grad=False
    )


def grad_along(y: Any, inputs: tuple[Any, ...], cotangent: Any, retain: bool, create_graph: bool) -> tuple[Any, ...]:
    """``torch.autograd.grad(y, inputs, cotangent, retain_graph=retain, allow_unused=True,
    create_graph=create_graph)``, calling the engine directly (as :func:`grad_of_scalar`)
    where ``cotangent`` is a tensor of ``y``'s floating dtype and shape: ``grad``'s
    checks would pass (the engine itself would sum a broadcastable cotangent of
    another shape, which ``grad`` refuses: it goes to ``grad``)."""
    if (
        _engine_run_backward is None
        or _has_torch_function(inputs)
        or y.__class__ is not _TENSOR
        or cotangent.__class__ is not _TENSOR
        or cotangent.dtype is not y.dtype
        or not y.is_floating_point()
        or cotangent.shape != y.shape
    ):
        return torch.autograd.grad(
            y, inputs, cotangent, retain_graph=retain, allow_unused=True, create_graph=create_graph
        )
    return _engine_run_backward(  # type: ignore[no-any-return]
        (y,), (cotangent,), retain, create_graph, inputs, True, accumulate_grad=False
    )


_has_torch_function = torch._C._has_torch_function
