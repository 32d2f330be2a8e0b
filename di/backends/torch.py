"""PyTorch adapter: ``torch.autograd.grad`` for eager reverse mode, ``torch.func`` for
the rest, and ``torch.compile`` of ``torch.func`` programs when asked.

Eager reverse mode (gradient, pullback) differentiates a detached ``requires_grad_()``
alias of ``x`` (no copy) with ``torch.autograd.grad``: the fastest eager path on
small inputs, and the one that lets ``f`` write into ``Cache`` buffers. Forward
mode and second order use ``torch.func`` (``jvp``, ``vmap``, ``jacfwd``/``jacrev``,
forward-over-reverse hvp), never ``torch.autograd.functional``'s double-backward
tricks. ``torch.func`` cannot write traced values into buffers, so with a
``Cache`` those operators are built from reverse mode instead.

Compiled (``compile=True``), each operator family has two programs: the plain
operator's, whose graph returns its result alone (``torch.func.grad(f)`` for the
gradient: three to four times faster than a compiled ``f`` differentiated by
``torch.autograd.grad`` on this project's machines), compiled at preparation, and
the ``value_and_*`` one, compiled on its first call. Recompiles are watched: from
the second unexpected one a :class:`di.RecompileWarning` names dynamo's failing
guard, and at dynamo's limit :class:`di.RecompileLimitError` says what to change.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as _pytree

from di.backends import fallbacks
from di.backends.aux import outputs, split_output
from di.backends.compile import compiled_on_first_use
from di.backends.protocol import (
    Adapter,
    Programs,
    counting_static_values,
    is_real_scalar,
    plain_from_full,
    raise_bad_output,
    static_positions,
)
from di.backends.selectors import AutoTorch
from di.contexts import Cache, Context
from di.errors import RecompileLimitError, RecompileWarning, UnsupportedContextError
from di.families import converter, family_of, identity
from di.pytrees import is_pytree, tree_flatten, tree_unflatten

__all__ = ["TorchAdapter"]

_func = torch.func
_FORWARD_MODE_LOCK = threading.RLock()
# Each compiled program gets its own dynamo cache and recompile count: di compiles
# closures whose code object every prep shares, and dynamo counts per code object.
_ISOLATES_RECOMPILES = "isolate_recompiles" in inspect.signature(torch.compile).parameters
# dynamo records each failed guard under the compiled function's code object: di
# compares its length before and after a call (two dict lookups) to see recompiles.
_GUARD_FAILURES: Any = getattr(torch._dynamo.utils, "guard_failures", None)
_RECOMPILE_LIMIT_HIT: type[BaseException] = getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", RuntimeError)


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

    family = "torch"

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

    def _compile_options(self) -> dict[str, Any]:
        options = self.selector.compile_kwargs
        options.setdefault("fullgraph", True)
        if _ISOLATES_RECOMPILES:
            options.setdefault("isolate_recompiles", True)
        return options

    def _compile(
        self,
        function: Callable[..., Any],
        warm_up: Callable[[Callable[..., Any]], Any],
        static_argnums: tuple[int, ...] = (),
        graph_breaks: bool = True,
    ) -> tuple[Callable[..., Any], dict[str, Any]]:
        """``torch.compile(function)``, compiled now by ``warm_up(compiled)``, watched
        for recompiles; and the options it was compiled with. A graph break under
        the default ``fullgraph=True`` becomes a :class:`di.RecompileWarning`, and
        ``function`` is compiled with graph breaks.

        ``static_argnums``: the arguments of ``function`` that are compiled in, so
        that compiling for a new value of one is not taken for a recompile.
        ``graph_breaks=False``: ``function`` cannot run with graph breaks (a
        ``torch.func`` transform of ``f``), so dynamo's refusal is raised as is."""
        options = self._compile_options()
        fullgraph_default = "fullgraph" not in self.selector.compile_kwargs
        compiled = torch.compile(function, **options)
        try:
            warm_up(compiled)
        except torch._dynamo.exc.Unsupported as err:
            if not (fullgraph_default and graph_breaks):
                raise
            reason = str(err).strip().splitlines()[0]
            warnings.warn(
                f"{self.backend!r}: f cannot be compiled as one graph ({reason}); it runs with graph breaks, "
                f"partly eagerly. Remove the data-dependent Python control flow, or pass "
                f"compile_options={{'fullgraph': False}} to accept graph breaks silently.",
                RecompileWarning,
                stacklevel=_caller_stacklevel(),
            )
            options["fullgraph"] = False
            compiled = torch.compile(function, **options)
            warm_up(compiled)
        return self._watching_recompiles(compiled, function, static_argnums, options), options

    def _compile_on_first_use(
        self, function: Callable[..., Any], options: dict[str, Any], static_argnums: tuple[int, ...] = ()
    ) -> Callable[..., Any]:
        """``torch.compile(function)`` with the options another program of the prep
        was compiled with, compiling on its first call (once, under a lock)."""
        compiled = torch.compile(function, **options)
        return compiled_on_first_use(self._watching_recompiles(compiled, function, static_argnums, options))

    def _watching_recompiles(
        self,
        compiled: Callable[..., Any],
        function: Callable[..., Any],
        static_argnums: tuple[int, ...],
        options: dict[str, Any],
    ) -> Callable[..., Any]:
        """``compiled``, warning with :class:`di.RecompileWarning` (naming dynamo's
        failing guard) from the second recompile that no new static value explains,
        and turning dynamo's hard stop at its recompile limit into
        :class:`di.RecompileLimitError`."""
        backend, failures_by_code, code = self.backend, _GUARD_FAILURES, getattr(function, "__code__", None)
        compiled_keys: set[tuple[Any, ...]] = set()
        unexpected = 0

        def limit() -> Any:
            return options.get("recompile_limit") or torch._dynamo.config.recompile_limit

        def note_recompile(args: tuple[Any, ...], reason: str) -> None:
            nonlocal unexpected
            key = tuple(args[i] for i in static_argnums)
            if static_argnums and key not in compiled_keys:
                compiled_keys.add(key)  # a new static value compiles once: expected
                return
            unexpected += 1
            if unexpected >= 2:
                warnings.warn(
                    f"{backend!r}: torch.compile compiled f again ({unexpected} recompiles since preparation; at "
                    f"{limit()} it stops) because this guard failed: {reason}. f changes something dynamo "
                    f"guards on between calls: a Python global or attribute it reads or modifies (a call counter), "
                    f"or a Python value it closes over. Keep such side effects out of f and pass values that "
                    f"change as contexts (di.Constant(value) is traced).",
                    RecompileWarning,
                    stacklevel=_caller_stacklevel(),
                )

        if failures_by_code is None:
            return compiled
        # dynamo appends to this list (its record for the compiled function's code
        # object) at each recompile: two len() calls per call watch it. (After
        # torch._dynamo.reset(), which empties the record, recompiles go unwatched.)
        failures = failures_by_code[code]

        def watched(*args: Any) -> Any:
            before = len(failures)
            try:
                result = compiled(*args)
            except _RECOMPILE_LIMIT_HIT as err:
                reason = _guard_reason(failures[before]) if len(failures) > before else "unknown"
                raise RecompileLimitError(
                    f"{backend!r}: torch.compile reached its recompile limit ({limit()}) for f, and with "
                    f"fullgraph=True it cannot fall back to eager. The guard that failed at each call: {reason}. "
                    f"Keep Python side effects out of f (a global call counter, attributes it modifies) and pass "
                    f"values that change as contexts (di.Constant(value) is traced), or use AutoTorch() (eager); "
                    f"compile_options={{'recompile_limit': n}} raises the limit."
                ) from err
            if len(failures) != before:
                note_recompile(args, _guard_reason(failures[before]))
            return result

        return watched

    def _statics(self, contexts: Sequence[Context], lead: int = 1) -> tuple[int, ...]:
        return tuple(lead - 1 + i for i in static_positions(contexts, self.backend)) if self.compiled else ()

    # --- reverse mode: torch.autograd.grad --------------------------------------------

    def _reverse(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], operator: str, has_aux: bool = False
    ) -> Callable[..., Any]:
        """``run(x, cotangents, values, with_value) -> (y, tuple of input cotangents)``
        (``y`` is ``None`` without ``with_value``), and ``-> ((y, tuple), aux)``
        under ``has_aux``: one forward pass of ``f`` (compiled when asked) and one
        backward per cotangent."""
        backend = self.backend
        to_torch_x = self.input_converters([x])[0]
        convert_contexts = self._context_converters(x, contexts)
        cache_positions = tuple(
            i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == "torch"
        )

        convert_any = any(convert is not identity for convert in convert_contexts)
        tensor, is_grad_enabled = torch.Tensor, torch.is_grad_enabled

        def run(
            x: Any, cotangents: Sequence[Any], values: Sequence[Any], with_value: bool, f: Callable[..., Any] = f
        ) -> Any:
            # the hot path of a pullback: what a torch user writes, and little else
            if not is_grad_enabled():  # no_grad or inference_mode: f must still be recorded
                with _recording():
                    return run(x, cotangents, _normal_tensors(values), with_value, f)
            leaf = _leaf(x if to_torch_x is identity else to_torch_x(x))
            if convert_any:
                values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            try:
                y = f(leaf, *values)
                if has_aux:
                    y, aux = split_output(y, backend, operator)
                if y.__class__ is not tensor or not y.is_floating_point():
                    if not isinstance(y, torch.Tensor) or not y.is_floating_point():
                        raise_bad_output(y, backend, operator)
                if len(cotangents) == 1:
                    results: tuple[Any, ...] = (_backward(y, leaf, _like(cotangents[0], y), retain=False),)
                else:
                    last = len(cotangents) - 1
                    results = tuple(_backward(y, leaf, _like(t, y), retain=i < last) for i, t in enumerate(cotangents))
            finally:
                for i in cache_positions:
                    values[i].detach_()
            result = (y.detach() if with_value else None), results
            return (result, _detached(aux)) if has_aux else result

        if self.compiled:
            values = [c.value for c in contexts]
            y_like = _example_cotangent(f, x, values, to_torch_x, convert_contexts, has_aux)
            compiled_f, _ = self._compile(
                f, lambda compiled: run(x, (y_like,), values, False, compiled), self._statics(contexts, lead=2)
            )

            def run_compiled(x: Any, cotangents: Sequence[Any], values: Sequence[Any], with_value: bool) -> Any:
                return run(x, cotangents, values, with_value, compiled_f)

            return run_compiled
        return run

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        if self.compiled and not _has_cache(contexts):
            try:
                return self._compiled_gradient(f, x, contexts, has_aux)
            except torch._dynamo.exc.Unsupported:
                pass  # dynamo cannot trace f inside torch.func.grad (graph breaks): compile f alone
        if self.compiled:
            # f writes into a Cache, which torch.func cannot, or breaks the graph: compile f
            # and differentiate it with torch.autograd.grad; both programs share the compiled f.
            values = [c.value for c in contexts]
            warm_up = lambda compiled: self._gradient_fast(compiled, x, contexts, False, has_aux)(x, *values)
            f, _ = self._compile(f, warm_up, self._statics(contexts, lead=2))
        statics = self._statics(contexts)
        return {
            name: counting_static_values(
                self._gradient_fast(f, x, contexts, with_value, has_aux), statics, self.backend
            )
            for name, with_value in (("gradient", False), ("value_and_gradient", True))
        }

    def _compiled_gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool) -> Programs:
        """``torch.compile(torch.func.grad(f))``: the gradient program's graph returns
        the gradient alone (and ``aux``); ``value_and_gradient`` compiles
        ``grad_and_value`` on its first call."""
        checked = self._checked(f, "gradient", scalar=True, floats=True, has_aux=has_aux)
        if has_aux:

            def gradient_with_aux(x: Any, *values: Any) -> Any:
                fy, join = _tensor_aux(checked, values)
                g, tensors = _func.grad(fy, has_aux=True)(x)
                return join(g, tensors)

            def value_and_gradient_with_aux(x: Any, *values: Any) -> Any:
                fy, join = _tensor_aux(checked, values)
                g, (y, tensors) = _func.grad_and_value(fy, has_aux=True)(x)
                return join((y, g), tensors)

            names = ("gradient", "value_and_gradient")
            return self._functional(
                gradient_with_aux, value_and_gradient_with_aux, x, None, contexts, names, locked=False
            )

        def gradient(x: Any, *values: Any) -> Any:
            return _func.grad(checked)(x, *values)

        def value_and_gradient(x: Any, *values: Any) -> Any:
            g, y = _func.grad_and_value(checked)(x, *values)
            return y, g

        return self._functional(
            gradient, value_and_gradient, x, None, contexts, ("gradient", "value_and_gradient"), locked=False
        )

    def _gradient_fast(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], with_value: bool, has_aux: bool = False
    ) -> Any:
        """The gradient hot path: what a careful torch user writes (detach, require
        grad, one forward, ``torch.autograd.grad``) and as little else as possible."""
        if is_pytree(x):
            return self._tree_gradient(f, x, contexts, with_value, has_aux)
        backend = self.backend
        to_torch_x = self.input_converters([x])[0]
        convert_contexts = self._context_converters(x, contexts)
        convert_any = any(convert is not identity for convert in convert_contexts)
        cache_positions = tuple(
            i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == "torch"
        )
        tensor, grad, is_grad_enabled = torch.Tensor, torch.autograd.grad, torch.is_grad_enabled

        def run(x: Any, *values: Any) -> Any:
            if not is_grad_enabled():  # no_grad or inference_mode: f must still be recorded
                with _recording():
                    return run(x, *_normal_tensors(values))
            leaf = _leaf(x if to_torch_x is identity else to_torch_x(x))
            if convert_any:
                values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            y = f(leaf, *values)
            if has_aux:
                y, aux = split_output(y, backend, "gradient")
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
            result = (y.detach(), g) if with_value else g
            return (result, _detached(aux)) if has_aux else result

        if not cache_positions:
            return run

        def run_detaching_caches(x: Any, *values: Any) -> Any:
            try:
                return run(x, *values)
            finally:
                for i in cache_positions:
                    values[i].detach_()

        return run_detaching_caches

    def _tree_gradient(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], with_value: bool, has_aux: bool
    ) -> Any:
        """Gradient with respect to a pytree of tensors: every leaf is a detached
        ``requires_grad_()`` alias and one ``torch.autograd.grad`` call returns the
        gradient of each (no flattening into one vector)."""
        backend = self.backend
        convert_contexts = self._context_converters(x, contexts)
        cache_positions = tuple(
            i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == "torch"
        )

        def run(x: Any, *values: Any) -> Any:
            if not torch.is_grad_enabled():  # no_grad or inference_mode: f must still be recorded
                with _recording():
                    return run(x, *_normal_tensors(values))
            leaves, spec = tree_flatten(x)
            leaves = [_leaf(converter(family_of(leaf), "torch")(leaf)) for leaf in leaves]
            values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            try:
                y = f(tree_unflatten(spec, leaves), *values)
                if has_aux:
                    y, aux = split_output(y, backend, "gradient")
                if not (isinstance(y, torch.Tensor) and y.dim() == 0 and y.is_floating_point()):
                    y = _scalar_tensor(y, leaves[0] if leaves else torch.zeros(()), backend)
                grads = torch.autograd.grad(y, leaves, allow_unused=True) if y.requires_grad else [None] * len(leaves)
            finally:
                for i in cache_positions:
                    values[i].detach_()
            g = tree_unflatten(spec, [torch.zeros_like(leaf) if d is None else d for leaf, d in zip(leaves, grads)])
            result = (y.detach(), g) if with_value else g
            return (result, _detached(aux)) if has_aux else result

        return run

    def prepare_pullback_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        if self.compiled and not _has_cache(contexts):
            try:
                return self._compiled_pullback(f, x, ty, contexts, has_aux)
            except torch._dynamo.exc.Unsupported:
                pass  # dynamo cannot trace f inside torch.func.vjp (graph breaks): compile f alone
        run = self._reverse(f, x, contexts, "pullback", has_aux)
        finish = fallbacks.with_aux(has_aux, lambda result: result[1])

        def value_and_pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            return run(x, ty, values, True)

        def pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            return finish(run(x, ty, values, False))

        statics = self._statics(contexts, lead=2)
        return {
            "pullback": counting_static_values(pullback, statics, self.backend),
            "value_and_pullback": counting_static_values(value_and_pullback, statics, self.backend),
        }

    def _compiled_pullback(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context], has_aux: bool
    ) -> Programs:
        """``torch.compile`` of ``torch.func.vjp``: one graph for the forward and the
        backward passes (about three times faster than a compiled ``f`` differentiated
        by ``torch.autograd.grad`` here), returning the cotangents alone for
        ``pullback``."""
        checked = self._checked(f, "pullback", scalar=False, has_aux=has_aux)

        def value_and_pullback(x: Any, ty: tuple[Any, ...], *values: Any) -> Any:
            fy, join = _tensor_aux(checked, values, has_aux)
            y, vjp, *tensors = _func.vjp(fy, x, has_aux=has_aux)
            if len(ty) == 1:
                cotangents: tuple[Any, ...] = (vjp(ty[0].to(y.dtype))[0],)
            elif not ty:
                cotangents = ()
            else:
                cotangents = tuple(_func.vmap(vjp)(torch.stack(ty).to(y.dtype))[0].unbind(0))
            return join((y, cotangents), *tensors)

        return self._functional(
            plain_from_full(value_and_pullback, has_aux),
            value_and_pullback,
            x,
            ty,
            contexts,
            ("pullback", "value_and_pullback"),
            locked=False,
        )

    # --- forward mode and second order: torch.func ----------------------------------------

    def _functional(
        self,
        plain_core: Callable[..., Any],
        full_core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        names: tuple[str, str],
        *,
        locked: bool = True,
    ) -> Programs:
        """The plain and the ``value_and_*`` programs of an operator family from two
        pure ``torch.func`` functions of ``(x, [tangents,] *values)``, the first
        returning the plain operator's result alone. Compiled, the first compiles
        at preparation and the second on its first call. ``locked``: the functions
        use forward mode, whose state ``torch.func`` keeps per process."""
        to_torch_x = self.input_converters([x])[0]
        convert_contexts = self._context_converters(x, contexts)
        lead = 1 if tangents is None else 2

        convert_any = any(convert is not identity for convert in convert_contexts)

        def arguments(x: Any, tangents: Sequence[Any] | None, values: Sequence[Any]) -> tuple[Any, ...]:
            xt = x if to_torch_x is identity else to_torch_x(x)
            if xt.requires_grad:  # results do not carry the caller's graph
                xt = xt.detach()
            if convert_any:
                values = [convert(v) for convert, v in zip(convert_contexts, values)]
            if tangents is None:
                return (xt, *values)
            if len(tangents) == 1:
                return (xt, (_like(tangents[0], xt),), *values)
            return (xt, tuple(_like(t, xt) for t in tangents), *values)

        plain_function, full_function = plain_core, full_core
        if self.compiled:
            example = arguments(x, tangents, [c.value for c in contexts])
            static_argnums = self._statics(contexts, lead=lead + 1)
            plain_function, options = self._compile(
                plain_core, lambda compiled: compiled(*example), static_argnums, graph_breaks=False
            )
            full_function = self._compile_on_first_use(full_core, options, static_argnums)
        statics = self._statics(contexts, lead=lead)
        return {
            name: counting_static_values(
                _run_functional(function, arguments, tangents is not None, locked), statics, self.backend
            )
            for name, function in zip(names, (plain_function, full_function))
        }

    def _checked(
        self, f: Callable[..., Any], operator: str, scalar: bool, floats: bool = False, has_aux: bool = False
    ) -> Callable[..., Any]:
        """``f`` refusing outputs ``operator`` cannot use; with ``floats``, a Python
        float output (a constant) becomes a 0-d tensor of ``x``'s dtype. With
        ``has_aux``, ``f`` returns ``(y, aux)``, and so does the checked function."""
        backend = self.backend

        def checked(x: Any, *values: Any) -> Any:
            y = f(x, *values)
            if has_aux:
                y, aux = split_output(y, backend, operator)
                return check(y, x), aux
            return check(y, x)

        def check(y: Any, x: Any) -> Any:
            if floats and isinstance(y, float):
                y = x.new_tensor(y)
            if not isinstance(y, torch.Tensor) or not y.is_floating_point() or (scalar and not is_real_scalar(y)):
                raise_bad_output(y, backend, operator)
            return y

        return checked

    def prepare_pushforward_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        if _has_cache(contexts):
            return fallbacks.pushforward_programs(self, f, x, tx, contexts, has_aux=has_aux)
        checked = self._checked(f, "pushforward", scalar=False, has_aux=has_aux)
        names = ("pushforward", "value_and_pushforward")
        if has_aux:

            def value_and_pushforward_with_aux(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
                fy, join = _tensor_aux(checked, values)
                if len(tx) == 1:
                    y, dy, tensors = _func.jvp(fy, (x,), (tx[0],), has_aux=True)  # type: ignore[misc]
                    return join((y, (dy,)), tensors)
                y, tensors = fy(x)
                if not tx:
                    return join((y, ()), tensors)
                dys = _func.vmap(lambda t: _func.jvp(fy, (x,), (t,), has_aux=True)[1])(torch.stack(tx))
                return join((y, tuple(dys.unbind(0))), tensors)

            plain = plain_from_full(value_and_pushforward_with_aux, has_aux=True)
            return self._functional(plain, value_and_pushforward_with_aux, x, tx, contexts, names)

        def pushforward(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            def fx(x: Any) -> Any:
                return checked(x, *values)

            if len(tx) == 1:
                return (_func.jvp(fx, (x,), (tx[0],))[1],)  # type: ignore[misc]
            if not tx:
                return ()
            return tuple(_func.vmap(lambda t: _func.jvp(fx, (x,), (t,))[1])(torch.stack(tx)).unbind(0))

        def value_and_pushforward(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            def fx(x: Any) -> Any:
                return checked(x, *values)

            if len(tx) == 1:
                y, dy = _func.jvp(fx, (x,), (tx[0],))  # type: ignore[misc]
                return y, (dy,)
            return fx(x), pushforward(x, tx, *values)

        return self._functional(pushforward, value_and_pushforward, x, tx, contexts, names)

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        if _has_cache(contexts):
            return fallbacks.jacobian_programs(self, f, x, contexts, forward=False, has_aux=has_aux)
        checked = self._checked(f, "jacobian", scalar=False, has_aux=has_aux)
        y = fallbacks.evaluate_output(self, checked, x, contexts)
        y = y[0] if has_aux else y
        if not isinstance(y, torch.Tensor) or not y.is_floating_point():
            raise_bad_output(y, self.backend, "jacobian")
        mode = self.selector.mode
        if mode is None:
            mode = "forward" if math.prod(getattr(x, "shape", ())) <= y.numel() else "reverse"
        transform = _func.jacfwd if mode == "forward" else _func.jacrev
        empty = y.numel() == 0 or math.prod(getattr(x, "shape", ())) == 0

        def value_and_jacobian(x: Any, *values: Any) -> Any:
            fy, join = _tensor_aux(checked, values, has_aux)

            def fx(x: Any) -> Any:
                y, *tensors = outputs(fy(x), has_aux)
                return y, (y, *tensors)

            if empty:  # torch.func cannot take an empty basis
                y, *tensors = outputs(fy(x), has_aux)
                return join((y, y.new_zeros(y.shape + x.shape)), *tensors)
            jac, (y, *tensors) = transform(fx, has_aux=True)(x)  # y comes with the jacobian's own evaluation of f
            return join((y, _as_dtype(jac, y)), *tensors)

        names = ("jacobian", "value_and_jacobian")
        return self._functional(
            plain_from_full(value_and_jacobian, has_aux), value_and_jacobian, x, None, contexts, names
        )

    def prepare_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        if _has_cache(contexts):
            return fallbacks.derivative_programs(self, f, x, contexts, has_aux=has_aux)
        checked = self._checked(f, "derivative", scalar=False, has_aux=has_aux)

        def value_and_derivative(x: Any, *values: Any) -> Any:
            fy, join = _tensor_aux(checked, values, has_aux)
            y, dy, *tensors = _func.jvp(fy, (x,), (torch.ones_like(x),), has_aux=has_aux)  # type: ignore[misc]
            return join((y, _as_dtype(dy, y)), *tensors)

        names = ("derivative", "value_and_derivative")
        return self._functional(
            plain_from_full(value_and_derivative, has_aux), value_and_derivative, x, None, contexts, names
        )

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
            plain_from_full(core, False),
            core,
            x,
            None,
            contexts,
            ("second_derivative", "value_derivative_and_second_derivative"),
        )

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        if _has_cache(contexts):
            return self._hvp_double_backward(f, x, contexts)
        checked = self._checked(f, "hvp", scalar=True)

        def hvp(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            grad = _func.grad(lambda x: checked(x, *values))
            if len(tx) == 1:
                return (_as_dtype(_func.jvp(grad, (x,), (tx[0],))[1], x),)  # type: ignore[misc]
            if not tx:
                return ()
            hvs = _func.vmap(lambda t: _func.jvp(grad, (x,), (t,))[1])(torch.stack(tx))
            return tuple(_as_dtype(hv, x) for hv in hvs.unbind(0))

        def gradient_and_hvp(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            grad = _func.grad(lambda x: checked(x, *values))
            if len(tx) == 1:
                g, hv = _func.jvp(grad, (x,), (tx[0],))  # type: ignore[misc]
                return _as_dtype(g, x), (_as_dtype(hv, x),)
            return _as_dtype(grad(x), x), hvp(x, tx, *values)

        return self._functional(hvp, gradient_and_hvp, x, tx, contexts, ("hvp", "gradient_and_hvp"))

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
            i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == "torch"
        )

        def gradient_and_hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            if not torch.is_grad_enabled():  # no_grad or inference_mode: f must still be recorded
                with _recording():
                    return gradient_and_hvp(x, tx, *_normal_tensors(values))
            leaf = _leaf(to_torch_x(x))
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

        def hessian(x: Any, *values: Any) -> Any:
            if x.numel() == 0:  # jacfwd cannot take an empty input
                return x.new_zeros(x.shape + x.shape)

            def fx(x: Any) -> Any:
                return checked(x, *values)

            return _func.jacfwd(_func.grad(fx))(x)

        def value_gradient_and_hessian(x: Any, *values: Any) -> Any:
            def gradient_with_aux(x: Any) -> Any:
                g, y = _func.grad_and_value(lambda x: checked(x, *values))(x)
                return g, (y, g)

            if x.numel() == 0:  # jacfwd cannot take an empty input
                g, y = _func.grad_and_value(lambda x: checked(x, *values))(x)
                return y, g, x.new_zeros(x.shape + x.shape)
            hessian, (y, g) = _func.jacfwd(gradient_with_aux, has_aux=True)(x)
            return y, g, hessian

        return self._functional(
            hessian, value_gradient_and_hessian, x, None, contexts, ("hessian", "value_gradient_and_hessian")
        )


def _run_functional(
    function: Callable[..., Any],
    arguments: Callable[[Any, Sequence[Any] | None, Sequence[Any]], tuple[Any, ...]],
    with_tangents: bool,
    locked: bool,
) -> Callable[..., Any]:
    """A program ``(x, [tangents,] *values)`` running ``function`` on converted
    arguments. ``locked``: ``torch.func`` keeps its forward-mode state (dual
    levels) per process, not per thread, so forward-mode calls from several
    threads must take turns."""
    lock = _FORWARD_MODE_LOCK if locked else None
    if with_tangents:

        def run_with_tangents(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
            if lock is None:
                return function(*arguments(x, tangents, values))
            with lock:
                return function(*arguments(x, tangents, values))

        return run_with_tangents

    def run(x: Any, *values: Any) -> Any:
        if lock is None:
            return function(*arguments(x, None, values))
        with lock:
            return function(*arguments(x, None, values))

    return run


def _tensor_aux(
    checked: Callable[..., Any], values: Sequence[Any], has_aux: bool = True
) -> tuple[Callable[[Any], Any], Callable[..., Any]]:
    """For one call under ``has_aux``: ``(fy, join)``. ``fy(x)`` returns ``(y, aux's
    tensors)``, what ``torch.func``'s ``has_aux`` accepts (no strings or ``None``);
    ``join(result, tensors)`` returns ``(result, aux)`` with the rest of ``aux``
    put back. Both are built per call, so a call's ``aux`` is its own; under
    ``torch.compile`` dynamo traces the flattening (``torch.utils._pytree``).
    Without ``has_aux``: ``fy`` is ``f`` of ``x`` and ``join`` returns the result."""
    if not has_aux:

        def value(x: Any) -> Any:
            return checked(x, *values)

        return value, lambda result: result
    kept: list[Any] = []

    def fy(x: Any) -> Any:
        y, aux = checked(x, *values)
        leaves, spec = _pytree.tree_flatten(aux)
        kept[:] = [spec, leaves]
        return y, tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))

    def join(result: Any, tensors: Sequence[Any]) -> Any:
        spec, leaves = kept
        supply = iter(tensors)
        return result, _pytree.tree_unflatten(
            [next(supply) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves], spec
        )

    return fy, join


def _detached(aux: Any) -> Any:
    """``aux`` with its tensors detached from the autograd graph of the call."""
    return _pytree.tree_map(lambda leaf: leaf.detach() if isinstance(leaf, torch.Tensor) else leaf, aux)


def _guard_reason(failure: str) -> str:
    """dynamo's record of a failed guard (``"0/3: G['T']['n'] == 3  # source ...``
    and a user stack) as one line: the guard and the source line it came from."""
    first = failure.strip().splitlines()[0] if failure.strip() else "unknown"
    return re.sub(r"\s{2,}", "  ", re.sub(r"^\[?\d+/\d+\]?:\s*", "", first))


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside ``di``
    (and outside torch, whose compiled wrappers sit between di's frames)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in ("di", "torch"):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


@contextlib.contextmanager
def _recording() -> Iterator[None]:
    """Record ``f`` for autograd whatever the caller's grad mode: ``no_grad`` and
    ``inference_mode`` around a di call never change a derivative (under them
    ``f`` would run unrecorded and its gradient would read as zero)."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


def _leaf(tensor: Any) -> Any:
    """A detached alias of ``tensor`` that requires grad: the input autograd
    differentiates with respect to. An inference tensor (made under
    ``inference_mode``) cannot require grad, so it is cloned into a normal one."""
    try:
        return tensor.detach().requires_grad_()
    except RuntimeError:
        if not tensor.is_inference():
            raise
        return tensor.clone().requires_grad_()


def _normal_tensors(values: Sequence[Any]) -> tuple[Any, ...]:
    """Context values with inference tensors cloned into normal ones, which
    autograd can save for the backward pass (``Cache`` buffers made under
    ``inference_mode`` cannot be written outside it either way)."""
    return tuple(v.clone() if isinstance(v, torch.Tensor) and v.is_inference() else v for v in values)


def _as_dtype(tangent: Any, primal: Any) -> Any:
    """torch.func.jvp can promote the tangent of a 0-d computation with a Python
    float to float64 while the primal stays float32: give the tangent the
    primal's dtype, as eager autograd would."""
    return tangent if tangent.dtype == primal.dtype else tangent.to(primal.dtype)


def _has_cache(contexts: Sequence[Context]) -> bool:
    return any(isinstance(c, Cache) for c in contexts)


def _like(tangent: Any, reference: Any) -> Any:
    """A tangent of any family as a tensor of ``reference``'s dtype and device."""
    if (
        tangent.__class__ is torch.Tensor
        and tangent.dtype is reference.dtype
        and tangent.get_device() == reference.get_device()  # an int: cheaper than comparing devices
    ):
        return tangent  # the common case
    tensor = converter(family_of(tangent), "torch")(tangent) if family_of(tangent) else torch.tensor(tangent)
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
    has_aux: bool = False,
) -> Any:
    with torch.no_grad():
        y = f(to_torch_x(x).detach(), *[convert(v) for convert, v in zip(convert_contexts, values)])
    return torch.ones_like(y[0] if has_aux else y)


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
