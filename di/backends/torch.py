"""PyTorch adapter: ``torch.autograd.grad`` for reverse mode, ``torch.func`` for the
rest, and ``torch.compile`` around either when asked.

Reverse mode (gradient, pullback) differentiates a detached ``requires_grad_()``
alias of ``x`` (no copy) with ``torch.autograd.grad``: the fastest path on small
inputs, and the one that lets ``f`` write into ``Cache`` buffers. Forward mode and
second order use ``torch.func`` (``jvp``, ``vmap``, ``jacfwd``/``jacrev``,
forward-over-reverse hvp), never ``torch.autograd.functional``'s double-backward
tricks. ``torch.func`` cannot write traced values into buffers, so with a
``Cache`` those operators are built from reverse mode instead.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from di.backends import fallbacks
from di.backends.protocol import (
    Adapter,
    Programs,
    counting_static_values,
    is_real_scalar,
    raise_bad_output,
    static_positions,
)
from di.backends.selectors import AutoTorch
from di.contexts import Cache, Context
from di.errors import RecompileWarning, UnsupportedContextError
from di.families import TORCH, converter, family_of, identity
from di.pytrees import is_pytree, tree_flatten, tree_unflatten

__all__ = ["TorchAdapter"]

_func = torch.func
_FORWARD_MODE_LOCK = threading.RLock()


class TorchAdapter(Adapter):
    """Adapter for :class:`di.AutoTorch`.

    ``Cache`` tensors are passed to ``f`` as the caller's buffer (numpy buffers
    through ``torch.from_numpy``, sharing memory) and detached after the call, so
    they hold no graph. Compiled (``compile=True``): ``torch.compile`` is applied
    once at preparation (``fullgraph=True`` unless ``compile_options`` says
    otherwise) and run there, so compilation happens then; Python float contexts
    are passed as 0-d tensors so a new value does not recompile; ints and other
    hashable values are compiled in.
    """

    family = TORCH

    @property
    def native_pytrees(self) -> frozenset[str]:  # type: ignore[override]
        """Eager gradients take pytrees leaf by leaf; the rest is flattened."""
        return frozenset() if self.compiled else frozenset({"gradient"})

    @property
    def selector(self) -> AutoTorch:
        assert isinstance(self.backend, AutoTorch)
        return self.backend

    @property
    def compiled(self) -> bool:  # type: ignore[override]
        return self.selector.compile

    # --- inputs and compilation -------------------------------------------------------

    def _context_converters(self, x: Any, contexts: Sequence[Context]) -> list[Callable[[Any], Any]]:
        """Converters of the context values; on compiled backends Python scalars
        that are traced become 0-d tensors (floats in ``x``'s dtype)."""
        converters = self.input_converters([c.value for c in contexts])
        if self.compiled:
            statics = static_positions(contexts, self.backend)
            x_dtype = self.input_converters([x])[0](np.asarray(x) if isinstance(x, float) else x).dtype
            for i, context in enumerate(contexts):
                if i not in statics and isinstance(context.value, (int, float)):
                    converters[i] = _scalar_to_tensor(x_dtype if isinstance(context.value, float) else None)
        return converters

    def _compile(
        self, function: Callable[..., Any], warm_up: Callable[[Callable[..., Any]], Any]
    ) -> Callable[..., Any]:
        """``torch.compile(function)``, compiled now by ``warm_up(compiled)``. A graph
        break under the default ``fullgraph=True`` becomes a
        :class:`di.RecompileWarning`, and ``function`` is compiled with graph breaks."""
        options = self.selector.compile_kwargs
        fullgraph_default = "fullgraph" not in options
        options.setdefault("fullgraph", True)
        compiled = torch.compile(function, **options)
        try:
            warm_up(compiled)
        except torch._dynamo.exc.Unsupported as err:
            if not fullgraph_default:
                raise
            reason = str(err).strip().splitlines()[0]
            warnings.warn(
                f"{self.backend!r}: f cannot be compiled as one graph ({reason}); it runs with graph breaks, "
                f"partly eagerly. Remove the data-dependent Python control flow, or pass "
                f"compile_options={{'fullgraph': False}} to accept graph breaks silently.",
                RecompileWarning,
                stacklevel=6,
            )
            options["fullgraph"] = False
            compiled = torch.compile(function, **options)
            warm_up(compiled)
        return compiled

    def _statics(self, contexts: Sequence[Context], lead: int = 1) -> tuple[int, ...]:
        return tuple(lead - 1 + i for i in static_positions(contexts, self.backend)) if self.compiled else ()

    # --- reverse mode: torch.autograd.grad --------------------------------------------

    def _reverse(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], operator: str) -> Callable[..., Any]:
        """``run(x, cotangents, values) -> (y, tuple of input cotangents)``: one
        forward pass of ``f`` (compiled when asked) and one backward per cotangent."""
        backend = self.backend
        to_torch_x = self.input_converters([x])[0]
        convert_contexts = self._context_converters(x, contexts)
        cache_positions = tuple(
            i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == TORCH
        )

        def run(x: Any, cotangents: Sequence[Any], values: Sequence[Any], f: Callable[..., Any] = f) -> Any:
            leaf = to_torch_x(x).detach().requires_grad_()
            values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            try:
                with torch.enable_grad():
                    y = f(leaf, *values)
                if not isinstance(y, torch.Tensor) or not y.is_floating_point():
                    raise_bad_output(y, backend, operator)
                results = tuple(
                    _backward(y, leaf, _like(t, y), retain=i < len(cotangents) - 1) for i, t in enumerate(cotangents)
                )
            finally:
                for i in cache_positions:
                    values[i].detach_()
            return y.detach(), results

        if self.compiled:
            values = [c.value for c in contexts]
            y_like = _example_cotangent(f, x, values, to_torch_x, convert_contexts)
            compiled_f = self._compile(f, lambda compiled: run(x, (y_like,), values, compiled))

            def run_compiled(x: Any, cotangents: Sequence[Any], values: Sequence[Any]) -> Any:
                return run(x, cotangents, values, compiled_f)

            return run_compiled
        return run

    def prepare_gradient_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        if self.compiled:
            values = [c.value for c in contexts]
            warm_up = lambda compiled: self._gradient_fast(compiled, x, contexts, False)(x, *values)
            f = self._compile(f, warm_up)
        statics = self._statics(contexts)
        return {
            name: counting_static_values(self._gradient_fast(f, x, contexts, with_value), statics, self.backend)
            for name, with_value in (("gradient", False), ("value_and_gradient", True))
        }

    def _gradient_fast(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], with_value: bool) -> Any:
        """The gradient hot path: what a careful torch user writes (detach, require
        grad, one forward, ``torch.autograd.grad``) and as little else as possible."""
        if is_pytree(x):
            return self._tree_gradient(f, x, contexts, with_value)
        backend = self.backend
        to_torch_x = self.input_converters([x])[0]
        convert_contexts = self._context_converters(x, contexts)
        convert_any = any(convert is not identity for convert in convert_contexts)
        cache_positions = tuple(
            i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == TORCH
        )
        tensor, grad, is_grad_enabled, enable_grad = (
            torch.Tensor,
            torch.autograd.grad,
            torch.is_grad_enabled,
            torch.enable_grad,
        )

        def run(x: Any, *values: Any) -> Any:
            leaf = (x if to_torch_x is identity else to_torch_x(x)).detach().requires_grad_()
            if convert_any:
                values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            if is_grad_enabled():
                y = f(leaf, *values)
            else:
                with enable_grad():
                    y = f(leaf, *values)
            if y.__class__ is not tensor:
                y = _scalar_tensor(y, leaf, backend)
            if y.requires_grad:
                try:
                    g = grad(y, leaf, allow_unused=True)[0]
                except RuntimeError:  # autograd refuses non-scalar and complex outputs: say why
                    if y.dim() != 0 or not y.is_floating_point():
                        raise_bad_output(y, backend)
                    raise
            elif y.dim() != 0 or not y.is_floating_point():
                raise_bad_output(y, backend)
            else:
                g = None
            if g is None:  # f does not depend on x
                g = torch.zeros_like(leaf)
            return (y.detach(), g) if with_value else g

        if not cache_positions:
            return run

        def run_detaching_caches(x: Any, *values: Any) -> Any:
            try:
                return run(x, *values)
            finally:
                for i in cache_positions:
                    values[i].detach_()

        return run_detaching_caches

    def _tree_gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], with_value: bool) -> Any:
        """Gradient with respect to a pytree of tensors: every leaf is a detached
        ``requires_grad_()`` alias and one ``torch.autograd.grad`` call returns the
        gradient of each (no flattening into one vector)."""
        backend = self.backend
        convert_contexts = self._context_converters(x, contexts)
        cache_positions = tuple(
            i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == TORCH
        )

        def run(x: Any, *values: Any) -> Any:
            leaves, spec = tree_flatten(x)
            leaves = [converter(family_of(leaf), TORCH)(leaf).detach().requires_grad_() for leaf in leaves]
            values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            try:
                with torch.enable_grad():
                    y = f(tree_unflatten(spec, leaves), *values)
                if not (isinstance(y, torch.Tensor) and y.dim() == 0 and y.is_floating_point()):
                    y = _scalar_tensor(y, leaves[0] if leaves else torch.zeros(()), backend)
                grads = torch.autograd.grad(y, leaves, allow_unused=True) if y.requires_grad else [None] * len(leaves)
            finally:
                for i in cache_positions:
                    values[i].detach_()
            g = tree_unflatten(spec, [torch.zeros_like(leaf) if d is None else d for leaf, d in zip(leaves, grads)])
            return (y.detach(), g) if with_value else g

        return run

    def prepare_pullback_programs(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        run = self._reverse(f, x, contexts, "pullback")

        def value_and_pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            return run(x, ty, values)

        def pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            return run(x, ty, values)[1]

        statics = self._statics(contexts, lead=2)
        return {
            "pullback": counting_static_values(pullback, statics, self.backend),
            "value_and_pullback": counting_static_values(value_and_pullback, statics, self.backend),
        }

    # --- forward mode and second order: torch.func ----------------------------------------

    def _functional(
        self,
        core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        names: tuple[str, str],
    ) -> Programs:
        """Programs from ``core(x, [tangents,] *values)``, a pure ``torch.func``
        function returning the ``value_and_*`` tuple (compiled when asked)."""
        to_torch_x = self.input_converters([x])[0]
        convert_contexts = self._context_converters(x, contexts)

        def arguments(x: Any, tangents: Sequence[Any] | None, values: Sequence[Any]) -> list[Any]:
            xt = to_torch_x(x).detach()
            args = [xt, *[convert(v) for convert, v in zip(convert_contexts, values)]]
            if tangents is not None:
                args.insert(1, tuple(_like(t, xt) for t in tangents))
            return args

        function = core
        if self.compiled:
            example = arguments(x, tangents, [c.value for c in contexts])
            function = self._compile(core, lambda compiled: compiled(*example))

        # torch.func keeps its forward-mode state (dual levels) per process, not per
        # thread: calls from several threads must take turns.
        lock = _FORWARD_MODE_LOCK
        if tangents is None:

            def full(x: Any, *values: Any) -> Any:
                with lock:
                    return function(*arguments(x, None, values))

        else:

            def full(x: Any, tangents: Sequence[Any], *values: Any) -> Any:  # type: ignore[misc]
                with lock:
                    return function(*arguments(x, tangents, values))

        def plain(*args: Any) -> Any:
            return full(*args)[-1]

        statics = self._statics(contexts, lead=1 if tangents is None else 2)
        return {
            names[0]: counting_static_values(plain, statics, self.backend),
            names[1]: counting_static_values(full, statics, self.backend),
        }

    def _checked(self, f: Callable[..., Any], operator: str, scalar: bool) -> Callable[..., Any]:
        backend = self.backend

        def checked(x: Any, *values: Any) -> Any:
            y = f(x, *values)
            if not isinstance(y, torch.Tensor) or not y.is_floating_point() or (scalar and not is_real_scalar(y)):
                raise_bad_output(y, backend, operator)
            return y

        return checked

    def prepare_pushforward_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        if _has_cache(contexts):
            return fallbacks.pushforward_programs(self, f, x, tx, contexts)
        checked = self._checked(f, "pushforward", scalar=False)

        def core(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            def fx(x: Any) -> Any:
                return checked(x, *values)

            if len(tx) == 1:
                y, dy = _func.jvp(fx, (x,), (tx[0],))  # type: ignore[misc]
                return y, (dy,)
            if not tx:
                return fx(x), ()
            dys = _func.vmap(lambda t: _func.jvp(fx, (x,), (t,))[1])(torch.stack(tx))
            return fx(x), tuple(dys.unbind(0))

        return self._functional(core, x, tx, contexts, ("pushforward", "value_and_pushforward"))

    def prepare_jacobian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        if _has_cache(contexts):
            return fallbacks.jacobian_programs(self, f, x, contexts, forward=False)
        checked = self._checked(f, "jacobian", scalar=False)
        y = fallbacks.evaluate_output(self, f, x, contexts)
        if not isinstance(y, torch.Tensor) or not y.is_floating_point():
            raise_bad_output(y, self.backend, "jacobian")
        mode = self.selector.mode
        if mode is None:
            mode = "forward" if math.prod(getattr(x, "shape", ())) <= y.numel() else "reverse"
        transform = _func.jacfwd if mode == "forward" else _func.jacrev
        empty = y.numel() == 0 or math.prod(getattr(x, "shape", ())) == 0

        def core(x: Any, *values: Any) -> Any:
            def fx(x: Any) -> Any:
                y = checked(x, *values)
                return y, y

            if empty:  # torch.func cannot take an empty basis
                y = checked(x, *values)
                return y, y.new_zeros(y.shape + x.shape)
            jac, y = transform(fx, has_aux=True)(x)
            return y, _as_dtype(jac, y)

        return self._functional(core, x, None, contexts, ("jacobian", "value_and_jacobian"))

    def prepare_derivative_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        if _has_cache(contexts):
            return fallbacks.derivative_programs(self, f, x, contexts)
        checked = self._checked(f, "derivative", scalar=False)

        def core(x: Any, *values: Any) -> Any:
            y, dy = _func.jvp(lambda x: checked(x, *values), (x,), (torch.ones_like(x),))  # type: ignore[misc]
            return y, _as_dtype(dy, y)

        return self._functional(core, x, None, contexts, ("derivative", "value_and_derivative"))

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        if _has_cache(contexts):
            raise UnsupportedContextError(
                f"{self.backend!r} cannot use Cache contexts for second_derivative: torch.func cannot write "
                f"traced values into buffers. Pass the buffer as a Constant and build new tensors in f, or use "
                f"AutoJAX or AutoFiniteDiff."
            )
        checked = self._checked(f, "second_derivative", scalar=False)

        def core(x: Any, *values: Any) -> Any:
            one = torch.ones_like(x)

            def value_and_derivative(x: Any) -> Any:
                return _func.jvp(lambda x: checked(x, *values), (x,), (one,))

            (y, dy), (_, d2y) = _func.jvp(value_and_derivative, (x,), (one,))  # type: ignore[misc]
            return y, dy, d2y

        return self._functional(
            core, x, None, contexts, ("second_derivative", "value_derivative_and_second_derivative")
        )

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        if _has_cache(contexts):
            return self._hvp_double_backward(f, x, contexts)
        checked = self._checked(f, "hvp", scalar=True)

        def core(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            grad = _func.grad(lambda x: checked(x, *values))
            if len(tx) == 1:
                g, hv = _func.jvp(grad, (x,), (tx[0],))  # type: ignore[misc]
                return _as_dtype(g, x), (_as_dtype(hv, x),)
            if not tx:
                return _as_dtype(grad(x), x), ()
            hvs = _func.vmap(lambda t: _func.jvp(grad, (x,), (t,))[1])(torch.stack(tx))
            return _as_dtype(grad(x), x), tuple(_as_dtype(hv, x) for hv in hvs.unbind(0))

        return self._functional(core, x, tx, contexts, ("hvp", "gradient_and_hvp"))

    def _hvp_double_backward(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        """hvp by reverse over reverse, for ``f`` writing into a ``Cache`` (which
        ``torch.func`` cannot do). Eager only: AOTAutograd has no double backward."""
        if self.compiled:
            raise UnsupportedContextError(
                f"{self.backend!r} cannot use Cache contexts for hvp or hessian: torch.func cannot write into "
                f"buffers and compiled graphs have no double backward. Use AutoTorch() (eager), or pass the "
                f"buffer as a Constant and build new tensors in f."
            )
        backend = self.backend
        to_torch_x = self.input_converters([x])[0]
        convert_contexts = self.input_converters([c.value for c in contexts])
        cache_positions = tuple(
            i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == TORCH
        )

        def gradient_and_hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            leaf = to_torch_x(x).detach().requires_grad_()
            values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            try:
                with torch.enable_grad():
                    y = f(leaf, *values)
                    if not (isinstance(y, torch.Tensor) and is_real_scalar(y)):
                        raise_bad_output(y, backend, "hvp")
                    (g,) = torch.autograd.grad(y, leaf, create_graph=True)
                products = tuple(_backward(g, leaf, _like(t, leaf), retain=i < len(tx) - 1) for i, t in enumerate(tx))
            finally:
                for i in cache_positions:
                    values[i].detach_()
            return g.detach(), products

        def hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            return gradient_and_hvp(x, tx, *values)[1]

        return {"hvp": hvp, "gradient_and_hvp": gradient_and_hvp}

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        if _has_cache(contexts):
            return fallbacks.hessian_programs(self, f, x, contexts)
        checked = self._checked(f, "hessian", scalar=True)

        def core(x: Any, *values: Any) -> Any:
            def gradient_with_aux(x: Any) -> Any:
                g, y = _func.grad_and_value(lambda x: checked(x, *values))(x)
                return g, (y, g)

            if x.numel() == 0:  # jacfwd cannot take an empty input
                g, y = _func.grad_and_value(lambda x: checked(x, *values))(x)
                return y, g, x.new_zeros(x.shape + x.shape)
            hessian, (y, g) = _func.jacfwd(gradient_with_aux, has_aux=True)(x)
            return y, g, hessian

        return self._functional(core, x, None, contexts, ("hessian", "value_gradient_and_hessian"))


def _as_dtype(tangent: Any, primal: Any) -> Any:
    """torch.func.jvp can promote the tangent of a 0-d computation with a Python
    float to float64 while the primal stays float32: give the tangent the
    primal's dtype, as eager autograd would."""
    return tangent if tangent.dtype == primal.dtype else tangent.to(primal.dtype)


def _has_cache(contexts: Sequence[Context]) -> bool:
    return any(isinstance(c, Cache) for c in contexts)


def _like(tangent: Any, reference: Any) -> Any:
    """A tangent of any family as a tensor of ``reference``'s dtype and device."""
    tensor = converter(family_of(tangent), TORCH)(tangent) if family_of(tangent) else torch.tensor(tangent)
    if tensor.dtype != reference.dtype or tensor.device != reference.device:
        tensor = tensor.to(dtype=reference.dtype, device=reference.device)
    return tensor


def _backward(y: Any, leaf: Any, cotangent: Any, *, retain: bool) -> Any:
    if not y.requires_grad:
        return torch.zeros_like(leaf)
    (g,) = torch.autograd.grad(y, leaf, grad_outputs=cotangent, retain_graph=retain, allow_unused=True)
    return torch.zeros_like(leaf) if g is None else g


def _example_cotangent(
    f: Callable[..., Any],
    x: Any,
    values: Sequence[Any],
    to_torch_x: Callable[[Any], Any],
    convert_contexts: Sequence[Callable[[Any], Any]],
) -> Any:
    with torch.no_grad():
        y = f(to_torch_x(x).detach(), *[convert(v) for convert, v in zip(convert_contexts, values)])
    return torch.ones_like(y)


def _scalar_to_tensor(dtype: Any) -> Callable[[Any], Any]:
    """Python scalars become 0-d tensors, so torch.compile traces instead of
    guarding on (and recompiling for) each value. Floats take ``x``'s dtype so the
    result's dtype is what eager code would give."""

    def to_tensor(value: Any) -> Any:
        return torch.tensor(value, dtype=dtype)

    return to_tensor


def _scalar_tensor(y: Any, leaf: Any, backend: Any) -> Any:
    """Accept a Python float from ``f`` (a constant: zero gradient); refuse the rest."""
    if isinstance(y, float):
        return torch.tensor(y, dtype=leaf.dtype, device=leaf.device)
    raise_bad_output(y, backend)
    raise AssertionError("unreachable")  # pragma: no cover
