"""``torch.func`` programs: forward mode, jacobians, second order, and the
compiled gradient and pullback.

Forward mode and second order use ``torch.func`` (``jvp``, ``vmap``,
``jacfwd``/``jacrev``, forward-over-reverse hvp), never
``torch.autograd.functional``'s double-backward tricks. Each operator family is
two pure functions of ``(x, [tangents,] *values)``: the plain operator's,
returning its result alone, and the ``value_and_*`` one. Compiled, the first is
compiled at preparation and the second on its first call; the compiled gradient
is ``torch.func.grad(f)``, three to four times faster than a compiled ``f``
differentiated by ``torch.autograd.grad`` here.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as torch_pytree
from torch.autograd import forward_ad

from di.backends import fallbacks
from di.backends.compile import caller_stacklevel, combined_first, static_argnums
from di.backends.outputs import SCALAR_OPERATORS, OutputRules, checking
from di.backends.protocol import Programs, plain_from_full
from di.contexts import Context
from di.engines.torch.base import TorchBase
from di.engines.torch.compile import FALLS_BACK, UNSUPPORTED, break_in_di
from di.engines.torch.eager import EagerPrograms
from di.engines.torch.jacobians import batched_jvp_fails, forward_jacobian, per_tangent, reverse_jacobian, rows
from di.engines.torch.lazy import built_on_first_use
from di.engines.torch.ownership import detaching, without_overlap
from di.engines.torch.rules import (
    FORWARD_RULES,
    REVERSE_RULES,
    RULES,
    cut_off_error,
    overwritten_error,
    refuse_cut_off,
    refusing_writes,
)
from di.engines.torch.running import FORWARD_MODE_LOCK, running
from di.engines.torch.tensors import as_dtype, like, requires_grad
from di.engines.torch.transforms import dispatching, dynamo_compiling
from di.errors import InvalidInputError, RecompileWarning
from di.families import converter, family_of, identity
from di.pytrees import is_pytree, tree_flatten
from di.pytrees.structure import Structure

__all__ = ["FuncPrograms"]

_func = torch.func
_INDEPENDENT = "The output of f is independent of the inputs"
"""torch's refusal, under ``torch.func.jvp(..., strict=True)``, of an output without a tangent."""


class FuncPrograms:
    """Every operator through ``torch.func`` (eager reverse mode for the eager
    gradient and pullback: the faster path there), compiled when the selector asks."""

    def __init__(self, adapter: TorchBase) -> None:
        self.adapter = adapter
        self.eager = EagerPrograms(adapter)

    # --- building programs ---------------------------------------------------------------

    def _checked(self, f: Callable[..., Any], operator: str, rules: OutputRules, has_aux: bool = False) -> Any:
        """``f`` with its output checked for ``operator``; under ``has_aux`` it
        returns ``(y, aux)``, and so does the checked function. In reverse mode an
        array output that does not require grad was cut off from ``x`` (a
        ``.detach()``, a tensor built anew): refused, as a scalar one is, rather
        than differentiated into zeros (forward mode refuses it in :meth:`_jvp`)."""
        backend = self.adapter.backend
        if operator in SCALAR_OPERATORS:
            return checking(f, backend, operator, rules, has_aux=has_aux, accept=_traced_scalar)
        if rules is not REVERSE_RULES or getattr(f, "checked_program", False):
            return checking(f, backend, operator, rules, has_aux=has_aux, accept=_float_array)
        checked = checking(f, backend, operator, rules, has_aux=has_aux, accept=_traced_float_array)

        def traced(x: Any, *values: Any) -> Any:
            output = checked(x, *values)
            y = output[0] if has_aux else output
            if not y.requires_grad:  # (the common case, a recorded y, costs this look)
                refuse_cut_off(y, x, backend, operator)
            return output

        return traced

    def _jvp(self, f: Callable[..., Any], operator: str) -> Callable[..., Any]:
        """``torch.func.jvp`` for the programs of ``operator`` (a jvp of ``f``'s own
        output), refusing an output cut off from ``x`` with
        :class:`di.InvalidOutputError`: one that carries no tangent (a
        ``.detach()``, a tensor built anew) rather than a zero one (``x * 0``, an
        ``f`` constant in ``x``). torch tells the two apart for free
        (``strict=True``); its zeros for the first would be silent. An engine's own
        program (a derivative constant in ``x``) is differentiated as it is."""
        if getattr(f, "checked_program", False):
            return _func.jvp
        backend, jvp = self.adapter.backend, _func.jvp

        def strict_jvp(fn: Callable[..., Any], primals: Any, tangents: Any, has_aux: bool = False) -> Any:
            outputs: list[Any] = []

            def recorded(x: Any) -> Any:  # (for the error's account of the output)
                output = fn(x)
                outputs.append(output)
                return output

            try:
                return jvp(recorded, primals, tangents, strict=True, has_aux=has_aux)
            except RuntimeError as err:
                if _INDEPENDENT not in str(err) or not outputs:
                    raise
                raise cut_off_error(outputs[-1][0] if has_aux else outputs[-1], backend, operator) from err

        return strict_jvp

    def _forward_rules(self) -> OutputRules:
        """Forward-mode outputs are checked for a tangent eagerly; a compiled graph
        cannot read it."""
        return RULES if self.adapter.compiled else FORWARD_RULES

    def _programs(
        self,
        plain_core: Callable[..., Any],
        full_core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        names: tuple[str, str],
        *,
        locked: bool = True,
        fast: Callable[[Programs], Programs] | None = None,
        refuse_breaks: bool = True,
    ) -> Programs:
        """The plain and the ``value_and_*`` programs of an operator family from two
        pure ``torch.func`` functions of ``(x, [tangents,] *values)``, the first
        returning the plain operator's result alone. Compiled, the first compiles
        at preparation and the second on its first call (the other way round in a
        preparation for the combined form, ``value=True``). ``locked``: the functions
        use forward mode, whose state ``torch.func`` keeps per process.
        ``refuse_breaks``: a graph break in ``f`` raises
        :class:`di.UnsupportedOperatorError` (else dynamo's own error, for a caller
        that falls back to compiling ``f`` alone).

        Inside a ``torch.func`` transform or a ``torch.compile`` trace of the
        caller's code, the programs run the functions themselves, uncompiled, on
        the inputs as given (which the transform differentiates or batches);
        elsewhere they run the functions, compiled on a compiled backend. ``fast``
        (eager reverse mode) builds, from those inside programs, programs that
        run them there and its own elsewhere, which are returned instead."""
        adapter = self.adapter
        to_torch_x = adapter.input_converters([x])[0]
        convert_values = adapter.torch_context_converters(x, contexts)
        convert_any = any(convert is not identity for convert in convert_values)
        keeps_graph = adapter.selector.create_graph
        lead = 1 if tangents is None else 2

        def converted_arguments(
            x: Any, tangents: Sequence[Any] | None, values: Sequence[Any], dense: bool = True
        ) -> tuple[Any, ...]:
            xt = x if to_torch_x is identity else to_torch_x(x)
            if dense and xt.__class__ is torch.Tensor and not xt.is_contiguous():
                xt = without_overlap(xt)
            if convert_any:
                values = [convert(v) for convert, v in zip(convert_values, values)]
            if tangents is None:
                return (xt, *values)
            if len(tangents) == 1:
                t = like(tangents[0], xt)
                # forward mode refuses an expanded tangent too (compiled, with dynamo's raw error)
                return (xt, (_dense(t) if dense else t,), *values)
            if dense:
                return (xt, tuple(_dense(like(t, xt)) for t in tangents), *values)
            return (xt, tuple(like(t, xt) for t in tangents), *values)

        def detached_arguments(x: Any, tangents: Sequence[Any] | None, values: Sequence[Any]) -> tuple[Any, ...]:
            # results never carry the caller's graph
            x = x.detach() if requires_grad(x) else x
            values = [v.detach() if requires_grad(v) else v for v in values]
            if tangents is not None:
                tangents = [t.detach() if requires_grad(t) else t for t in tangents]
            return converted_arguments(x, tangents, values)

        arguments = converted_arguments if keeps_graph else detached_arguments
        # an x whose elements share memory is made dense outside transforms; inside, the
        # transform's own tensors are taken as they are
        traced_arguments = functools.partial(converted_arguments, dense=False)

        plain_function, full_function = plain_core, full_core
        if adapter.compiles_now() and fast is None:
            example = arguments(x, tangents, [c.value for c in contexts])
            argnums = static_argnums(contexts, adapter.backend, lead)
            # prepare_*(..., value=True) compiles the value_and_* program now, the plain one when first used
            combined = combined_first()
            now, later = (full_core, plain_core) if combined else (plain_core, full_core)

            def warm_up(program: Callable[..., Any]) -> Any:
                # (run on the caller's x: a write into it, which forward mode lets f make, is said)
                def run() -> Any:
                    if program is not now or not locked:
                        return program(*example)
                    with FORWARD_MODE_LOCK:  # the uncompiled program, run to find f's own error: forward mode
                        return program(*example)

                operator = names[1 if combined else 0]
                return refusing_writes(run, example[:1], lambda xt: overwritten_error(adapter.backend, operator, x, xt))

            try:
                compiled_now, options = adapter.compiler.compile_now(now, warm_up, argnums, graph_breaks=False, x=x)
            except UNSUPPORTED as err:
                if not refuse_breaks:
                    raise
                raise adapter.compiler.one_graph_error(names[1 if combined else 0], err) from err
            compiled_later = adapter.compiler.compile_on_first_use(later, options, argnums)
            plain_function, full_function = (
                (compiled_later, compiled_now) if combined else (compiled_now, compiled_later)
            )
        with_tangents = tangents is not None
        traced = {
            name: running(core, traced_arguments, with_tangents, locked, traced=True)
            for name, core in zip(names, (plain_core, full_core))
        }
        if fast is not None:
            return fast(traced)
        # Inputs taken as they are (nothing to convert or detach, no tangents, no lock):
        # the function itself, two Python calls fewer per prepared call.
        as_given = keeps_graph and to_torch_x is identity and not convert_any and not with_tangents and not locked
        programs = {}
        for name, function in zip(names, (plain_function, full_function)):
            refuse = functools.partial(overwritten_error, adapter.backend, name)
            program = function if as_given else running(function, arguments, with_tangents, locked, refuse=refuse)
            program = detaching(program, lead, keeps_graph)
            programs[name] = adapter.counted(dispatching(program, traced[name], name, adapter.backend), contexts, lead)
        return programs

    # --- reverse mode ------------------------------------------------------------------

    def gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool) -> Programs:
        if self.adapter.compiles_now():
            try:
                return self._func_gradient(f, x, contexts, has_aux)
            except FALLS_BACK as err:  # dynamo cannot trace f inside torch.func.grad: compile f alone
                own = break_in_di(err)
                if own:  # f may be fine: the break is di's to fix, and said so
                    warnings.warn(
                        f"{self.adapter.backend!r}: the gradient of f cannot be compiled as one graph "
                        f"({str(err).strip().splitlines()[0]}); f is compiled alone and differentiated "
                        f"eagerly. The break is in di's own code ({own}), not in f: please report it.",
                        RecompileWarning,
                        stacklevel=caller_stacklevel(("di", "torch")),
                    )

        def inside(x: Any, tangents: Any, contexts: Sequence[Context]) -> Programs:
            return self._func_gradient(f, x, contexts, has_aux, fast=_same)

        lazy = built_on_first_use(inside, x, None, contexts, ("gradient", "value_and_gradient"))
        if lazy is not None:
            return self.eager.gradient(f, x, contexts, has_aux, lazy)

        def eager(traced: Programs) -> Programs:
            return self.eager.gradient(f, x, contexts, has_aux, traced)

        return self._func_gradient(f, x, contexts, has_aux, fast=eager)

    def _func_gradient(
        self,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        has_aux: bool,
        fast: Callable[[Programs], Programs] | None = None,
    ) -> Programs:
        """``torch.func.grad(f)``, compiled on a compiled backend unless ``fast``
        (eager reverse mode) serves calls outside transforms: the gradient
        program's graph returns the gradient alone (and ``aux``);
        ``value_and_gradient`` compiles ``grad_and_value`` on its first call."""
        checked = self._checked(f, "gradient", REVERSE_RULES, has_aux)
        names = ("gradient", "value_and_gradient")
        # A pytree x (eager gradients take it whole) is differentiated as the list of
        # its leaves, flattened and rebuilt by plain Python that dynamo traces too;
        # dicts, lists and tuples of tensors go to torch.func as they are (torch's own
        # pytree): a compiled graph then guards on x alone, not on di's flattening.
        structure = Structure(x) if is_pytree(x) and not _plain_tensor_tree(x) else None
        leaves_of = _leaves_of(structure)
        rebuilt = _rebuilt(structure)
        if structure is not None:
            tree_f = checked

            def checked(leaves: Any, *values: Any) -> Any:
                return tree_f(structure.unflatten(leaves), *values)

        if has_aux:

            def gradient_with_aux(x: Any, *values: Any) -> Any:
                fy, join = _tensor_aux(checked, values)
                g, tensors = _func.grad(fy, has_aux=True)(leaves_of(x))
                return join(rebuilt(g), tensors)

            def value_and_gradient_with_aux(x: Any, *values: Any) -> Any:
                fy, join = _tensor_aux(checked, values)
                g, (y, tensors) = _func.grad_and_value(fy, has_aux=True)(leaves_of(x))
                return join((y, rebuilt(g)), tensors)

            full = value_and_gradient_with_aux
            return self._programs(
                gradient_with_aux, full, x, None, contexts, names, locked=False, fast=fast, refuse_breaks=False
            )

        def gradient(x: Any, *values: Any) -> Any:
            return rebuilt(_func.grad(checked)(leaves_of(x), *values))

        def value_and_gradient(x: Any, *values: Any) -> Any:
            g, y = _func.grad_and_value(checked)(leaves_of(x), *values)
            return y, rebuilt(g)

        programs = self._programs(
            gradient, value_and_gradient, x, None, contexts, names, locked=False, fast=fast, refuse_breaks=False
        )
        if fast is None and structure is None and is_pytree(x):  # torch.func returns x's own structure
            for program in programs.values():
                program.keeps_x_structure = True  # type: ignore[attr-defined]
        return programs

    def pullback(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context], has_aux: bool
    ) -> Programs:
        if self.adapter.compiles_now():
            try:
                return self._func_pullback(f, x, ty, contexts, has_aux)
            except FALLS_BACK:
                pass  # dynamo cannot trace f inside torch.func.vjp (graph breaks): compile f alone

        def inside(x: Any, ty: Any, contexts: Sequence[Context]) -> Programs:
            return self._func_pullback(f, x, ty, contexts, has_aux, fast=_same)

        lazy = built_on_first_use(inside, x, ty, contexts, ("pullback", "value_and_pullback"))
        if lazy is not None:
            return self.eager.pullback(f, x, ty, contexts, has_aux, lazy)

        def eager(traced: Programs) -> Programs:
            return self.eager.pullback(f, x, ty, contexts, has_aux, traced)

        return self._func_pullback(f, x, ty, contexts, has_aux, fast=eager)

    def _func_pullback(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        has_aux: bool,
        fast: Callable[[Programs], Programs] | None = None,
    ) -> Programs:
        """``torch.func.vjp``, compiled on a compiled backend unless ``fast`` (eager
        reverse mode) serves calls outside transforms: one graph for the forward
        and the backward passes (about three times faster than a compiled ``f``
        differentiated by ``torch.autograd.grad`` here), returning the cotangents
        alone for ``pullback``."""
        checked = self._checked(f, "pullback", REVERSE_RULES, has_aux)

        def value_and_pullback(x: Any, ty: tuple[Any, ...], *values: Any) -> Any:
            fy, join = _tensor_aux(checked, values, has_aux)
            y, vjp, *tensors = _func.vjp(fy, x, has_aux=has_aux)
            if len(ty) == 1:
                cotangents: tuple[Any, ...] = (vjp(ty[0].to(y.dtype))[0],)
            elif not ty:
                cotangents = ()
            else:
                cotangents = rows(_func.vmap(vjp)(torch.stack(ty).to(y.dtype))[0])
            return join((y, cotangents), *tensors)

        plain = plain_from_full(value_and_pullback, has_aux)
        names = ("pullback", "value_and_pullback")
        return self._programs(
            plain, value_and_pullback, x, ty, contexts, names, locked=False, fast=fast, refuse_breaks=False
        )

    # --- forward mode ------------------------------------------------------------------------

    def pushforward(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context], has_aux: bool
    ) -> Programs:
        checked = self._checked(f, "pushforward", self._forward_rules(), has_aux)
        jvp = self._jvp(f, "pushforward")
        names = ("pushforward", "value_and_pushforward")
        if has_aux:

            def value_and_pushforward_with_aux(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
                fy, join = _tensor_aux(checked, values)
                if len(tx) == 1:
                    y, dy, tensors = jvp(fy, (x,), (tx[0],), has_aux=True)  # type: ignore[misc]
                    return join((y, (as_dtype(dy, y),)), tensors)
                y, tensors = fy(x)
                if not tx:
                    return join((y, ()), tensors)
                dys = per_tangent(lambda t: _product(jvp(fy, (x,), (t,), has_aux=True)), tx)
                return join((y, dys), tensors)

            plain = plain_from_full(value_and_pushforward_with_aux, has_aux=True)
            return self._programs(plain, value_and_pushforward_with_aux, x, tx, contexts, names)

        def pushforward(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            def fx(x: Any) -> Any:
                return checked(x, *values)

            if len(tx) == 1:
                return (_product(jvp(fx, (x,), (tx[0],))),)
            if not tx:
                return ()
            return per_tangent(lambda t: _product(jvp(fx, (x,), (t,))), tx)

        def value_and_pushforward(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            def fx(x: Any) -> Any:
                return checked(x, *values)

            if len(tx) == 1:
                y, dy = jvp(fx, (x,), (tx[0],))
                return y, (as_dtype(dy, y),)
            return fx(x), pushforward(x, tx, *values)

        return self._programs(pushforward, value_and_pushforward, x, tx, contexts, names)

    def jacobian(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool) -> Programs:
        y = fallbacks.evaluate_output(self.adapter, self._checked(f, "jacobian", RULES, has_aux), x, contexts)
        y = y[0] if has_aux else y
        mode = self.adapter.selector.mode
        if mode is None:
            mode = "forward" if math.prod(getattr(x, "shape", ())) <= y.numel() else "reverse"
        transform = _func.jacfwd if mode == "forward" else _func.jacrev
        batched: Callable[..., Any] = reverse_jacobian
        if mode == "forward":
            batched = functools.partial(forward_jacobian, jvp=self._jvp(f, "jacobian"))
        rules = REVERSE_RULES if mode == "reverse" else RULES  # jacfwd's vmap hides the tangents
        checked = self._checked(f, "jacobian", rules, has_aux)
        backend, untraced = self.adapter.backend, getattr(f, "checked_program", False)
        empty = y.numel() == 0 or math.prod(getattr(x, "shape", ())) == 0

        def value_and_jacobian(x: Any, *values: Any) -> Any:
            fy, join = _tensor_aux(checked, values, has_aux)
            if empty:  # torch.func cannot take an empty basis
                y, *tensors = _outputs(fy(x), has_aux)
                return join((y, y.new_zeros(y.shape + x.shape)), *tensors)
            if isinstance(x, torch.Tensor):
                y, jac, *aux = batched(fy, x, has_aux)
                return join((y, as_dtype(jac, y)), *aux)

            jacobian_of = _func.jacrev if batched_jvp_fails() else transform  # (see jacobians.py)
            forward = jacobian_of is _func.jacfwd and not untraced and not dynamo_compiling()

            def fx(x: Any) -> Any:  # a pytree x: torch.func's own jacobian
                y, *tensors = _outputs(fy(x), has_aux)
                # (jacfwd has no strict=True: an output without a tangent was cut off from x)
                if forward and forward_ad.unpack_dual(y).tangent is None:
                    raise cut_off_error(y, backend, "jacobian")
                return y, (y, *tensors)

            jac, (y, *tensors) = jacobian_of(fx, has_aux=True)(x)  # y comes with the jacobian's own evaluation of f
            return join((y, as_dtype(jac, y)), *tensors)

        names = ("jacobian", "value_and_jacobian")
        plain = plain_from_full(value_and_jacobian, has_aux)
        return self._programs(plain, value_and_jacobian, x, None, contexts, names)

    def derivative(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool) -> Programs:
        checked = self._checked(f, "derivative", self._forward_rules(), has_aux)
        jvp = self._jvp(f, "derivative")

        def value_and_derivative(x: Any, *values: Any) -> Any:
            fy, join = _tensor_aux(checked, values, has_aux)
            y, dy, *tensors = jvp(fy, (x,), (torch.ones_like(x),), has_aux=has_aux)
            return join((y, as_dtype(dy, y)), *tensors)

        names = ("derivative", "value_and_derivative")
        plain = plain_from_full(value_and_derivative, has_aux)
        return self._programs(plain, value_and_derivative, x, None, contexts, names)

    # --- second order -----------------------------------------------------------------------

    def second_derivative(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        checked = self._checked(f, "second_derivative", self._forward_rules())
        jvp = self._jvp(f, "second_derivative")

        def core(x: Any, *values: Any) -> Any:
            x = _no_view(x)
            one = torch.ones_like(x)

            def value_and_derivative(x: Any) -> Any:
                return jvp(lambda x: checked(x, *values), (x,), (one,))

            if dynamo_compiling():
                # dynamo's fake tensors fail a jvp of a jvp whose f broadcasts the scalar x
                # against an array (t * c: "more than one element of the written-to tensor
                # refers to a single memory location"), and inductor's code for a jvp batched
                # over the tangent (jacfwd's, or jacfwd of jacfwd) writes into a zero tensor
                # without storage there (a segmentation fault): the second derivative is
                # taken in reverse mode over the derivative, which both compile.
                def derivative_and_value(x: Any) -> Any:
                    y, dy = value_and_derivative(x)
                    # differentiated connected to x (the zero jacobian of a derivative
                    # that does not depend on x is otherwise torch's storage-less zero,
                    # which fake tensors cannot hold); d(x * 0)/dx is 0 even where x is inf
                    return dy + x * 0, (y, dy)

                _, d2y, (y, dy) = reverse_jacobian(derivative_and_value, x, True)
                return y, as_dtype(dy, y), as_dtype(d2y, y)
            (y, dy), (_, d2y) = _func.jvp(value_and_derivative, (x,), (one,))  # type: ignore[misc]
            if torch._is_zerotensor(d2y):  # f linear in x: torch's immutable, storage-less zero
                d2y = torch.zeros_like(y)
            return y, as_dtype(dy, y), as_dtype(d2y, y)

        names = ("second_derivative", "value_derivative_and_second_derivative")
        return self._programs(plain_from_full(core, False), core, x, None, contexts, names)

    def hvp(self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]) -> Programs:
        checked = self._checked(f, "hvp", REVERSE_RULES)

        def hvp(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            grad = _func.grad(lambda x: checked(x, *values))
            if len(tx) == 1:
                return (as_dtype(_func.jvp(grad, (x,), (tx[0],))[1], x),)  # type: ignore[misc]
            if not tx:
                return ()
            return tuple(as_dtype(hv, x) for hv in per_tangent(lambda t: _func.jvp(grad, (x,), (t,))[1], tx))

        def gradient_and_hvp(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            grad = _func.grad(lambda x: checked(x, *values))
            if len(tx) == 1:
                g, hv = _func.jvp(grad, (x,), (tx[0],))  # type: ignore[misc]
                return as_dtype(g, x), (as_dtype(hv, x),)
            return as_dtype(grad(x), x), hvp(x, tx, *values)

        return self._programs(hvp, gradient_and_hvp, x, tx, contexts, ("hvp", "gradient_and_hvp"))

    def hessian(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        checked = self._checked(f, "hessian", REVERSE_RULES)

        def hessian(x: Any, *values: Any) -> Any:
            if x.numel() == 0:  # jacfwd cannot take an empty input
                return x.new_zeros(x.shape + x.shape)

            def fx(x: Any) -> Any:
                return checked(x, *values)

            _, hessian = forward_jacobian(_func.grad(fx), x, False)
            return hessian

        def value_gradient_and_hessian(x: Any, *values: Any) -> Any:
            def gradient_with_aux(x: Any) -> Any:
                g, y = _func.grad_and_value(lambda x: checked(x, *values))(x)
                return g, (y,)

            if x.numel() == 0:  # jacfwd cannot take an empty input
                g, y = _func.grad_and_value(lambda x: checked(x, *values))(x)
                return y, g, x.new_zeros(x.shape + x.shape)
            g, hessian, (y,) = forward_jacobian(gradient_with_aux, x, True)  # (aux is (y,))
            return y, g, hessian

        names = ("hessian", "value_gradient_and_hessian")
        return self._programs(hessian, value_gradient_and_hessian, x, None, contexts, names)


def _leaves_of(structure: Structure | None) -> Callable[[Any], Any]:
    """``x`` as ``torch.func`` differentiates it: a pytree as the list of its leaves."""
    if structure is None:
        return _same

    def leaves_of(x: Any) -> Any:
        leaves = structure.leaves(x)
        if leaves is None:  # a non-strict prep given another structure: refused as optree says
            raise InvalidInputError(
                f"x has another structure than the prepared one ({tree_flatten(x)[1]} for {structure.spec}); "
                f"prepare again for this x."
            )
        return [converter(family_of(leaf), "torch")(leaf) for leaf in leaves]

    return leaves_of


def _plain_tensor_tree(x: Any) -> bool:
    """Whether ``x`` is dicts, lists and tuples (exactly those classes) of tensors,
    which ``torch.func`` differentiates as they are and returns in their structure.
    A walk without recursion: trees may nest as deep as the engines take them."""
    pending = [x]
    while pending:
        node = pending.pop()
        if node.__class__ is dict:
            if not node:
                return False
            pending.extend(node.values())
        elif node.__class__ is list or node.__class__ is tuple:
            if not node:
                return False
            pending.extend(node)
        elif not isinstance(node, torch.Tensor):
            return False
    return True


def _rebuilt(structure: Structure | None) -> Callable[[Any], Any]:
    """Results for the list of leaves of a pytree ``x``, as a pytree shaped like it."""
    return _same if structure is None else structure.unflatten


def _same(value: Any) -> Any:
    return value


def _dense(tangent: Any) -> Any:
    """A tensor ``tangent``, copied without overlap where it is not contiguous
    (:func:`without_overlap`); anything else (a pytree cotangent, which the check
    of ``f``'s output refuses with its remedy) as it is."""
    if isinstance(tangent, torch.Tensor) and not tangent.is_contiguous():
        return without_overlap(tangent)
    return tangent


def _no_view(x: Any) -> Any:
    """``x``, copied while dynamo compiles: its fake tensors fail nested forward
    mode on a view (``x[0]``) once a first such graph was compiled in the process."""
    return x.clone() if dynamo_compiling() else x


def _traced_scalar(y: Any) -> bool:
    """The common output of a scalar operator: a 0-d float tensor reverse mode
    records (anything else gets the full check)."""
    return y.__class__ is torch.Tensor and y.requires_grad and y.ndim == 0 and y.is_floating_point()


def _traced_float_array(y: Any) -> bool:
    """The common output of a reverse-mode array operator: a float tensor of at
    least one dimension that reverse mode records."""
    return y.__class__ is torch.Tensor and y.requires_grad and y.ndim > 0 and y.is_floating_point()


def _float_array(y: Any) -> bool:
    """The common output of the other operators: a float tensor of at least one
    dimension (a 0-d one gets the full check, which looks for its tangent)."""
    return y.__class__ is torch.Tensor and y.ndim > 0 and y.is_floating_point()


def _product(output: Any) -> Any:
    """The tangent of ``torch.func.jvp``'s ``output`` ``(y, dy[, aux])``, in ``y``'s dtype."""
    return as_dtype(output[1], output[0])


def _outputs(output: Any, has_aux: bool) -> tuple[Any, ...]:
    return output if has_aux else (output,)  # type: ignore[no-any-return]


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
        leaves, spec = torch_pytree.tree_flatten(aux)
        # A NumPy leaf goes out as a tensor (aux's arrays come back in the caller's family
        # either way): under torch.compile dynamo traces NumPy code into tensors, and one
        # kept aside would be read out of torch.func's wrappers, which have no storage.
        leaves = [torch.as_tensor(leaf) if isinstance(leaf, (np.ndarray, np.generic)) else leaf for leaf in leaves]
        kept[:] = [spec, leaves]
        return y, tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))

    def join(result: Any, tensors: Sequence[Any]) -> Any:
        spec, leaves = kept
        supply = iter(tensors)
        return result, torch_pytree.tree_unflatten(
            [next(supply) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves], spec
        )

    return fy, join
