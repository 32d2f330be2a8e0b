"""``torch.func`` programs: forward mode, jacobians, second order, and the
compiled gradient and pullback (:class:`FuncPrograms`).

Forward mode uses ``torch.func`` (``jvp``, ``vmap``, ``jacfwd``/``jacrev``);
second order (:mod:`.second_order`) is double backward eagerly and ``torch.func``
compiled and inside transforms. Each operator family is
two pure functions of ``(x, [tangents,] *values)``: the plain operator's,
returning its result alone, and the ``value_and_*`` one, which
:class:`~di.engines.torch.func_builder.FuncBuilder` makes the prep's programs
(compiled when asked). The compiled gradient is ``torch.func.grad(f)``, three to
four times faster than a compiled ``f`` differentiated by ``torch.autograd.grad``
here.
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

from di.backends.compile import caller_stacklevel
from di.backends.derived import evaluate_output
from di.backends.protocol import Programs, plain_from_full
from di.contexts import Context
from di.engines.torch.base import TorchBase
from di.engines.torch.compile import FALLS_BACK, break_in_di
from di.engines.torch.eager import EagerPrograms
from di.engines.torch.func_builder import value_first, value_first_with_aux
from di.engines.torch.jacobians import batched_jvp_fails, forward_jacobian, per_tangent, reverse_jacobian, rows
from di.engines.torch.lazy import eager_beside_traced, same
from di.engines.torch.ownership import detaching
from di.engines.torch.rules import REVERSE_RULES, RULES, cut_off_error
from di.engines.torch.second_order import SecondOrderPrograms, spelled
from di.engines.torch.tensors import as_dtype
from di.engines.torch.transforms import dynamo_compiling, inside_transform
from di.errors import InvalidInputError, RecompileWarning, UnsupportedOperatorError
from di.families import converter, family_of
from di.pytrees import is_pytree, tree_flatten
from di.pytrees.structure import Structure

_JACOBIAN_SPELLINGS = {
    "forward": "torch.func.jvp batched over the standard basis (forward mode, as torch.func.jacfwd)",
    "reverse": "torch.func.vjp batched over the standard basis (reverse mode, as torch.func.jacrev)",
}
"""What ``prep.info.program`` says of a jacobian's program, by mode."""
_JVP = "torch.func.jvp (forward mode)"
_DUAL = "forward_ad dual tensors (forward mode)"
_DOUBLE_VJP = "double vjp (torch.autograd.grad of the pullback along a cotangent that requires grad, per tangent)"
FORWARD_FROM = 1 << 16
"""The size of ``x`` (elements) from which the eager pushforward runs forward mode (dual
tensors): from there the arithmetic outweighs forward mode's per-operation cost (150-300 us
for an operation with a scalar operand, ``x * 0.5``), and the double vjp's extra passes cost
most. Below it, dual tensors took 0.79-0.83x the double vjp's time at n = 1e3 on an ``f``
without scalar operands and 2.1-2.7x on one with them (docs/performance.md)."""

__all__ = ["FuncPrograms"]

_func = torch.func


class FuncPrograms(SecondOrderPrograms):
    """Every operator through ``torch.func`` (eager reverse mode for the eager
    gradient and pullback: the faster path there), compiled when the selector asks."""

    def __init__(self, adapter: TorchBase) -> None:
        super().__init__(adapter)
        self.eager = EagerPrograms(adapter)

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

        return eager_beside_traced(
            lambda x, _, contexts, fast: self._func_gradient(f, x, contexts, has_aux, fast=fast),
            lambda traced: self.eager.gradient(f, x, contexts, has_aux, traced),
            x,
            None,
            contexts,
            ("gradient", "value_and_gradient"),
        )

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

        # Compiled, the value comes last in the graph (value_first's docstring says why); the
        # traced programs put it first with the same frame.
        if has_aux:

            def gradient_with_aux(x: Any, *values: Any) -> Any:
                fy, join = _tensor_aux(checked, values)
                g, tensors = _func.grad(fy, has_aux=True)(leaves_of(x))
                return join(rebuilt(g), tensors)

            def gradient_and_value_with_aux(x: Any, *values: Any) -> Any:
                fy, join = _tensor_aux(checked, values)
                g, (y, tensors) = _func.grad_and_value(fy, has_aux=True)(leaves_of(x))
                return join((rebuilt(g), y), tensors)

            plain, value_last, put_back = gradient_with_aux, gradient_and_value_with_aux, value_first_with_aux
        else:

            def gradient(x: Any, *values: Any) -> Any:
                return rebuilt(_func.grad(checked)(leaves_of(x), *values))

            def gradient_and_value(x: Any, *values: Any) -> Any:
                g, y = _func.grad_and_value(checked)(leaves_of(x), *values)
                return rebuilt(g), y

            plain, value_last, put_back = gradient, gradient_and_value, value_first
        programs = self._programs(
            plain,
            put_back(value_last),
            x,
            None,
            contexts,
            names,
            locked=False,
            fast=fast,
            refuse_breaks=False,
            compiled_full=(value_last, put_back),
        )
        if has_aux:
            return programs
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

        return eager_beside_traced(
            lambda x, ty, contexts, fast: self._func_pullback(f, x, ty, contexts, has_aux, fast=fast),
            lambda traced: self.eager.pullback(f, x, ty, contexts, has_aux, traced),
            x,
            ty,
            contexts,
            ("pullback", "value_and_pullback"),
        )

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
        """Eagerly at a real tensor ``x`` of fewer than :data:`FORWARD_FROM`
        elements, a double vjp (0.4 of ``torch.func.jvp``'s time and 0.7 of dual
        tensors' at n = 32 and 1e3 on an ``f`` with Python scalars; thread-safe);
        from that size, ``forward_ad``'s dual tensors (``torch.func.jvp`` took
        1.14-1.23x their time at n = 1e5); compiled, at a pytree or complex ``x``,
        and inside transforms, ``torch.func.jvp``. ``prep.info.program`` says which."""
        if self.adapter.compiled or is_pytree(x) or _is_complex(x):
            programs = self._func_pushforward(f, x, tx, contexts, has_aux)
            return spelled(programs, _JVP + self._compiled_note())

        programs = eager_beside_traced(
            lambda x, tx, contexts, fast: self._func_pushforward(f, x, tx, contexts, has_aux, fast=fast),
            lambda traced: self.eager.pushforward_by_double_vjp(f, x, tx, contexts, has_aux, traced),
            x,
            tx,
            contexts,
            ("pushforward", "value_and_pushforward"),
        )
        size = math.prod(tuple(x.shape))
        if size < FORWARD_FROM or not isinstance(x, torch.Tensor):
            return spelled(programs, _DOUBLE_VJP)
        forward = self._func_pushforward(f, x, tx, contexts, has_aux, dual=True)
        keeps_graph = self.adapter.selector.create_graph
        return spelled(
            {name: _forward_first(forward[name], programs[name], keeps_graph) for name in forward}, _large(size)
        )

    def _func_pushforward(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        has_aux: bool,
        fast: Callable[[Programs], Programs] | None = None,
        dual: bool = False,
    ) -> Programs:
        """``torch.func.jvp``, compiled on a compiled backend unless ``fast`` (the double vjp)
        serves calls outside transforms; with ``dual``, there, dual tensors (:meth:`_dual_jvp`)."""
        checked = self._checked(f, "pushforward", self._forward_rules(), has_aux)
        names = ("pushforward", "value_and_pushforward")
        cores = self._pushforward_cores(checked, self._jvp(f, "pushforward"), has_aux)
        eager_cores = self._pushforward_cores(checked, self._dual_jvp(f, "pushforward"), has_aux) if dual else None
        return self._programs(*cores, x, tx, contexts, names, fast=fast, eager_cores=eager_cores)

    @staticmethod
    def _pushforward_cores(checked: Callable[..., Any], jvp: Callable[..., Any], has_aux: bool) -> tuple[Any, Any]:
        """The plain and full functions of ``(x, tx, *values)``, each product by ``jvp``."""
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

            return plain_from_full(value_and_pushforward_with_aux, has_aux=True), value_and_pushforward_with_aux

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

        return pushforward, value_and_pushforward

    def jacobian(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool) -> Programs:
        y = evaluate_output(self.adapter, self._checked(f, "jacobian", RULES, has_aux), x, contexts)
        y = y[0] if has_aux else y
        mode = self.adapter.selector.mode
        if mode is None:
            n_in, n_out = math.prod(getattr(x, "shape", ())), y.numel()
            # a square jacobian in reverse mode eagerly: torch's batched vjp takes half the
            # time of its batched jvp (n = 32 to 1e3 here, as torch.func.jacrev against jacfwd)
            square = "forward" if self.adapter.compiles_now() else "reverse"
            mode = "forward" if n_in < n_out else square if n_in == n_out else "reverse"
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
        programs = self._programs(plain, value_and_jacobian, x, None, contexts, names)
        for program in programs.values():  # (prep.info.program)
            program.spelling = _JACOBIAN_SPELLINGS[mode]  # type: ignore[attr-defined]
        return programs

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


def _leaves_of(structure: Structure | None) -> Callable[[Any], Any]:
    """``x`` as ``torch.func`` differentiates it: a pytree as the list of its leaves."""
    if structure is None:
        return same

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
    return same if structure is None else structure.unflatten


def _large(size: int) -> str:
    return (
        f"{_DUAL} (x has {size} elements, at least {FORWARD_FROM}: forward mode's one pass beats the double vjp's "
        f"three); the {_DOUBLE_VJP.partition(' (')[0]} where forward mode refuses f, {_JVP} inside transforms"
    )


def _forward_first(
    forward: Callable[..., Any], double_vjp: Callable[..., Any], keeps_graph: bool
) -> Callable[..., Any]:
    """``forward`` (forward mode: dual tensors) at a detached alias of ``x`` that requires
    grad, as the double vjp's (autograd refuses a write into it before it is made,
    where forward mode alone lets the write happen; the results are detached from
    it unless a tangent or context of the caller's that requires grad reaches them,
    as :func:`~di.engines.torch.ownership.detaching` decides for every program:
    about 1 % of a call at 1e6 elements, against 4-20 % for a copy), at the
    caller's ``x`` itself where it requires grad and ``create_graph`` keeps the
    results' graph to it, or at a copy where ``create_graph=False`` (whose programs
    detach ``x``, alias or not). The
    double vjp, which a smaller ``x`` runs, answers every call forward mode does
    not: inside transforms (where its programs dispatch to forward mode
    themselves), and any call forward mode fails (a write into ``x``, ``f``'s own
    error), giving its own result, refusal or ``f``'s error: what ``f`` computes or
    refuses does not depend on ``x``'s size. A failed call runs ``f`` twice. Where
    forward mode refuses ``f`` itself (a classic ``torch.autograd.Function``, an
    operation without a forward derivative), the prep remembers and later calls
    run the double vjp alone."""
    refused = False

    def at_alias(x: Any, *args: Any) -> Any:
        return forward(x.detach().requires_grad_(), *args)

    # the results detached from the alias, as the programs detach theirs, unless the caller's own
    # graph reaches them (a tangent or a context that requires grad)
    at_alias_detached = detaching(at_alias, 2, keeps_graph)

    def run(x: Any, *args: Any) -> Any:
        nonlocal refused
        if refused or x.__class__ is not torch.Tensor or inside_transform():
            return double_vjp(x, *args)
        try:
            if not keeps_graph:  # (the programs detach x: an alias would not stop the write)
                return forward(x.detach().clone(), *args)
            return forward(x, *args) if x.requires_grad else at_alias_detached(x, *args)
        except (UnsupportedOperatorError, NotImplementedError):
            refused = True
        except Exception:  # (the double vjp's own answer: its refusal, or f's error again)
            pass
        return double_vjp(x, *args)

    return run


def _is_complex(x: Any) -> bool:
    """Whether ``x`` (a tensor or another family's array) is complex."""
    if isinstance(x, torch.Tensor):
        return x.is_complex()
    return bool(np.iscomplexobj(x))


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
