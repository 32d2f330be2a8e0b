"""Eager torch's hot path of a gradient at a pytree ``x`` of tensors (a model's
parameters, a dict of arrays): what a torch user writes (detach each leaf, ``f``,
``torch.autograd.grad``), and little else, called at every training step; any
other call goes to the general reverse program (:class:`di.engines.torch.reverse.Reverse`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd import forward_ad as dual

from di.backends.aux import split_output
from di.backends.outputs import check_output, raise_translated
from di.engines.torch.ownership import addresses, owned_aux, unshared
from di.engines.torch.rules import REVERSE_RULES
from di.engines.torch.tensors import grad_of_scalar, requires_grad
from di.engines.torch.transforms import dynamo_compiling

__all__ = ["differentiable_as_is", "tree_gradient_program", "zeros_where_unused"]


def tree_gradient_program(
    reverse: Any,
    run: Callable[..., Any],
    with_value: bool,
    traced: Callable[..., Any] | None,
) -> Callable[..., Any] | None:
    """The hot path of a gradient at a pytree ``x`` of tensors: what a torch
    user writes, and little else; ``run`` serves every other call. Two kinds
    of ``x`` take it: a model's parameters (leaf tensors that require grad,
    differentiated as they are, as ``torch.autograd.grad`` does, where ``f`` is
    not compiled; with ``create_graph`` left on, the results keep their graph,
    as ``torch.autograd.grad(..., create_graph=True)`` gives them), and plain
    tensors that do not require grad (nor do the context values),
    differentiated through detached aliases. With ``has_aux``, ``aux``'s tensors
    are returned detached (:func:`~di.engines.torch.ownership.owned_aux`).
    ``None`` where the prep cannot take it (contexts to convert or write,
    another operator).

    Args:
        reverse: the :class:`~di.engines.torch.reverse.Reverse` of the prep (what it
            knows of ``f``, ``x``'s structure and the contexts).
        run: its general program, for every call the hot path does not take.
        with_value: whether the program returns ``(value, gradient)``.
        traced: the program to run inside a ``torch.func`` transform or a
            ``torch.compile`` trace, if any.

    Returns:
        The program ``(x, *values)``, or ``None``.
    """
    if not reverse.torch_leaves or reverse.convert_any or reverse.caches:
        return None
    if reverse.operator != "gradient" or reverse.structure is None:
        return None
    f, backend, operator, structure = reverse.f, reverse.backend, reverse.operator, reverse.structure
    leaves_of, unflatten, constants = structure.leaves, structure.unflatten, reverse.constants
    as_is, keeps_graph, has_aux = reverse.own_leaves, reverse.keeps_graph, reverse.has_aux
    tensor, is_grad_enabled, conversions = torch.Tensor, torch.is_grad_enabled, REVERSE_RULES.conversion_errors
    is_compiling, transforms_active = dynamo_compiling, torch._C._are_functorch_transforms_active

    def run_tree_gradient(x: Any, *values: Any) -> Any:
        if not is_grad_enabled() or (
            traced is not None and (is_compiling() or transforms_active() or dual._current_level >= 0)
        ):
            return run(x, *values)
        leaves = leaves_of(x)
        if leaves is None:
            return run(x, *values)
        # (a first leaf that does not require grad rules the as-is path out without a call)
        first_asks = not leaves or getattr(leaves[0], "requires_grad", False)
        if as_is and first_asks and differentiable_as_is(leaves):
            # they ask for the caller's graph where it is kept
            argument, differentiated, connect = x, tuple(leaves), keeps_graph
        else:
            connect = False
            for i in constants:
                value = values[i]
                if value.__class__ is tuple:  # (a batch (X, y) of tensors, asked inline)
                    for item in value:
                        if item.__class__ is not tensor or item.requires_grad:
                            break
                    else:
                        continue
                elif value.__class__ is tensor and not value.requires_grad:
                    continue
                if requires_grad(value):
                    return run(x, *values)
            aliases = []
            try:
                for t in leaves:  # a tensor that requires grad may ask for the caller's graph
                    if t.__class__ is not tensor or t.requires_grad:
                        return run(x, *values)
                    aliases.append(t.detach().requires_grad_())
            except RuntimeError:  # inference tensors: run clones them
                return run(x, *values)
            differentiated = tuple(aliases)
            argument = unflatten(differentiated)
        try:
            y = f(argument, *values)
            if has_aux:
                if y.__class__ is tuple and len(y) == 2:  # (split_output's common case, inline)
                    y, aux = y
                else:
                    y, aux = split_output(y, backend, operator)
            if y.__class__ is not tensor or not y.requires_grad:
                y = check_output(y, differentiated, backend, operator, REVERSE_RULES)
            # (the tree gradient's backward, inline: a call fewer)
            try:
                grads = grad_of_scalar(y, differentiated, connect) if differentiated else ()
            except RuntimeError:  # autograd refuses non-scalar and complex outputs: say why
                check_output(y, differentiated, backend, operator, REVERSE_RULES)
                raise
            for d in grads:
                if d is None:  # f does not use some leaves: zeros, as for an array x
                    grads = zeros_where_unused(differentiated, grads)
                    break
            result = unflatten(grads)
        except conversions as err:  # torch refused NumPy, or a write into x, inside f: say why
            raise_translated(err, backend, operator, REVERSE_RULES)
        if with_value:
            value = y if connect else y.detach()
            if y._base is not None or y.grad_fn is None:  # a leaf of x (or a view of one): copied
                value = unshared(value, addresses(differentiated, values))
            result = (value.reshape(()) if value.ndim else value), result
        if has_aux:
            # (no context value requires grad here: a tensor with a graph f computed, no
            # view, is its own memory; the usual aux, a flat dict of those, is detached
            # inline, as owned_aux does first)
            if not connect and aux.__class__ is dict:
                owned = {}
                for key, item in aux.items():
                    if item.__class__ is not tensor or item.grad_fn is None or item._base is not None:
                        break
                    owned[key] = item.detach()
                else:
                    return result, owned
            return result, owned_aux(aux, lambda: addresses(differentiated, values), not connect, computed=True)
        return result

    return run_tree_gradient


def differentiable_as_is(tensors: Sequence[Any]) -> bool:
    """Whether ``torch.autograd.grad`` may differentiate with respect to each of
    ``tensors`` itself, unconnected to the caller's graph: a leaf that requires
    grad, as a model's parameter is; not a non-leaf (its gradient would be taken
    into the graph that made it), not an inference tensor (autograd cannot save
    those), not one with hooks of the caller's (they would run, and could change
    the result). One loop: it runs at every call."""
    for t in tensors:
        if not (t.requires_grad and t.is_leaf and t._backward_hooks is None and not t.is_inference()):
            return False
    return True


def zeros_where_unused(leaves: Sequence[Any], grads: Sequence[Any]) -> tuple[Any, ...]:
    """``grads`` with zeros like the leaf where autograd gave ``None`` (a leaf ``f``
    does not use), as for an array ``x``."""
    return tuple(torch.zeros_like(a) if d is None else d for a, d in zip(leaves, grads))
