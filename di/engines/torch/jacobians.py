"""Jacobians of a tensor ``x`` by ``torch.func``, batched over the standard basis.

``torch.func.jacfwd`` and ``jacrev`` take pytrees and, with ``has_aux``, return
an output of the same evaluation of ``f``; their pytree handling costs 40-70 us
per eager call at n = 10 (10 % of the call). For a tensor ``x`` the batch is
written here: a ``jvp`` (or the ``vjp``'s pullback) ``vmap``-ed over the basis,
as those functions compute it, with ``y`` and ``aux`` taken out of the batch once.

While ``torch.compile`` traces a call that runs inside a ``torch.func`` transform
(``torch.compile(torch.func.vmap(step))``), dynamo's fake tensors cannot trace a
``jvp`` batched by ``vmap`` (an INTERNAL ASSERT in ``_fw_primal``; native
``jacfwd`` fails there too): the jacobian is then taken in reverse mode and
several tangents' products one after the other (:func:`batched_jvp_fails`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from di.engines.torch.transforms import dynamo_compiling, functorch_active

__all__ = ["batched_jvp_fails", "forward_jacobian", "per_tangent", "reverse_jacobian", "rows", "standard_basis"]

_func = torch.func


def batched_jvp_fails() -> bool:
    """Whether a ``jvp`` batched by ``vmap`` cannot be traced here: while dynamo
    traces a call that runs inside a ``torch.func`` transform (dynamo answers
    both checks itself, as constants of the trace). Unbatched ``jvp``s
    (forward-over-reverse too) and reverse mode batched by ``vmap`` trace there;
    eagerly, and under ``torch.compile`` alone, everything does.

    Examples:
        >>> from di.engines.torch.jacobians import batched_jvp_fails
        >>> batched_jvp_fails()
        False
    """
    return dynamo_compiling() and functorch_active()


def per_tangent(product: Callable[[Any], Any], tangents: Sequence[Any]) -> tuple[Any, ...]:
    """``product(t)`` for each of ``tangents`` (two or more tensors of one shape):
    one ``vmap`` over the stacked tangents, or, where :func:`batched_jvp_fails`,
    one call per tangent (the same values).

    Examples:
        >>> import torch
        >>> from di.engines.torch.jacobians import per_tangent
        >>> x = torch.tensor([1.0, 2.0])
        >>> per_tangent(lambda t: torch.func.jvp(torch.sin, (x,), (t,))[1], (torch.ones(2), x))
        (tensor([ 0.5403, -0.4161]), tensor([ 0.5403, -0.8323]))
    """
    if batched_jvp_fails():
        return tuple(product(t) for t in tangents)
    return rows(_func.vmap(product)(torch.stack(tuple(tangents))))


def rows(batch: Any) -> tuple[Any, ...]:
    """The rows of ``batch`` (two or more) as tensors of their own: results the
    caller may write into. ``unbind``'s rows are views of one storage, which torch
    refuses to write into while they carry a graph ("Output 0 of Unbind is a
    view") and which keep the whole batch alive. One copy per row: about 1 us
    per row of 1e3 float64 here, 1 % of a pushforward.

    Examples:
        >>> import torch
        >>> from di.engines.torch.jacobians import rows
        >>> first, second = rows(torch.arange(4.0).reshape(2, 2))
        >>> first.add_(1), second._base is None
        (tensor([1., 2.]), True)
    """
    return tuple([row.clone() for row in batch.unbind(0)])


def forward_jacobian(
    fy: Callable[..., Any], x: Any, has_aux: bool, jvp: Callable[..., Any] | None = None
) -> tuple[Any, ...]:
    """``(y, jacobian)`` of ``fy`` at the tensor ``x``, and ``fy``'s aux under
    ``has_aux`` (``fy`` then returns ``(y, aux)``, aux a tuple of tensors): a
    batch of ``jvp`` over the standard basis, as ``torch.func.jacfwd`` computes
    it, without its pytree handling (about 10 % of an eager call at n = 10).
    ``jvp``: ``torch.func.jvp``, or a caller's version of it with the same
    signature (one that refuses an output cut off from ``x``).
    ``y`` and ``aux``, which do not depend on the tangent, come out of the batch
    once: the batch returns them broadcast (an expanded view; inside an outer
    ``vmap`` they are batched at its level, which ``out_dims=None`` refuses) and
    the first is kept, as ``jacfwd`` does with its aux. Where
    :func:`batched_jvp_fails`, the same values from :func:`reverse_jacobian`.

    Examples:
        >>> import torch
        >>> from di.engines.torch.jacobians import forward_jacobian
        >>> y, jac = forward_jacobian(lambda x: x**2, torch.tensor([1.0, 3.0]), False)
        >>> y, jac
        (tensor([1., 9.]), tensor([[2., 0.],
                [0., 6.]]))
    """
    if batched_jvp_fails():
        return reverse_jacobian(fy, x, has_aux)
    basis = standard_basis(x)
    jvp = _func.jvp if jvp is None else jvp
    # (out_dims=0 and a move: vmap broadcasts an output that does not depend on the
    # tangent, the zero jacobian of a constant, wrongly along a negative out_dim)
    batched: Any = _func.vmap(lambda t: jvp(fy, (x,), (t,), has_aux=has_aux))(basis)
    ys, jac, *batched_aux = batched  # (the aux under has_aux, batched)
    y = ys[0]
    jac = jac.movedim(0, -1).reshape(y.shape + x.shape)
    if not has_aux:
        return y, jac
    (aux,) = batched_aux
    return y, jac, tuple(batch[0] for batch in aux)


def standard_basis(like: Any) -> Any:
    """The standard basis of ``like``'s space, one element per row (``n`` tensors
    shaped like ``like``, its dtype and device). Eagerly ``torch.eye`` (one op);
    traced by dynamo, zeros with a diagonal of ones, which inductor compiles into
    a fill, where its ``eye`` kernel took three times the whole jacobian at
    n = 1e3.

    Examples:
        >>> import torch
        >>> from di.engines.torch.jacobians import standard_basis
        >>> standard_basis(torch.zeros(2, 1, dtype=torch.float64))
        tensor([[[1.],
                 [0.]],
        <BLANKLINE>
                [[0.],
                 [1.]]], dtype=torch.float64)
    """
    n = like.numel()
    if not dynamo_compiling():
        return torch.eye(n, dtype=like.dtype, device=like.device).view(n, *like.shape)
    basis = like.new_zeros(n, n)
    basis.diagonal().fill_(1)
    return basis.view(n, *like.shape)


def reverse_jacobian(fy: Callable[..., Any], x: Any, has_aux: bool) -> tuple[Any, ...]:
    """``(y, jacobian)`` of ``fy`` at the tensor ``x``, and ``fy``'s aux under
    ``has_aux``: one ``vjp``, its pullback batched over the standard basis of
    ``y``, as ``torch.func.jacrev`` computes it, without its pytree handling.

    Examples:
        >>> import torch
        >>> from di.engines.torch.jacobians import reverse_jacobian
        >>> y, jac = reverse_jacobian(lambda x: x.sum(0), torch.ones(2, 2), False)
        >>> jac.shape
        torch.Size([2, 2, 2])
    """
    y, pull, *aux = _func.vjp(fy, x, has_aux=has_aux)
    (jac,) = _func.vmap(pull)(standard_basis(y))
    return (y, jac.reshape(y.shape + x.shape), *aux)
