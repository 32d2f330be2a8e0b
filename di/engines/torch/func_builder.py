"""A prep's programs from pure ``torch.func`` functions (:class:`FuncBuilder`).

Each operator family of :mod:`.func` is two pure functions of ``(x, [tangents,]
*values)``: the plain operator's, returning its result alone, and the
``value_and_*`` one. The builder turns them into the prep's programs: ``f``'s
output checked for the operator (reverse mode refusing an output cut off from
``x``, forward mode through a strict ``jvp``), compiled on a compiled backend
(the first at preparation, the second on its first call), the inputs converted,
detached and made dense, and, inside a ``torch.func`` transform or a
``torch.compile`` trace of the caller's code, the functions run as given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as torch_pytree
from torch.autograd import forward_ad

from di.backends.compile import combined_first, static_argnums
from di.backends.outputs import SCALAR_OPERATORS, OutputRules, checking
from di.backends.protocol import Programs
from di.contexts import Context
from di.engines.torch.base import TorchBase
from di.engines.torch.compile import UNSUPPORTED
from di.engines.torch.compiled_call import Fusible
from di.engines.torch.ownership import detaching, without_overlap
from di.engines.torch.rules import (
    FORWARD_RULES,
    REVERSE_RULES,
    RULES,
    custom_operator_error,
    cut_off_error,
    overwritten_error,
    refuse_cut_off,
    refusing_writes,
)
from di.engines.torch.running import FORWARD_MODE_LOCK, running
from di.engines.torch.tensors import like, requires_grad
from di.engines.torch.transforms import dispatching
from di.errors import UnsupportedOperatorError
from di.families import identity

__all__ = ["FuncBuilder", "value_first", "value_first_with_aux"]


_func = torch.func
_INDEPENDENT = "The output of f is independent of the inputs"
"""torch's refusal, under ``torch.func.jvp(..., strict=True)``, of an output without a tangent."""


class FuncBuilder:
    """Builds a prep's programs from pure ``torch.func`` functions of ``(x,
    [tangents,] *values)``: ``f``'s output checked for the operator, forward mode
    that refuses an output cut off from ``x``, compiled at preparation on a
    compiled backend, and run as given inside ``torch.func`` transforms and
    ``torch.compile`` traces of the caller's code.

    Args:
        adapter: the torch adapter whose selector, compiler and converters the
            programs use.
    """

    def __init__(self, adapter: TorchBase) -> None:
        self.adapter = adapter

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
                y = outputs[-1][0] if has_aux else outputs[-1]
                raise _without_tangent_error(fn, primals, y, backend, operator) from err

        return strict_jvp

    def _dual_jvp(self, f: Callable[..., Any], operator: str) -> Callable[..., Any]:
        """The jvp of :meth:`_jvp` by ``torch.autograd.forward_ad``'s dual tensors, with
        ``torch.func.jvp``'s signature (one primal, one tangent) and the same refusal
        of an output cut off from ``x``: for eager programs outside transforms, where
        the same operations run without functorch's level around each of them (a
        cubic at n = 1e5 took 1.14-1.23x the dual tensors' time through
        ``torch.func.jvp``). Its caller holds the forward-mode lock: the dual level
        is the process's. An engine's own program constant in ``x`` gets zeros."""
        backend = self.adapter.backend
        constant_is_zero = getattr(f, "checked_program", False)

        def dual_jvp(fn: Callable[..., Any], primals: Any, tangents: Any, has_aux: bool = False) -> Any:
            with forward_ad.dual_level():
                output = fn(forward_ad.make_dual(primals[0], tangents[0]))
                y, aux = output if has_aux else (output, None)
                primal, tangent = forward_ad.unpack_dual(y)
            if tangent is None:
                if not constant_is_zero:
                    raise _without_tangent_error(fn, primals, y, backend, operator)
                tangent = torch.zeros_like(primal)
            return (primal, tangent, aux) if has_aux else (primal, tangent)

        return dual_jvp

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
        eager_cores: tuple[Callable[..., Any], Callable[..., Any]] | None = None,
        compiled_full: tuple[Callable[..., Any], Callable[[Callable[..., Any]], Callable[..., Any]]] | None = None,
        cross_check: bool = False,
    ) -> Programs:
        """The plain and the ``value_and_*`` programs of an operator family from two
        pure ``torch.func`` functions of ``(x, [tangents,] *values)``, the first
        returning the plain operator's result alone. Compiled, the first compiles
        at preparation and the second on its first call (the other way round in a
        preparation for the combined form, ``value=True``). ``locked``: the functions
        use forward mode, whose state ``torch.func`` keeps per process.
        ``refuse_breaks``: a graph break in ``f`` raises
        :class:`di.UnsupportedOperatorError` (else dynamo's own error, for a caller
        that falls back to compiling ``f`` alone). ``eager_cores``: the plain and
        full functions the programs run outside transforms when nothing compiles
        (those of dual tensors, :meth:`_dual_jvp`), the first two inside them.
        ``compiled_full``: ``(core, put_back)``, compiled in place of the full
        function a core returning its results in another order (inductor fuses
        a graph's loops by its outputs' order), and ``put_back(compiled)`` the
        program returning them in the full function's. ``cross_check``: the
        program compiled at preparation is run uncompiled too, and a result that
        differs raises :class:`di.UnsupportedOperatorError` (:func:`_miscompiled`).

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

        compiled = adapter.compiles_now() and fast is None
        # Compiled, one tensor tangent goes to the compiled function bare (see _bare_or_tuple)
        bare = compiled and tangents is not None

        def converted_arguments(
            x: Any, tangents: Sequence[Any] | None, values: Sequence[Any], dense: bool = True
        ) -> tuple[Any, ...]:
            xt = x if to_torch_x is identity else to_torch_x(x)
            if dense and xt.__class__ is torch.Tensor and not xt.is_contiguous():
                # compiled: dense, since dynamo's recompile for other strides fails in forward mode's make_dual
                xt = xt.contiguous() if compiled else without_overlap(xt)
            if convert_any:
                values = [convert(v) for convert, v in zip(convert_values, values)]
            if tangents is None:
                return (xt, *values)
            if len(tangents) == 1:
                t = like(tangents[0], xt)
                # forward mode refuses an expanded tangent too (compiled, with dynamo's raw error)
                t = _dense(t, compiled) if dense else t
                # (dense: the compiled functions' arguments; the traced ones, inside transforms, go to
                # the cores themselves, which take the tuple)
                if bare and dense and t.__class__ is torch.Tensor:
                    return (xt, t, *values)
                return (xt, (t,), *values)
            if dense:
                return (xt, tuple(_dense(like(t, xt), compiled) for t in tangents), *values)
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

        plain_function, full_function = (plain_core, full_core) if eager_cores is None or compiled else eager_cores
        if compiled:
            example = arguments(x, tangents, [c.value for c in contexts])
            argnums = static_argnums(contexts, adapter.backend, lead)
            # prepare_*(..., value=True) compiles the value_and_* program now, the plain one when first used
            combined = combined_first()
            full_compiled = full_core if compiled_full is None else compiled_full[0]
            now, later = (full_compiled, plain_core) if combined else (plain_core, full_compiled)
            if bare:
                now, later = _bare_or_tuple(now), _bare_or_tuple(later)

            def warm_up(program: Callable[..., Any]) -> Any:
                # (run on the caller's x: a write into it, which forward mode lets f make, is said)
                def run() -> Any:
                    if program is not now or not locked:
                        return program(*example)
                    with FORWARD_MODE_LOCK:  # the uncompiled program, run to find f's own error: forward mode
                        return program(*example)

                operator = names[1 if combined else 0]
                refuse = functools.partial(overwritten_error, adapter.backend, operator, x)
                result = refusing_writes(run, example[:1], refuse)
                if cross_check and program is not now:
                    expected = warm_up(now)  # (uncompiled)
                    _miscompiled(result, expected, adapter.selector, operator, lambda: warm_up(now))
                return result

            try:
                compiled_now, options = adapter.compiler.compile_now(
                    now, warm_up, argnums, graph_breaks=False, x=x, operator=names[1 if combined else 0]
                )
            except UNSUPPORTED as err:
                if not refuse_breaks:
                    raise
                raise adapter.compiler.one_graph_error(names[1 if combined else 0], err) from err
            compiled_later = adapter.compiler.compile_on_first_use(later, options, argnums)
            plain_function, full_function = (
                (compiled_later, compiled_now) if combined else (compiled_now, compiled_later)
            )
            if compiled_full is not None:
                full_function = compiled_full[1](full_function)
        with_tangents = tangents is not None
        traced = {
            name: running(core, traced_arguments, with_tangents, locked, traced=True)
            for name, core in zip(names, (plain_core, full_core))
        }
        if fast is not None:
            return fast(traced)
        inputs_as_given = keeps_graph and to_torch_x is identity and not convert_any  # (nothing converted or detached)
        # Inputs taken as they are, no tangents, no lock: the function itself, two Python calls
        # fewer per prepared call.
        as_given = inputs_as_given and not with_tangents and not locked
        # a compiled program whose layers leave the common call's inputs as they are can make it in one frame
        fusible = compiled and inputs_as_given
        programs = {}
        for name, function in zip(names, (plain_function, full_function)):
            refuse = functools.partial(overwritten_error, adapter.backend, name)
            program = function if as_given else running(function, arguments, with_tangents, locked, refuse=refuse)
            program = detaching(program, lead, keeps_graph)
            dispatched = dispatching(program, traced[name], name, adapter.backend)
            programs[name] = adapter.counted(dispatched, contexts, lead)
            if fusible and programs[name] is dispatched:  # (no static context counted)
                dispatched.fusible = Fusible(  # type: ignore[attr-defined]
                    dispatched, function, lead, locked, None if as_given else refuse
                )
        return programs


def _miscompiled(result: Any, expected: Any, selector: Any, operator: str, again: Callable[[], Any]) -> None:
    """Raise :class:`di.UnsupportedOperatorError` where a compiled program's
    ``result`` differs from ``expected``, the same program's run uncompiled at the
    same arguments, by more than rounding (a relative 1e-6 in float64, 1e-3 in
    float32): a miscompilation. Inductor's code for ``f``'s second derivatives
    batched over the standard basis (``jacrev`` of ``grad``) through ``take`` gave
    a wrong Hessian, natively too (``torch.compile(torch.func.jacrev(
    torch.func.grad(f)))``: 3.5 where 2.5 is exact). Where they differ, the
    uncompiled program runs ``again()``: an ``f`` that does not repeat its own
    results (random numbers, as dropout draws) proves nothing and passes."""
    found = _difference(result, expected)
    if found is None or _difference(again(), expected) is not None:
        return
    difference, scale = found
    raise UnsupportedOperatorError(
        f"{selector!r}: the compiled {operator} of f differs from the same torch.func program run uncompiled at "
        f"the prepared arguments (largest difference {difference:.3g}, values of order {scale:.3g}): "
        f"torch.compile's code for it is wrong (inductor's code for a second derivative batched over the "
        f"standard basis through take or another scatter is one known case, natively too). Use "
        f"compile_options={{'backend': 'aot_eager'}} (the same graph, not code-generated) or AutoTorch() (eager)."
    )


def _difference(result: Any, expected: Any) -> tuple[float, float] | None:
    """``(largest difference, scale)`` of the first floating tensor of ``result``
    that differs from ``expected``'s beyond rounding (see :func:`_miscompiled`),
    or ``None``."""
    for a, b in zip(torch_pytree.tree_leaves(result), torch_pytree.tree_leaves(expected)):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and b.is_floating_point()):
            continue
        rtol = 1e-6 if b.dtype == torch.float64 else 1e-3
        scale = float(b.abs().max()) if b.numel() and bool(b.isfinite().all()) else 1.0
        atol = rtol * max(scale, 1.0)
        if a.shape == b.shape and bool(torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all()):
            continue
        return (float((a - b).abs().nan_to_num(float("inf")).max()) if a.shape == b.shape else float("inf")), scale
    return None


def _without_tangent_error(fn: Callable[..., Any], primals: Any, y: Any, backend: Any, operator: str) -> Exception:
    """The error for an output of ``fn`` that forward mode gave no tangent: a custom
    operator's account where ``fn`` calls one (:func:`custom_operator_error`), else
    the output cut off from ``x`` (:func:`cut_off_error`)."""
    custom = custom_operator_error(fn, primals, backend, operator)
    return custom if custom is not None else cut_off_error(y, backend, operator)


def _bare_or_tuple(core: Callable[..., Any]) -> Callable[..., Any]:
    """``core`` (arguments ``x``, a tuple of tangents, the context values) taking
    one tangent tensor bare in place of the tuple, for ``torch.compile``: dynamo
    guards a tuple argument's length and each item and flattens it at every call,
    so a compiled pushforward at n = 1e5 took about 7 us more with ``(v,)`` than
    with ``v`` (float64, 175 us). Several tangents (or one that is no tensor)
    still come as a tuple; the two kinds are two compiles, as two tuple lengths
    were. Traced only: the compiled program runs none of this Python."""

    def bare_or_tuple(x: Any, tangents: Any, *values: Any) -> Any:
        return core(x, (tangents,) if isinstance(tangents, torch.Tensor) else tangents, *values)

    return bare_or_tuple


def _dense(tangent: Any, compiled: bool) -> Any:
    """A tensor ``tangent``, copied without overlap where it is not contiguous
    (:func:`without_overlap`), or ``compiled``, copied contiguous (another
    stride is a recompile, which fails for ``x`` in forward mode); anything else
    (a pytree cotangent, which the check of ``f``'s output refuses with its
    remedy) as it is."""
    if isinstance(tangent, torch.Tensor) and not tangent.is_contiguous():
        return tangent.contiguous() if compiled else without_overlap(tangent)
    return tangent


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


def value_first(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """A ``(gradient, value)`` function (compiled, or the traced core) returning
    ``(value, gradient)``. Compiled, the value comes last, as in
    ``torch.func.grad_and_value``'s graph:
    inductor then fuses the value's reduction into the gradient's loop, which it
    did not with the value first (one pass over ``x`` where there were two: 1.5x
    faster at n = 1e5 for an ``f`` with ``roll``, 1.1x for ``sum(sin(x) * x)``).

    Examples:
        >>> from di.engines.torch.func_builder import value_first
        >>> value_first(lambda x: (2 * x, x * x))(3.0)
        (9.0, 6.0)
    """

    def value_and_gradient(*args: Any) -> Any:
        g, y = compiled(*args)
        return y, g

    return value_and_gradient


def value_first_with_aux(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`value_first` for a function returning ``((gradient, value), aux)``.

    Examples:
        >>> from di.engines.torch.func_builder import value_first_with_aux
        >>> value_first_with_aux(lambda x: ((2 * x, x * x), "aux"))(3.0)
        ((9.0, 6.0), 'aux')
    """

    def value_and_gradient(*args: Any) -> Any:
        (g, y), aux = compiled(*args)
        return (y, g), aux

    return value_and_gradient
