"""Second order by the fastest program for the call (:class:`SecondOrderPrograms`):
eagerly, reverse over reverse (double backward: the hvp along each tangent, the
hessian batched over the standard basis), which torch runs 2-5 times faster than
``torch.func``'s forward over reverse at n = 32 to 1e3 here; compiled, and inside
``torch.func`` transforms (where eager autograd cannot run), ``torch.func``'s
programs, built on their first use there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from di.backends.protocol import Programs, plain_from_full
from di.contexts import Context
from di.engines.torch.compile import TraceFailedError
from di.engines.torch.eager import EagerPrograms
from di.engines.torch.func_builder import FuncBuilder
from di.engines.torch.jacobians import per_tangent, reverse_jacobian
from di.engines.torch.lazy import eager_beside_traced
from di.engines.torch.rules import REVERSE_RULES
from di.engines.torch.tensors import as_dtype
from di.engines.torch.transforms import dynamo_compiling
from di.errors import DIError
from di.pytrees import is_pytree

__all__ = ["BATCHED_HESSIAN_MAX_N", "SecondOrderPrograms", "spelled"]

_func = torch.func

BATCHED_HESSIAN_MAX_N = 1024
"""The largest ``x`` (elements) whose eager hessian is a batched double backward,
the largest size measured here (0.5-0.8 of ``torch.func``'s reverse over reverse
from n = 32 to 1e3); above it, ``torch.func``'s reverse over reverse (see
:meth:`SecondOrderPrograms.hessian`)."""


_DOUBLE_BACKWARD = "double backward (torch.autograd.grad of the gradient along each tangent)"
_FORWARD_OVER_REVERSE = "torch.func.jvp(torch.func.grad(f)) (forward over reverse)"
_BATCHED_DOUBLE_BACKWARD = "double backward batched over the standard basis (autograd.grad, is_grads_batched=True)"
_VJP_OF_GRAD = "torch.func.vjp(torch.func.grad(f)) along each tangent (reverse over reverse)"
_JACREV_OF_GRAD = "torch.func.vjp(torch.func.grad(f)) batched over the standard basis (reverse over reverse)"
_REVERSE_OVER_REVERSE = (
    "torch.func.vjp of the vjp, each batched over y's standard basis (reverse over reverse: dynamo failed "
    "tracing reverse over forward for f)"
)


def spelled(programs: Programs, spelling: str) -> Programs:
    """``programs``, each saying which program the prep runs outside transforms
    (``prep.info.program``)."""
    for program in programs.values():
        program.spelling = spelling  # type: ignore[attr-defined]
    return programs


class SecondOrderPrograms(FuncBuilder):
    """hvp and hessian: double backward eagerly, ``torch.func`` compiled and inside
    transforms; the second derivative by ``torch.func``."""

    eager: EagerPrograms

    def hvp(self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]) -> Programs:
        """Eagerly, double backward (``torch.autograd.grad`` with ``create_graph=True``,
        then a backward of the gradient along each tangent): 2-5 times faster than
        ``torch.func.jvp(torch.func.grad(f))`` at n = 32 to 1e3 here. Inside
        ``torch.func`` transforms eager autograd cannot run: the ``torch.func``
        programs serve those, built on their first use there, reverse over
        reverse (:meth:`_func_hvp`); so does a pytree ``x``. Compiled graphs have
        no double backward: compiled, forward over reverse, or reverse over
        reverse where that fails for ``f``."""
        if self.adapter.compiles_now():
            try:
                return spelled(self._func_hvp(f, x, tx, contexts), _FORWARD_OVER_REVERSE + self._compiled_note())
            except Exception as error:  # (f's own error comes again from the second program)
                if isinstance(error, DIError) and not isinstance(error, TraceFailedError):
                    raise
                forward_failed = error
            programs = self._func_hvp(f, x, tx, contexts, forward_compiled=False)
            reason = f" (forward over reverse failed for f: {type(forward_failed).__name__})"
            return spelled(programs, _VJP_OF_GRAD + self._compiled_note() + reason)
        if self.adapter.compiled or is_pytree(x):
            return spelled(self._func_hvp(f, x, tx, contexts), _VJP_OF_GRAD + self._compiled_note())

        programs = eager_beside_traced(
            lambda x, tx, contexts, fast: self._func_hvp(f, x, tx, contexts, fast=fast),
            lambda traced: self.eager.hvp(f, x, tx, contexts, traced),
            x,
            tx,
            contexts,
            ("hvp", "gradient_and_hvp"),
        )
        return spelled(programs, _DOUBLE_BACKWARD)

    def _compiled_note(self) -> str:
        return ", compiled" if self.adapter.compiles_now() else ""

    def _func_hvp(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        fast: Callable[[Programs], Programs] | None = None,
        forward_compiled: bool = True,
    ) -> Programs:
        """The ``torch.func`` hvp, compiled on a compiled backend unless ``fast``
        (double backward) serves calls outside transforms. Traced by dynamo (and
        ``forward_compiled``), forward over reverse, ``torch.func.jvp`` of
        ``torch.func.grad(f)``: the faster there at n = 1e5 (191 against 202 us,
        rosenbrock, inductor). Otherwise (inside transforms, a pytree ``x``)
        reverse over reverse, ``torch.func.vjp`` of the gradient along each
        tangent (the Hessian is symmetric): 2.7 and 1.5 times faster than forward
        over reverse at n = 1e3 and 1e5 in eager ``torch.func``, and no forward
        mode, whose formulas torch gets wrong for some ``f`` (a float32
        ``take`` followed by ``sum(v) * 0.1`` gets a float64 tangent, and
        ``index_add_`` refuses it: natively too). Several tangents go one at a
        time while dynamo compiles: inductor's code for a ``vmap`` over them of
        the forward over reverse of an ``f`` with ``take`` crashed the process."""
        checked = self._checked(f, "hvp", REVERSE_RULES)

        def gradient_and_products(x: Any, tx: tuple[Any, ...], values: Sequence[Any]) -> Any:
            grad = _func.grad(lambda x: checked(x, *values))
            if forward_compiled and dynamo_compiling():
                if len(tx) == 1:
                    g, hv = _func.jvp(grad, (x,), (tx[0],))  # type: ignore[misc]
                    return g, (hv,)
                return grad(x), tuple(_func.jvp(grad, (x,), (t,))[1] for t in tx)
            g, pull = _func.vjp(grad, x)  # type: ignore[misc]
            if len(tx) == 1:
                return g, (pull(tx[0])[0],)
            if dynamo_compiling():  # (one at a time: inductor's code for the vmap crashed, see the docstring)
                return g, tuple(pull(t)[0] for t in tx)
            return g, per_tangent(lambda t: pull(t)[0], tx)

        def hvp(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            if not tx:
                return ()
            _, products = gradient_and_products(x, tx, values)
            return tuple(as_dtype(hv, x) for hv in products)

        def gradient_and_hvp(x: Any, tx: tuple[Any, ...], *values: Any) -> Any:
            if not tx:
                return as_dtype(_func.grad(lambda x: checked(x, *values))(x), x), ()
            g, products = gradient_and_products(x, tx, values)
            return as_dtype(g, x), tuple(as_dtype(hv, x) for hv in products)

        names = ("hvp", "gradient_and_hvp")
        return self._programs(hvp, gradient_and_hvp, x, tx, contexts, names, fast=fast, cross_check=True)

    def hessian(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        """Eagerly, reverse over reverse: up to :data:`BATCHED_HESSIAN_MAX_N`
        elements, double backward with the second pass batched over the standard
        basis (``torch.autograd.grad(..., is_grads_batched=True)``, the fastest
        spelling there: 0.4-0.6 of ``jacrev(jacrev(f))`` at n = 32 to 100 here, 0.5-0.8
        of ``torch.func``'s reverse over reverse up to 1e3), above it (and for a
        raveled pytree ``x``) ``torch.func``'s vjp of the gradient batched over the
        basis, the ``torch.func`` programs serving inside transforms. Compiled:
        reverse over reverse (``jacrev`` of ``grad``): inductor's code for forward
        over reverse of an ``f`` with ``take`` (a scatter-add) crashed the process
        (a segmentation fault, which no fallback can catch; natively
        ``jacfwd(grad(f))`` fails to compile), and reverse over reverse compiles
        it; it took 45.8 against 49.1 us at n = 100 and 1957 against 1878 us at
        n = 1e3 (rosenbrock, float64). ``prep.info.program`` says which."""
        if self.adapter.compiled:
            return spelled(self._func_hessian(f, x, contexts), _JACREV_OF_GRAD + self._compiled_note())
        if is_pytree(x) or math.prod(getattr(x, "shape", ())) > BATCHED_HESSIAN_MAX_N:
            return spelled(self._func_hessian(f, x, contexts), _JACREV_OF_GRAD)

        programs = eager_beside_traced(
            lambda x, _, contexts, fast: self._func_hessian(f, x, contexts, fast=fast),
            lambda traced: self.eager.hessian_by_double_backward(f, x, contexts, traced),
            x,
            None,
            contexts,
            ("hessian", "value_gradient_and_hessian"),
        )
        return spelled(programs, _BATCHED_DOUBLE_BACKWARD)

    def _func_hessian(
        self,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        fast: Callable[[Programs], Programs] | None = None,
    ) -> Programs:
        """The jacobian of ``torch.func.grad(f)`` in reverse mode (``jacrev``, a
        batch over the standard basis), compiled on a compiled backend unless
        ``fast`` (double backward) serves calls outside transforms."""
        checked = self._checked(f, "hessian", REVERSE_RULES)

        def hessian(x: Any, *values: Any) -> Any:
            if x.numel() == 0:  # (no basis to batch over)
                return x.new_zeros(x.shape + x.shape)

            def fx(x: Any) -> Any:
                return checked(x, *values)

            _, hessian = reverse_jacobian(_func.grad(fx), x, False)
            return hessian

        def value_gradient_and_hessian(x: Any, *values: Any) -> Any:
            def gradient_with_aux(x: Any) -> Any:
                g, y = _func.grad_and_value(lambda x: checked(x, *values))(x)
                return g, (y,)

            if x.numel() == 0:  # (no basis to batch over)
                g, y = _func.grad_and_value(lambda x: checked(x, *values))(x)
                return y, g, x.new_zeros(x.shape + x.shape)
            g, hessian, (y,) = reverse_jacobian(gradient_with_aux, x, True)  # (aux is (y,))
            return y, g, hessian

        names = ("hessian", "value_gradient_and_hessian")
        return self._programs(
            hessian, value_gradient_and_hessian, x, None, contexts, names, fast=fast, cross_check=True
        )

    def second_derivative(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        """Forward over forward (a ``torch.func.jvp`` of the derivative's). While
        dynamo compiles, reverse over forward (``vjp`` of the ``jvp``), and where
        dynamo fails tracing that for ``f`` (:class:`TraceFailedError`; natively
        too, ``jacrev(jacfwd(f))``), reverse over reverse, which it traces."""
        try:
            return self._second_derivative(f, x, contexts, reverse_first=False)
        except TraceFailedError as failed:
            try:
                programs = self._second_derivative(f, x, contexts, reverse_first=True)
            except TraceFailedError:
                raise failed from None  # (the first spelling's failure, which names dynamo's error)
            return spelled(programs, _REVERSE_OVER_REVERSE + self._compiled_note())

    def _second_derivative(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], reverse_first: bool
    ) -> Programs:
        """The second derivative's programs; ``reverse_first``: the derivative too in
        reverse mode while dynamo compiles (see :meth:`second_derivative`)."""
        checked = self._checked(f, "second_derivative", self._forward_rules())
        jvp = self._jvp(f, "second_derivative")

        def core(x: Any, *values: Any) -> Any:
            x = _no_view(x)
            one = torch.ones_like(x)

            def value_and_derivative(x: Any) -> Any:
                if reverse_first:
                    return reverse_jacobian(lambda x: checked(x, *values), x, False)
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
        return self._programs(plain_from_full(core, False), core, x, None, contexts, names, cross_check=True)


def _no_view(x: Any) -> Any:
    """``x``, copied while dynamo compiles: its fake tensors fail nested forward
    mode on a view (``x[0]``) once a first such graph was compiled in the process."""
    return x.clone() if dynamo_compiling() else x
