"""The torch host: ``g`` as a torch operation, its derivatives from the inner backend.

``g`` is a ``torch.autograd.Function`` (``forward`` and ``setup_context`` apart,
as ``torch.func`` needs) whose backward is the pullback and whose ``jvp`` is the
pushforward, each itself a ``Function`` (so ``torch.func.jacrev``, which vmaps
the backward, and ``jacfwd``, which vmaps the ``jvp``, find a ``vmap`` rule there
too). Every ``Function`` has a ``vmap`` staticmethod: a batch of tangents at one
point is one call of the inner backend with that many pushforwards or pullbacks
(one Jacobian with :class:`di.AutoSparse`); a batch of points loops over them.
Under ``torch.compile``, ``g`` is one opaque operator (:mod:`torch.library`
``custom_op``, see :mod:`di.mixing.compile_torch`), not a graph break.

Tensors reach the inner engine by DLPack (zero-copy on CPU and on an
accelerator when both libraries are there) or as NumPy views; results come
back on ``x``'s device in the dtypes ``f`` returned (pullbacks in ``x``'s).
A derivative of the pullback with respect to the point (second order through
``g``) raises :class:`di.UnsupportedOperatorError`; contexts that require grad
raise :class:`di.InvalidInputError` when torch asks for their derivative.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.utils._pytree as torch_pytree
from torch.utils._python_dispatch import TorchDispatchMode

from di.errors import DIError, InvalidInputError, UnsupportedOperatorError
from di.mixing.calls import Call, handover, stack_leaves
from di.mixing.core import DifferentiateWith, Host, once
from di.pytrees import tree_flatten, tree_unflatten

__all__ = ["HOST", "TorchHost"]


class _Site:
    """One call of ``g``: its :class:`Call`, the number of ``x`` leaves and
    operands, and the dtypes and device of the leaves on both sides."""

    __slots__ = (
        "__weakref__",
        "_y_dtypes",
        "call",
        "device",
        "g",
        "linearize",
        "nc",
        "nx",
        "order",
        "residual",
        "x_dtypes",
    )

    def __init__(self, g: DifferentiateWith, call: Call, x_dtypes: Sequence[Any], device: Any, nc: int) -> None:
        self.g, self.call, self.nx, self.nc = g, call, len(x_dtypes), nc
        self.x_dtypes, self.device = list(x_dtypes), device
        self._y_dtypes: list[Any] | None = None
        # whether the forward pass keeps f's pullback for the backward pass (set per call:
        # torch records this call for a backward pass), and the one it kept until
        # setup_context takes it
        self.linearize = False
        self.residual: Any = None
        self.order: tuple[int, ...] = ()  # under torch.compile: x's leaves in di's order (see _register)

    @property
    def y_dtypes(self) -> list[Any]:
        """The dtypes of ``f``'s output leaves (known once ``f`` ran: the forward
        pass runs it before anything asks)."""
        if self._y_dtypes is None:
            self._y_dtypes = [getattr(torch, dtype) for _, dtype in self.call.output().specs]
        return self._y_dtypes

    def tensors(self, leaves: Sequence[Any], dtypes: Sequence[Any]) -> tuple[Any, ...]:
        """Inner-engine leaves as tensors of these dtypes on ``x``'s device."""
        device = self.device
        return tuple(handover(leaf, "torch").to(device=device, dtype=dtype) for leaf, dtype in zip(leaves, dtypes))

    def split(self, tensors: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        """``(x leaves, context operands, tangents)`` of a flat argument list."""
        nx, nc = self.nx, self.nc
        return _plain(tensors[:nx]), _plain(tensors[nx : nx + nc]), _plain(tensors[nx + nc :])


def _plain(tensors: Sequence[Any]) -> list[Any]:
    return [t.detach() for t in tensors]


def _front(tensors: Sequence[Any], dims: Sequence[int | None], size: int) -> list[Any]:
    """Every tensor with its batch axis first (broadcast where it has none)."""
    return [t.movedim(d, 0) if d is not None else t.expand(size, *t.shape) for t, d in zip(tensors, dims)]


def _nonzero(tangent: Any) -> bool:
    """Whether a tangent of ``g``'s point may be nonzero: whether torch asked for a
    derivative with respect to it. ``torch.func.jvp`` (and ``jacfwd``) materialises
    zeros for the inputs it does not differentiate; under ``vmap`` those zeros are
    batched, and a batched tensor cannot be read as one ``bool``. The tensor under
    ``torch.func``'s wrappers (each level's batch, or a transform's wrapper, unwrapped
    in turn) holds every value of the tangent in every batch, so the tangent is zero
    when all of those are; a tangent that still cannot be read counts as nonzero."""
    if tangent is None:
        return False
    functorch = torch._C._functorch
    while functorch.is_functorch_wrapped_tensor(tangent):
        tangent = functorch.get_unwrapped(tangent)
    try:
        return bool(tangent.detach().ne(0).any())
    except RuntimeError:
        return True


def _refuse_context_gradients(site: _Site, needs: Sequence[bool]) -> None:
    for index, needed in enumerate(needs):
        if needed:
            position = site.call.operand_positions[index] + 1
            raise InvalidInputError(
                f"{site.g!r} inside torch: torch asked for the derivative with respect to context {position}, a "
                f"Constant tensor that requires grad, which g does not differentiate. Make it part of x (a pytree of "
                f"the tensors to differentiate), or pass it detached (.detach())."
            )


def _second_order(site: _Site) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(
        f"{site.g!r} inside torch: a second derivative through g (torch.func.hessian, a backward with "
        f"create_graph=True differentiated again) needs the derivative of {site.g.backend!r}'s pullback or "
        f"pushforward with respect to x, which g does not provide. Compute second derivatives of f with di directly "
        f"(di.hessian(f, {site.g.backend!r}, x), di.hvp), or write f with di.array_namespace so torch differentiates "
        f"it natively."
    )


class _Value(torch.autograd.Function):
    """``g``'s outputs from ``x``'s leaves and the context operands."""

    @staticmethod
    def forward(site: _Site, *tensors: Any) -> Any:  # type: ignore[override]
        x, contexts, _ = site.split(tensors)
        if site.linearize:  # f runs once for this forward and its backward
            outputs, site.residual = site.call.forward(x, contexts)
        else:
            outputs = site.call.value(x, contexts)  # the first call describes the output
        return site.tensors(outputs, site.y_dtypes)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        site = ctx.site = inputs[0]
        ctx.residual, site.residual = site.residual, None
        ctx.save_for_backward(*inputs[1:])
        ctx.save_for_forward(*inputs[1:])

    @staticmethod
    def backward(ctx: Any, *cotangents: Any) -> Any:  # type: ignore[override]
        site = ctx.site
        _refuse_context_gradients(site, ctx.needs_input_grad[1 + site.nx :])
        residual, ctx.residual = ctx.residual, None  # (spent: a second backward prepares a pullback)
        if residual is not None and not torch.is_grad_enabled():  # (create_graph asks for _Linear's graph)
            x, contexts, _ = site.split(ctx.saved_tensors)
            grads = site.call.pullback(x, contexts, [_plain(cotangents)], residual)[0]
            return (None, *site.tensors(grads, site.x_dtypes), *[None] * site.nc)
        grads = _Linear.apply(site, True, "none", *ctx.saved_tensors, *cotangents)
        return (None, *grads, *[None] * site.nc)

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        site = ctx.site
        tensors = ctx.saved_tensors
        _refuse_context_gradients(site, [_nonzero(t) for t in tangents[1 + site.nx :]])
        x_tangents = [torch.zeros_like(x) if t is None else t for x, t in zip(tensors, tangents[1 : 1 + site.nx])]
        return _Linear.apply(site, False, "none", *tensors, *x_tangents)

    @staticmethod
    def vmap(info: Any, in_dims: Sequence[Any], site: _Site, *tensors: Any) -> Any:
        front = _front(tensors, in_dims[1:], info.batch_size)
        rows = [_Value.apply(site, *[t[i] for t in front]) for i in range(info.batch_size)]
        outputs = tuple(torch.stack(column) for column in zip(*rows))
        return outputs, (0,) * len(outputs)


class _Linear(torch.autograd.Function):
    """Pushforwards (``transpose`` false) or pullbacks of the trailing tensors at the
    point; ``mode``: ``"none"`` (one) or ``"tangents"`` (a leading batch of them)."""

    @staticmethod
    def forward(site: _Site, transpose: bool, mode: str, *tensors: Any) -> Any:  # type: ignore[override]
        x, contexts, linear = site.split(tensors)
        apply = site.call.pullback if transpose else site.call.pushforward
        dtypes = site.x_dtypes if transpose else site.y_dtypes
        if mode == "none":
            return site.tensors(apply(x, contexts, [linear])[0], dtypes)
        results = apply(x, contexts, [[leaf[i] for leaf in linear] for i in range(linear[0].shape[0])])
        return site.tensors(stack_leaves([site.tensors(r, dtypes) for r in results]), dtypes)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.site, ctx.transpose, ctx.mode = inputs[:3]
        ctx.save_for_backward(*inputs[3:])
        ctx.save_for_forward(*inputs[3:])

    @staticmethod
    def backward(ctx: Any, *cotangents: Any) -> Any:  # type: ignore[override]
        site = ctx.site
        point = site.nx + site.nc
        if any(ctx.needs_input_grad[3 : 3 + site.nx]):
            raise _second_order(site)
        _refuse_context_gradients(site, ctx.needs_input_grad[3 + site.nx : 3 + point])
        results = _Linear.apply(site, not ctx.transpose, ctx.mode, *ctx.saved_tensors[:point], *cotangents)
        return (None, None, None, *[None] * point, *results)

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        site = ctx.site
        point = site.nx + site.nc
        if any(_nonzero(t) for t in tangents[3 : 3 + point]):
            raise _second_order(site)
        tensors = ctx.saved_tensors
        linear = [torch.zeros_like(a) if t is None else t for a, t in zip(tensors[point:], tangents[3 + point :])]
        return _Linear.apply(site, ctx.transpose, ctx.mode, *tensors[:point], *linear)

    @staticmethod
    def vmap(info: Any, in_dims: Sequence[Any], site: _Site, transpose: bool, mode: str, *tensors: Any) -> Any:
        dims = in_dims[3:]
        point = site.nx + site.nc
        front = _front(tensors, dims, info.batch_size)
        if mode == "none" and all(d is None for d in dims[:point]):  # several tangents at one point
            outputs = _Linear.apply(site, transpose, "tangents", *tensors[:point], *front[point:])
        else:
            rows = [_Linear.apply(site, transpose, mode, *[t[i] for t in front]) for i in range(info.batch_size)]
            outputs = tuple(torch.stack(column) for column in zip(*rows))
        return outputs, (0,) * len(outputs)


class TorchHost(Host):
    """``g`` inside torch's autograd, forward-mode AD, ``torch.func`` and
    ``torch.compile`` (see the module's description)."""

    display = "PyTorch"
    classes = (torch.Tensor, torch.nn.Parameter)

    def owns(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor)

    def call(self, g: DifferentiateWith, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        if not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
            leaves = _as_tensors(leaves, values)
            x = tree_unflatten(treedef, leaves)  # (di's flattening gave the leaves)
        if torch.compiler.is_compiling():
            return _compiled(g, x, values)
        positions = g.operand_positions(self, values)
        operands = [values[i] for i in positions]
        x_specs = [(tuple(leaf.shape), str(leaf.dtype).removeprefix("torch.")) for leaf in leaves]
        operand_specs = {i: (tuple(values[i].shape), str(values[i].dtype).removeprefix("torch.")) for i in positions}
        call = g.call_for(treedef, x_specs, values, operand_specs)
        site = _Site(g, call, [leaf.dtype for leaf in leaves], leaves[0].device, len(operands))
        site.linearize = (
            torch.is_grad_enabled()
            and any(leaf.requires_grad for leaf in leaves)
            and torch._C._functorch.peek_interpreter_stack() is None
        )
        outputs = _Value.apply(site, *leaves, *operands)  # f's first run describes its output
        return call.output().unflatten(list(outputs))

    def linearize(
        self, f: Callable[..., Any], backend: Any, x: Any, values: Sequence[Any]
    ) -> tuple[Any, Callable[[Any], Any] | None] | None:
        """``f`` run once on detached aliases of ``x`` that require grad, its graph
        kept for one ``torch.autograd.grad`` (see :meth:`Host.linearize`)."""
        leaves, treedef = tree_flatten(x)
        if not all(isinstance(leaf, torch.Tensor) and leaf.is_floating_point() for leaf in leaves):
            return None
        inputs = [leaf.detach().requires_grad_() for leaf in leaves]
        with torch.enable_grad():
            y = f(tree_unflatten(treedef, inputs), *values)
        outputs = tree_flatten(y)[0]
        recorded = [i for i, out in enumerate(outputs) if isinstance(out, torch.Tensor) and out.requires_grad]
        if not recorded:  # no graph to x (a constant f, or one torch cannot see through)
            return y, None

        def pullback(cotangent: Any) -> Any:
            cotangents = tree_flatten(cotangent)[0]
            grads = torch.autograd.grad(
                [outputs[i] for i in recorded],
                inputs,
                [cotangents[i].to(dtype=outputs[i].dtype) for i in recorded],
                allow_unused=True,
                materialize_grads=True,
            )
            return tree_unflatten(treedef, list(grads))

        return _detached(y), once(pullback)

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """Undoes what ``f`` writes into tensors (a batch norm's running statistics)
        and the draws it takes from torch's random streams (dropout's masks)."""
        devices = [torch.cuda.current_device()] if torch.cuda.is_initialized() else []
        restoring = _Restoring()
        with torch.random.fork_rng(devices=devices):
            try:
                with restoring:
                    yield
            finally:
                restoring.restore()


def _as_tensors(leaves: Sequence[Any], values: Sequence[Any]) -> list[Any]:
    """``x``'s leaves as tensors: NumPy ones (and Python numbers) join the torch
    values on their device, ``x``'s other leaves' or, for an ``x`` of NumPy alone,
    the device of the torch contexts that made torch the host."""
    like = next((v for v in (*leaves, *values) if isinstance(v, torch.Tensor)), None)
    device = None if like is None else like.device
    return [leaf if isinstance(leaf, torch.Tensor) else torch.as_tensor(leaf, device=device) for leaf in leaves]


def _detached(y: Any) -> Any:
    """``f``'s output with each tensor detached (its graph is the pullback's)."""
    leaves, treedef = tree_flatten(y)
    return tree_unflatten(treedef, [leaf.detach() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves])


class _Restoring(TorchDispatchMode):
    """Keeps a copy of every tensor an operator writes into, to write it back
    (a probe's writes, as a batch norm's statistics, leave nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: dict[int, tuple[Any, Any]] = {}
        self.made: dict[int, Any] = {}  # the tensors the probe made (held: their ids stay theirs)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        for index, argument in enumerate(func._schema.arguments):
            # (batch norm's kernels write their running statistics without saying so in their schema)
            written = argument.alias_info is not None and argument.alias_info.is_write
            if not written and not argument.name.startswith("running_"):
                continue
            value = args[index] if index < len(args) else kwargs.get(argument.name)
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(tensor, torch.Tensor) and id(tensor) not in self.saved and id(tensor) not in self.made:
                    self.saved[id(tensor)] = (tensor, tensor.detach().clone())
        result = func(*args, **kwargs)
        for tensor in result if isinstance(result, (list, tuple)) else (result,):
            if isinstance(tensor, torch.Tensor):
                self.made.setdefault(id(tensor), tensor)
        return result

    def restore(self) -> None:
        with torch.no_grad():
            for tensor, copy in self.saved.values():
                if tensor.shape == copy.shape:
                    tensor.copy_(copy)
        self.saved.clear()
        self.made.clear()


HOST = TorchHost()


# --- under torch.compile: one opaque operator -------------------------------------------------
# Dynamo traces g's call up to here; what it cannot trace (signatures, preps, f) runs in the
# registration below, called once per trace as a constant, and in the operators' real and fake
# implementations. A compiled graph refers to its site by a number, the only kind of value a
# custom operator's argument can be that reaches the site. The registry holds sites weakly and
# g holds its own (the compiled function's code reaches g: it closes over it, or is passed it):
# a site lives as long as its g, so deleting g and the functions compiled around it frees g, f
# and what f owns, as a prep's programs are freed with the prep. The numbers come from a counter
# and are never reused: a graph kept past its g finds no site rather than another g's.

_COMPILED: weakref.WeakValueDictionary[int, _Site] = weakref.WeakValueDictionary()
_KEYS = itertools.count()
_SITES_ATTRIBUTE = "_di_torch_compiled_sites"  # on g: the sites its traces registered


@torch._dynamo.assume_constant_result
def _register(
    g: DifferentiateWith,
    skeleton: Any,
    x_meta: tuple[Any, ...],
    positions: tuple[int, ...],
    operand_meta: tuple[Any, ...],
    captured: tuple[Any, ...],
) -> int:
    order, treedef = tree_flatten(skeleton)  # (torch's positions, in di's order)
    x_meta = tuple(x_meta[i] for i in order)
    x_specs = [(tuple(shape), str(dtype).removeprefix("torch.")) for shape, dtype, _ in x_meta]
    operand_specs = {
        i: (tuple(shape), str(dtype).removeprefix("torch.")) for i, (shape, dtype) in zip(positions, operand_meta)
    }
    call = g.call_for(treedef, x_specs, captured, operand_specs)
    site = _Site(g, call, [dtype for _, dtype, _ in x_meta], x_meta[0][2], len(positions))
    site.order = tuple(order)
    key = next(_KEYS)
    vars(g).setdefault(_SITES_ATTRIBUTE, []).append(site)  # the strong reference (g -> site -> g: a cycle gc frees)
    _COMPILED[key] = site
    return key


def _site(key: int) -> _Site:
    """The site of a compiled graph's operator; a clear error once its ``g`` is gone."""
    site = _COMPILED.get(key)
    if site is None:
        raise DIError(
            "A torch.compile'd function called a di.DifferentiateWith g that has since been freed (the graph "
            "refers to g's registration, which lives as long as g does): a backward pass run after g and the "
            "compiled function were deleted, or a compiled graph reused for another g. Keep g alive as long as "
            "the compiled function and the tensors it returned are used."
        )
    return site


@torch._dynamo.assume_constant_result
def _x_order(key: int) -> tuple[int, ...]:
    """The positions, in torch's flattening of ``x``, of the leaves in di's order."""
    return _site(key).order


@torch._dynamo.assume_constant_result
def _output_spec(key: int) -> Any:
    output = _site(key).call.output()
    return torch_pytree.tree_flatten(output.unflatten([0] * len(output.specs)))[1]


@torch._dynamo.assume_constant_result
def _refusal(g: DifferentiateWith) -> str:
    """Why the traced call cannot be compiled (run at tracing, as a constant), or
    ``""``: inside a torch.func transform that differentiates (``grad``, ``jvp``...),
    a custom operator has no derivative torch.func can use."""
    interpreter = torch._C._functorch.peek_interpreter_stack()
    kind = "" if interpreter is None else str(interpreter.key()).rsplit(".", 1)[-1]
    if kind in ("", "Vmap", "Functionalize"):
        return ""
    return (
        f"{g!r} under torch.compile inside a torch.func {kind.lower()} transform: PyTorch keeps g one opaque "
        f"operator of the compiled graph, and torch.func cannot differentiate such an operator. Apply the transform "
        f"outside torch.compile, or compile the function and differentiate it with .backward() or "
        f"torch.autograd.grad."
    )


def _compiled(g: DifferentiateWith, x: Any, values: list[Any]) -> Any:
    refusal = _refusal(g)
    if refusal:
        raise UnsupportedOperatorError(refusal)
    leaves, spec = torch_pytree.tree_flatten(x)
    positions = tuple(g.operand_positions(HOST, values))
    operands = [values[i] for i in positions]
    captured = tuple(None if i in positions else v for i, v in enumerate(values))
    x_meta = tuple((tuple(leaf.shape), leaf.dtype, leaf.device) for leaf in leaves)
    operand_meta = tuple((tuple(values[i].shape), values[i].dtype) for i in positions)
    # x's structure reaches the registration as x with each leaf's position (in torch's
    # order) in its place: a TreeSpec made while dynamo traces is a stand-in, which reaches
    # a function called as a constant without its fields ('TreeSpec' object has no attribute
    # 'num_leaves', for a dict x). The operators take the leaves in di's order (optree's:
    # a dict's sorted keys), which the registration gives.
    skeleton = torch_pytree.tree_unflatten(list(range(len(leaves))), spec)
    # operator.index makes dynamo compile the key in: the registration can end the graph, and
    # the rest of this function then gets the key as an argument, which dynamo turns into a
    # SymInt when a later trace (a new shape) passes another one, and a SymInt is no key.
    key = operator.index(_register(g, skeleton, x_meta, positions, operand_meta, captured))
    leaves = [leaves[i] for i in _x_order(key)]
    outputs = torch.ops.di_mixing.value([*leaves, *operands], key)
    return torch_pytree.tree_unflatten(outputs, _output_spec(key))


@torch.library.custom_op("di_mixing::value", mutates_args=())
def _value_op(tensors: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    return list(_Value.forward(_site(key), *tensors))


@_value_op.register_fake
def _value_fake(tensors: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    site = _site(key)
    specs = site.call.output().specs
    return [tensors[0].new_empty(shape, dtype=dtype) for (shape, _), dtype in zip(specs, site.y_dtypes)]


@torch.library.custom_op("di_mixing::pullback", mutates_args=())
def _pullback_op(tensors: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    return list(_Linear.forward(_site(key), True, "none", *tensors))


@_pullback_op.register_fake
def _pullback_fake(tensors: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    return [torch.empty_like(t) for t in tensors[: _site(key).nx]]


def _value_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    tensors, key = inputs
    ctx.key = key
    ctx.save_for_backward(*tensors)


def _value_backward(ctx: Any, cotangents: list[Any]) -> Any:
    site = _site(ctx.key)
    _refuse_context_gradients(site, ctx.needs_input_grad[0][site.nx :])
    tensors = ctx.saved_tensors
    specs = site.call.output().specs
    cotangents = [
        torch.zeros(shape, dtype=dtype, device=site.device) if c is None else c
        for c, (shape, _), dtype in zip(cotangents, specs, site.y_dtypes)
    ]
    grads = torch.ops.di_mixing.pullback([*tensors[: site.nx + site.nc], *cotangents], ctx.key)
    return [*grads, *[None] * site.nc], None


def _pullback_backward(ctx: Any, cotangents: list[Any]) -> Any:
    raise _second_order(_site(ctx.key))


def _looped(op: Any) -> Any:
    """The vmap rule of an operator on a list of tensors: one call per element of the batch."""

    def rule(info: Any, in_dims: Any, tensors: list[Any], key: int) -> Any:
        front = _front(tensors, in_dims[0], info.batch_size)
        rows = [op([t[i] for t in front], key) for i in range(info.batch_size)]
        outputs = [torch.stack(column) for column in zip(*rows)]
        return outputs, [0] * len(outputs)

    return rule


_value_op.register_autograd(_value_backward, setup_context=_value_context)
_pullback_op.register_autograd(_pullback_backward, setup_context=_value_context)
_value_op.register_vmap(_looped(torch.ops.di_mixing.value))
_pullback_op.register_vmap(_looped(torch.ops.di_mixing.pullback))
