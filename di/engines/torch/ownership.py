"""Results the caller owns: ``torch.func`` returns an output that is ``f``'s input
(or a view of it) as it is, so a result sharing the memory of ``x``, a context
value or a tangent is copied (:func:`owning`); a result carries the caller's
graph only where the call keeps it (:func:`detaching`); and inputs whose
elements share memory are made contiguous for forward mode (:func:`without_overlap`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as torch_pytree

from di.backends.protocol import Program
from di.engines.torch.tensors import requires_grad
from di.engines.torch.transforms import dynamo_compiling, functorch_active
from di.pytrees import is_pytree, tree_leaves

__all__ = [
    "addresses",
    "detached_unless_kept",
    "detaching",
    "owned_aux",
    "owned_results",
    "owning",
    "requires_grad_anywhere",
    "storage_address",
    "unshared",
    "without_overlap",
]


def without_overlap(tensor: Any) -> Any:
    """``tensor``, or a contiguous copy of it where its elements share memory (an
    expanded tensor: a stride of 0 along a dimension longer than 1). Forward mode
    (``torch.func.jvp``'s ``make_dual``) refuses such an input; every other engine
    copies it on conversion, and the copy is differentiable like the original.

    Examples:
        >>> import torch
        >>> from di.engines.torch.ownership import without_overlap
        >>> without_overlap(torch.ones(1).expand(3)).stride(), without_overlap(torch.ones(2, 3).t()).stride()
        ((1,), (1, 3))
    """
    if any(stride == 0 and size > 1 for stride, size in zip(tensor.stride(), tensor.shape)):
        return tensor.contiguous()
    return tensor


def storage_address(value: Any) -> int:
    """Where the memory of an array ``value`` starts: a tensor's storage (which its
    views share), a NumPy array's data (``torch.from_numpy`` of it starts there);
    0 for anything else, and for memory that cannot be read (a tensor of a
    ``torch.func`` transform, a sparse one).

    Examples:
        >>> import numpy as np, torch
        >>> from di.engines.torch.ownership import storage_address
        >>> a = np.zeros(3)
        >>> storage_address(torch.from_numpy(a)[1:]) == storage_address(a), storage_address("a")
        (True, 0)
    """
    if isinstance(value, torch.Tensor):
        try:
            return value.untyped_storage().data_ptr()  # type: ignore[no-any-return]
        except (RuntimeError, NotImplementedError):
            return 0
    if isinstance(value, np.ndarray):
        return value.__array_interface__["data"][0]  # type: ignore[no-any-return]
    return 0


def addresses(*groups: Any) -> set[int]:
    """The :func:`storage_address` of every array in ``groups`` (each an array, or
    a sequence of them: a pytree ``x``'s leaves, the context values, which may be
    lists, tuples and dicts of arrays themselves), 0 left out."""
    found: set[int] = set()
    for group in groups:
        for value in group if isinstance(group, (list, tuple)) else (group,):
            if value.__class__ in (list, tuple, dict):  # a pytree context: (X, y), a dict of tensors
                found |= addresses(*(value.values() if value.__class__ is dict else value))
                continue
            address = storage_address(value)
            if address:
                found.add(address)
    return found


def unshared(tensor: Any, taken: set[int]) -> Any:
    """``tensor``, or a copy of it where its memory is one of ``taken`` (the
    memory of ``x``, a ``Constant`` or a ``Cache``): a result never shares memory
    with an input, so the caller may write into it, and the next call cannot
    overwrite it. The copy is differentiable like ``tensor`` (``clone``)."""
    address = storage_address(tensor)
    return tensor.clone() if address and address in taken else tensor


_TENSOR = torch.Tensor


def owned_aux(aux: Any, taken: Callable[[], set[int]], detach: bool, computed: bool = False) -> Any:
    """``aux`` as a call returns it: each tensor detached from the call's graph
    (``detach``; a call that keeps the caller's graph returns differentiable
    ones) and copied where it shares memory with an input (:func:`unshared`;
    ``taken()`` gives the inputs' memory, read once and only for a tensor).
    ``computed``: no input has a graph, so a tensor with one that is no view is
    one ``f`` computed, whose memory is its own (no look at the inputs' memory).
    A flat dict of tensors is walked by one comprehension, anything else by
    torch's pytree map."""
    if computed and detach and aux.__class__ is dict:
        # the usual aux (a loss's parts, computed by f): each detached, nothing else to
        # look at; any other leaf takes the general walk below
        owned = {}
        for key, item in aux.items():
            if item.__class__ is not _TENSOR or item.grad_fn is None or item._base is not None:
                break
            owned[key] = item.detach()
        else:
            return owned
    found: list[set[int]] = []

    def own(item: Any) -> Any:
        if not isinstance(item, torch.Tensor):
            return item
        fresh = computed and item.grad_fn is not None and item._base is None
        if detach:
            item = item.detach()
        if fresh:
            return item
        if not found:
            found.append(taken())
        return unshared(item, found[0])

    if aux.__class__ is dict:
        return {key: own(item) for key, item in aux.items()}
    return torch_pytree.tree_map(own, aux)


def owning(program: Program, lead: int, with_value: bool, has_aux: bool, products_at: int | None = None) -> Program:
    """``program`` (arguments ``x``, ``lead - 1`` tangent arguments, the context
    values) whose results are owned by the caller (:func:`owned_results`): copied
    where they share an input's or a tangent's memory. Inside a ``torch.func``
    transform or a ``torch.compile`` trace the results are the transform's
    values, returned as they are."""
    owned = owned_results(lead, with_value, has_aux, products_at)

    def run(*args: Any) -> Any:
        output = program(*args)
        if dynamo_compiling() or functorch_active():
            return output
        return owned(output, args)

    if getattr(program, "keeps_x_structure", False):
        run.keeps_x_structure = True  # type: ignore[attr-defined]
    return run


def owned_results(
    lead: int, with_value: bool, has_aux: bool, products_at: int | None = None
) -> Callable[[Any, tuple[Any, ...]], Any]:
    """What makes a program's output the caller's: ``owned(output, args)``, for a
    program of ``args`` (``x``, ``lead - 1`` tangent arguments, the context
    values), whose value (``with_value``: the first of its results) and ``aux``
    tensors are copied where they share an input's memory (:func:`unshared`):
    ``torch.func`` returns an output that is ``f``'s input, or a view of it, as it
    is. A result ``f`` computed costs a look at its base and its graph; ``aux``
    (already a walk through a pytree) costs a look at its memory. With tangents,
    the products (the result itself, or its element ``products_at``) are copied
    where they share a tangent's memory: the product of a linear ``f`` (the
    identity, a reshape) is its tangent, or a view of it, as ``torch.func`` gives
    it.

    Examples:
        >>> import torch
        >>> from di.engines.torch.ownership import owned_results
        >>> v = torch.ones(2)
        >>> owned = owned_results(2, with_value=False, has_aux=False)
        >>> owned((v,), (torch.zeros(2), (v,)))[0] is v  # the product of the identity: its tangent, copied
        False
    """
    tensor = torch.Tensor

    def taken(args: tuple[Any, ...]) -> set[int]:
        x = args[0]
        return addresses(tree_leaves(x) if is_pytree(x) else x, args[lead:])

    def owned_products(products: tuple[Any, ...], tangents: Sequence[Any]) -> tuple[Any, ...]:
        for p, t in zip(products, tangents):
            if p.__class__ is tensor and (p is t or p._base is not None or t.__class__ is not tensor):
                break  # a product that may be its tangent: compared by memory
        else:
            return products
        memory = addresses(list(tangents))
        return tuple([unshared(p, memory) if p.__class__ is tensor else p for p in products])

    def owned(output: Any, args: tuple[Any, ...]) -> Any:
        result, aux = output if has_aux else (output, None)
        if lead == 2 and args[1]:
            products = result if products_at is None else result[products_at]
            copied = owned_products(products, args[1])
            if copied is not products:
                result = copied if products_at is None else (*result[:products_at], copied)
        if with_value:
            y, values = result[0], args[lead:]
            if y.__class__ is tensor and (
                y._base is not None or y.grad_fn is None or (values and any(y is v for v in values))
            ):
                x = args[0]
                if values or x.__class__ is not tensor:
                    result = (unshared(y, taken(args)), *result[1:])
                else:  # (a compiled program's value, which has no graph: compared with x's memory alone)
                    address = storage_address(y)
                    if address and address == storage_address(x):
                        result = (y.clone(), *result[1:])
        if has_aux:
            return result, owned_aux(aux, lambda: taken(args), False)
        return result

    return owned


def detaching(program: Callable[..., Any], lead: int, keeps_graph: bool) -> Callable[..., Any]:
    """``program`` (arguments ``x``, ``lead - 1`` tangent arguments, the context
    values), its results detached unless the call keeps the caller's graph: the
    selector's ``create_graph`` is on, grad mode is on, and ``x``, a context value
    or a tangent requires grad, as in eager reverse mode (:class:`Reverse`).
    ``torch.func`` connects its results to every tensor that requires grad, those
    ``f`` closes over too (a model's parameters): without this, a pushforward or
    a hessian carried their graph where a gradient did not. The common call, whose
    results require no grad, costs one look at each result."""

    def run(*args: Any) -> Any:
        output = program(*args)
        if not requires_grad_anywhere(output):
            return output
        return detached_unless_kept(output, args, lead, keeps_graph)

    if getattr(program, "keeps_x_structure", False):
        run.keeps_x_structure = True  # type: ignore[attr-defined]
    return run


def detached_unless_kept(output: Any, args: tuple[Any, ...], lead: int, keeps_graph: bool) -> Any:
    """``output`` (a program's, of ``args``; some tensor of it requires grad) as it
    is where the call keeps the caller's graph (:func:`detaching`), else with
    each of its tensors detached."""
    if keeps_graph and torch.is_grad_enabled():
        if requires_grad(args[0]) or any([requires_grad(v) for v in args[lead:]]):
            return output
        if lead == 2 and any([requires_grad(t) for t in args[1]]):
            return output
    return _detached(output)


def requires_grad_anywhere(output: Any) -> bool:
    """Whether a tensor of ``output`` (a program's result: a tensor, tuples of them,
    ``aux``) requires grad; tuples and tensors without torch's pytree walk."""
    if output.__class__ is torch.Tensor:
        return output.requires_grad
    if output.__class__ is tuple:
        for item in output:
            if requires_grad_anywhere(item):
                return True
        return False
    return any(getattr(leaf, "requires_grad", False) is True for leaf in torch_pytree.tree_leaves(output))


def _detached(output: Any) -> Any:
    """``output`` with each of its tensors detached."""
    return torch_pytree.tree_map(lambda item: item.detach() if isinstance(item, torch.Tensor) else item, output)
