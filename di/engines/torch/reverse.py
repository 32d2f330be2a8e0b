"""Eager reverse mode: ``torch.autograd.grad`` on a detached alias of ``x``.

The one sequence every reverse-mode program runs (:class:`Reverse`): take ``x``
as a detached ``requires_grad_()`` alias (no copy), call ``f``, differentiate
with ``torch.autograd.grad`` (the backward passes: :func:`gradient_backward`
and the pullback's and hvp's below). It is the fastest eager path on small
inputs (about three times faster than ``torch.func.grad`` here) and the one that
lets ``f`` write into ``Cache`` buffers, which are detached after the call so
they hold no graph. Under ``torch.no_grad()`` or ``torch.inference_mode()`` the
call records ``f`` all the same: a grad mode never changes a derivative.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd import forward_ad as dual

from di.backends.aux import split_output
from di.backends.outputs import check_output, raise_translated
from di.contexts import Cache, Context
from di.engines.torch.base import TorchBase
from di.engines.torch.ownership import addresses, owned_aux, unshared
from di.engines.torch.rules import REVERSE_RULES, refuse_cut_off
from di.engines.torch.tensors import grad_along, grad_of_scalar, leaf, like, normal_tensors, recording, requires_grad
from di.engines.torch.transforms import dynamo_compiling
from di.engines.torch.tree_gradient import differentiable_as_is, tree_gradient_program, zeros_where_unused
from di.families import converter, family_of, identity
from di.pytrees import is_pytree, tree_flatten
from di.pytrees.structure import Structure

__all__ = [
    "Backward",
    "NotTwiceDifferentiable",
    "Reverse",
    "alias",
    "double_backward",
    "gradient_backward",
    "hessian_backward",
    "hvp_backward",
    "pullback_backward",
    "pushforward_backward",
]


Backward = Callable[[Any, Any, Any, bool], Any]
"""``backward(y, inputs, cotangents, create_graph)``: the result of one reverse pass,
from ``f``'s checked output ``y``, the differentiated inputs (a tensor, or a list of
them for a pytree ``x``) and the call's cotangents (``None`` for a scalar ``f``);
with ``create_graph``, the result is itself differentiable."""


class Reverse:
    """The reverse-mode programs of one ``f``: one forward pass of ``f`` on
    differentiable aliases of ``x``, then ``backward``.

    When ``x``, a context value or a cotangent requires grad and grad mode is on
    (and the selector's ``create_graph`` is left on), the call keeps the caller's
    graph: ``x`` is differentiated through a view of itself rather than a
    detached alias (a gradient at a pytree of leaf tensors that require grad, a
    model's parameters, differentiates them as they are), the backward pass
    creates a graph, and the results (the value and ``aux`` too) are
    differentiable with respect to those inputs, as
    ``torch.autograd.grad(..., create_graph=True)`` gives them. Otherwise (the
    hot path) nothing is connected to the caller's graph.

    Args:
        adapter: the torch adapter (its converters and selector).
        f: the function, possibly a compiled one.
        x: the point of preparation (a tensor, an array of any family, a pytree).
        contexts: the contexts.
        operator: the operator, named in errors about ``f``'s output.
        has_aux: ``f`` returns ``(y, aux)``.
    """

    def __init__(
        self,
        adapter: TorchBase,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        operator: str,
        has_aux: bool = False,
    ) -> None:
        self.adapter, self.f, self.operator, self.has_aux = adapter, f, operator, has_aux
        self.backend = adapter.backend
        self.convert_values = adapter.torch_context_converters(x, contexts)
        self.convert_any = any(convert is not identity for convert in self.convert_values)
        self.caches = tuple(i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == "torch")
        self.constants = tuple(i for i, c in enumerate(contexts) if not isinstance(c, Cache))
        self.tree = is_pytree(x)
        self.structure = Structure(x) if self.tree else None
        # the leaves of a prepared pytree are torch tensors (model parameters): nothing to convert
        self.torch_leaves = self.tree and all(family_of(leaf) == "torch" for leaf in tree_flatten(x)[0])
        self.to_torch_x = adapter.input_converters([x])[0]
        self.keeps_graph = adapter.selector.create_graph
        # A compiled f guards on its inputs' classes: it keeps taking aliases (plain tensors).
        self.own_leaves = not adapter.compiled
        # an engine's own program (a gradient, for an outer derivative of it): an output
        # that does not require grad is a derivative constant in x (a linear f's), not a cut
        self.untraced = getattr(f, "checked_program", False)

    def tree_leaves(self, x: Any) -> tuple[list[Any], Structure]:
        """The leaves of a pytree ``x`` (one flatten per call) and its structure."""
        structure = self.structure
        assert structure is not None
        leaves = structure.leaves(x)
        if leaves is None:  # a non-strict prep given another structure: optree's own
            leaves, _ = tree_flatten(x)
            structure = Structure(x)
        return leaves, structure

    def tree_inputs(
        self, x: Any, leaves: list[Any], structure: Structure, connect: bool = False
    ) -> tuple[Any, tuple[Any, ...]]:
        """``(argument of f, differentiated leaves)`` for a call at a pytree ``x``
        whose leaves are ``leaves`` (a tensor ``x`` is its own single alias, made
        inline on the hot path).

        Unconnected to the caller's graph, a leaf tensor that requires grad (a
        model's parameter) is differentiated as it is, as ``torch.autograd.grad``
        does (its ``.grad`` is left alone); when every leaf is, ``f`` takes the
        caller's own ``x``. The others get detached aliases (no copy), made at each
        call as a torch user's loop makes them: the prep holds no tensor."""
        if not connect and self.torch_leaves:
            if not self.own_leaves:
                differentiated = tuple([leaf(t) for t in leaves])
            elif differentiable_as_is(leaves):
                return x, tuple(leaves)
            else:
                differentiated = tuple([t if differentiable_as_is((t,)) else leaf(t) for t in leaves])
            return structure.unflatten(differentiated), differentiated
        tensors = leaves if self.torch_leaves else [converter(family_of(item), "torch")(item) for item in leaves]
        differentiated = tuple(alias(t, connect) for t in tensors)
        return structure.unflatten(differentiated), differentiated

    def wants_graph(self, x: Any, cotangents: Any, values: Sequence[Any], leaves: Sequence[Any] = ()) -> bool:
        """Whether this call's results must carry the caller's graph (grad mode is
        on: the caller checked); ``leaves``: a pytree ``x``'s."""
        if not self.keeps_graph:
            return False
        if self.tree:
            if any(requires_grad(item) for item in leaves):
                return True
        elif requires_grad(x):
            return True
        if any(requires_grad(values[i]) for i in self.constants):
            return True
        return cotangents is not None and any(requires_grad(t) for t in cotangents)

    def program(
        self,
        backward: Backward,
        *,
        with_value: bool,
        with_tangents: bool,
        traced: Callable[..., Any] | None = None,
    ) -> Callable[..., Any]:
        """``(x, [cotangents,] *values)``: ``backward``'s result, ``(y, result)``
        with the value, and ``(..., aux)`` under ``has_aux``. ``traced``: the
        program to run instead inside a ``torch.func`` transform or a
        ``torch.compile`` trace (a ``torch.func`` one, which composes with both)."""
        f, has_aux, backend, operator = self.f, self.has_aux, self.backend, self.operator
        convert_values, convert_any, caches = self.convert_values, self.convert_any, self.caches
        tree, tree_inputs, to_torch_x, wants_graph = self.tree, self.tree_inputs, self.to_torch_x, self.wants_graph
        tree_leaves = self.tree_leaves
        # A gradient's output is checked by autograd itself (it refuses non-scalar and
        # complex outputs, and di then says why); the others look at the output first.
        accept = _ACCEPTS.get(operator)
        scalar = operator in ("gradient", "hvp", "hessian")
        tensor, is_grad_enabled, lead = torch.Tensor, torch.is_grad_enabled, 1 if with_tangents else 0
        plain_x = not tree and to_torch_x is identity and not has_aux and not with_value
        # (inside a torch.autograd.forward_ad level, an x that carries a tangent is
        # differentiated by the torch.func programs, which keep it: an alias would not)
        is_compiling, transforms_active = dynamo_compiling, torch._C._are_functorch_transforms_active
        conversions = REVERSE_RULES.conversion_errors
        untraced = self.untraced

        def call(x: Any, cotangents: Any, values: Sequence[Any], connect: bool, leaves: Any = None) -> Any:
            if tree:
                flat, structure = leaves or tree_leaves(x)
                argument, differentiated = tree_inputs(x, flat, structure, connect)
            elif connect:
                argument = differentiated = alias(x if to_torch_x is identity else to_torch_x(x), True)
            else:
                argument = differentiated = leaf(x if to_torch_x is identity else to_torch_x(x))
            if convert_any:
                values = tuple(convert(v) for convert, v in zip(convert_values, values))
            if caches and connect:  # the results' graph saves what f writes: f fills buffers of its own
                values = _own_buffers(values, caches)
            try:
                y = f(argument, *values)
                if has_aux:
                    y, aux = split_output(y, backend, operator)
                if y.__class__ is not tensor or not y.requires_grad or (accept is not None and not accept(y)):
                    y = check_output(y, differentiated, backend, operator, REVERSE_RULES)
                    if not untraced:
                        refuse_cut_off(y, differentiated, backend, operator)
                result = backward(y, differentiated, cotangents, connect)
            except conversions as err:  # torch refused NumPy, or a write into x, inside f: say why
                raise_translated(err, backend, operator, REVERSE_RULES)
            finally:
                if caches and not connect:
                    for i in caches:
                        values[i].detach_()
            if tree:
                result = structure.unflatten(result)
            if with_value:
                value = y if connect else y.detach()
                # y may be x, a context value or a view of one (a tensor f computed is
                # none of those): a result never shares an input's memory
                if (
                    y._base is not None
                    or not y.requires_grad
                    or (y.grad_fn is None if tree else y is differentiated)
                    or (values and any(y is v for v in values))
                ):
                    value = unshared(value, addresses(differentiated, values))
                result = (value.reshape(()) if scalar and value.ndim else value), result
            if has_aux:
                return result, owned_aux(aux, lambda: addresses(differentiated, values), not connect)
            return result

        def run(x: Any, *args: Any) -> Any:
            if traced is not None and (is_compiling() or transforms_active() or dual._current_level >= 0):
                return traced(x, *args)
            cotangents, values = (args[0], args[1:]) if lead else (None, args)
            if not is_grad_enabled():  # no_grad or inference_mode: f must still be recorded
                with recording():
                    return call(x, cotangents, normal_tensors(values), False)
            if x.__class__ is tensor and not x.requires_grad and not values:  # nothing can carry a graph...
                if not lead or (len(args[0]) == 1 and not getattr(args[0][0], "requires_grad", False)):
                    return call(x, cotangents, values, False)  # ... but one cotangent, checked here
            if tree:  # flattened once, for both questions
                leaves = tree_leaves(x)
                return call(x, cotangents, values, wants_graph(x, cotangents, values, leaves[0]), leaves)
            return call(x, cotangents, values, wants_graph(x, cotangents, values))

        def run_plain(x: Any, *args: Any) -> Any:
            # the hot path of a gradient (or a pullback of one cotangent) without
            # contexts: what a careful torch user writes, and little else
            if len(args) != lead or x.__class__ is not tensor or x.requires_grad or not is_grad_enabled():
                return run(x, *args)
            if lead and (len(args[0]) != 1 or getattr(args[0][0], "requires_grad", False)):
                return run(x, *args)
            if traced is not None and (is_compiling() or transforms_active() or dual._current_level >= 0):
                return traced(x, *args)
            try:  # leaf(x), inline: the common case is one detach
                argument = x.detach().requires_grad_()
            except RuntimeError:  # an inference tensor: leaf clones it
                argument = leaf(x)
            try:
                y = f(argument)
                if y.__class__ is not tensor or not y.requires_grad or (accept is not None and not accept(y)):
                    y = check_output(y, argument, backend, operator, REVERSE_RULES)
                    if not untraced:
                        refuse_cut_off(y, argument, backend, operator)
                return backward(y, argument, args[0] if lead else None, False)
            except conversions as err:  # torch refused NumPy, or a write into x, inside f: say why
                raise_translated(err, backend, operator, REVERSE_RULES)

        if tree:  # results are rebuilt with x's own structure (its dict order kept)
            gradient = tree_gradient_program(self, run, with_value, traced)
            program = run if gradient is None else gradient
            program.keeps_x_structure = True  # type: ignore[attr-defined]
            return program
        return run_plain if plain_x and not caches else run


def _own_buffers(values: Sequence[Any], caches: Sequence[int]) -> tuple[Any, ...]:
    """The context values with each ``Cache`` buffer replaced by a copy, for a call
    that keeps the caller's graph: that graph saves what ``f`` writes into the
    buffer, which must then outlive the call, untouched by the next one (which
    writes into the caller's buffer, or into a copy of its own)."""
    owned = list(values)
    for i in caches:
        owned[i] = owned[i].clone()
    return tuple(owned)


def alias(tensor: Any, connect: bool = False) -> Any:
    """The input autograd differentiates with respect to. On the hot path, a
    detached alias of ``tensor`` that requires grad (:func:`leaf`). ``connect``:
    a tensor that requires grad is differentiated through a view of itself, so
    results computed from the view stay connected to the caller's graph."""
    if connect and tensor.requires_grad:
        return tensor.view_as(tensor)
    return leaf(tensor)


_ACCEPTS: dict[str, Callable[[Any], bool]] = {
    "hvp": lambda y: y.ndim == 0 and y.is_floating_point(),
    "hessian": lambda y: y.ndim == 0 and y.is_floating_point(),
    "pullback": lambda y: y.is_floating_point(),
}
"""Beyond a tensor that requires grad, what each operator's hot path accepts
without the full check (:func:`di.backends.outputs.check_output`); a gradient's
hot path accepts every such tensor: autograd.grad refuses what else is wrong."""


def gradient_backward(backend: Any, tree: bool = False) -> Backward:
    """The gradient of a scalar ``y`` with respect to one leaf (zeros where ``f``
    does not use ``x``), or, with ``tree``, to the leaves of a pytree."""

    def backward(y: Any, differentiated: Any, cotangents: Any, create_graph: bool) -> Any:
        try:
            (g,) = grad_of_scalar(y, (differentiated,), create_graph)
        except RuntimeError:  # autograd refuses non-scalar and complex outputs: say why
            check_output(y, differentiated, backend, "gradient", REVERSE_RULES)
            raise
        return torch.zeros_like(differentiated) if g is None else g

    def tree_backward(y: Any, leaves: tuple[Any, ...], cotangents: Any, create_graph: bool) -> Any:
        if not leaves:
            return ()
        try:
            grads = grad_of_scalar(y, leaves, create_graph)
        except RuntimeError:
            check_output(y, leaves, backend, "gradient", REVERSE_RULES)
            raise
        for d in grads:
            if d is None:  # f does not use some leaves: zeros, as for an array x
                return zeros_where_unused(leaves, grads)
        return grads

    return tree_backward if tree else backward


def pullback_backward(y: Any, alias: Any, cotangents: Sequence[Any], create_graph: bool) -> tuple[Any, ...]:
    """The pullbacks of ``y`` along each cotangent, with respect to ``alias``."""
    if len(cotangents) == 1:  # the common case
        cotangent = like(cotangents[0], y)
        g = _backward(y, alias, cotangent, retain=create_graph, create_graph=create_graph)
        return (_not_sharing(g, cotangent),)
    last = len(cotangents) - 1
    products = []
    for i, t in enumerate(cotangents):
        cotangent = like(t, y)
        g = _backward(y, alias, cotangent, retain=create_graph or i < last, create_graph=create_graph)
        products.append(_not_sharing(g, cotangent))
    return tuple(products)


def _not_sharing(product: Any, cotangent: Any) -> Any:
    """``product``, or a copy where autograd handed back the cotangent itself or a
    view of it (a linear ``f``: the identity, a reshape), which is the caller's."""
    if product is not cotangent and product._base is None:
        return product
    return unshared(product, addresses(cotangent))


def _backward(y: Any, alias: Any, cotangent: Any, *, retain: bool, create_graph: bool = False) -> Any:
    if not y.requires_grad:
        return torch.zeros_like(alias)
    (g,) = grad_along(y, (alias,), cotangent, retain, create_graph)
    return torch.zeros_like(alias) if g is None else g


class NotTwiceDifferentiable(Exception):
    """Raised by :func:`pushforward_backward` where ``f``'s pullback cannot be
    differentiated again (a ``once_differentiable`` backward records no graph, an
    operation has no double backward): the caller runs forward mode instead."""


def pushforward_backward(y: Any, alias: Any, tangents: Sequence[Any], create_graph: bool) -> tuple[Any, ...]:
    """The pushforwards of ``y`` along ``tangents`` by two reverse passes (a
    double vjp): the pullback ``u -> J^T u`` along a cotangent ``u`` that requires
    grad is linear in ``u``, so its own pullback along a tangent ``t`` is ``J t``.
    Exact for any ``f`` whose backward autograd can differentiate, and free of
    forward-mode state (``forward_ad`` levels are one per process, not per
    thread). A complex ``y`` (of a real ``x``) is taken as its real view."""
    if y.is_complex():
        real = pushforward_backward(torch.view_as_real(y), alias, tangents, create_graph)
        return tuple(torch.view_as_complex(product) for product in real)
    cotangent = torch.zeros_like(y, requires_grad=True)
    (vjp,) = grad_along(y, (alias,), cotangent, True, True)
    if vjp is None:  # y does not depend on x: J is zero
        return tuple(torch.zeros_like(y) for _ in tangents)
    if not vjp.requires_grad:  # (linear in the cotangent, it is recorded unless a backward records nothing)
        raise NotTwiceDifferentiable("f's pullback recorded no graph")
    last = len(tangents) - 1
    products = []
    for i, t in enumerate(tangents):
        tangent = like(t, alias)
        try:  # (f has run: only the double backward can raise here)
            (product,) = grad_along(vjp, (cotangent,), tangent, create_graph or i < last, create_graph)
        except RuntimeError as err:
            raise NotTwiceDifferentiable(str(err)) from err
        if product is None:  # (the pullback is linear in the cotangent: it reaches it unless a backward cut it)
            raise NotTwiceDifferentiable("f's pullback does not reach the cotangent")
        products.append(_not_sharing(product, tangent))
    return tuple(products)


def double_backward(y: Any, alias: Any, tangents: Sequence[Any], create_graph: bool) -> tuple[Any, tuple[Any, ...]]:
    """The gradient of a scalar ``y`` and its hvps along ``tangents``: reverse over
    reverse (zeros where ``y`` does not depend on ``alias``, or only linearly)."""
    (g,) = grad_of_scalar(y, (alias,), True)
    if g is None:
        return torch.zeros_like(alias), tuple(torch.zeros_like(alias) for _ in tangents)
    last = len(tangents) - 1
    hvps = []
    for i, t in enumerate(tangents):
        tangent = like(t, alias)
        hv = _backward(g, alias, tangent, retain=create_graph or i < last, create_graph=create_graph)
        hvps.append(_not_sharing(hv, tangent))  # (a quadratic f's hvp may be the tangent itself)
    return (g if create_graph else g.detach()), tuple(hvps)


def hvp_backward(y: Any, alias: Any, tangents: Sequence[Any], create_graph: bool) -> tuple[Any, ...]:
    """The hvps of a scalar ``y`` along ``tangents`` (:func:`double_backward`'s alone)."""
    return double_backward(y, alias, tangents, create_graph)[1]


def hessian_backward(y: Any, alias: Any, cotangents: Any, create_graph: bool) -> tuple[Any, Any]:
    """The gradient of a scalar ``y`` and its hessian: reverse over reverse, the
    second pass batched over the standard basis (``is_grads_batched``: one backward
    of the gradient, vectorised, as ``torch.autograd.functional.hessian(...,
    vectorize=True)`` computes it); zeros where ``y`` does not depend on ``alias``,
    or only linearly."""
    (g,) = grad_of_scalar(y, (alias,), True)
    n, shape = alias.numel(), tuple(alias.shape)
    if g is None:
        return torch.zeros_like(alias), alias.new_zeros(shape + shape)
    if not g.requires_grad or n == 0:
        hessian = alias.new_zeros(shape + shape)
    else:
        basis = torch.eye(n, dtype=alias.dtype, device=alias.device).view(n, *shape)
        (rows,) = torch.autograd.grad(
            g,
            alias,
            basis,
            retain_graph=create_graph,
            create_graph=create_graph,
            allow_unused=True,
            is_grads_batched=True,
        )
        hessian = alias.new_zeros(shape + shape) if rows is None else rows.reshape(shape + shape)
    return (g if create_graph else g.detach()), hessian
