"""Every operator from eager reverse mode (:class:`EagerPrograms`, over
:class:`~di.engines.torch.reverse.Reverse`): with a ``Cache``, which
``torch.func`` cannot write traced values into, the adapter builds every operator
here (jacobians and pushforwards from pullbacks, hvp by reverse over reverse),
and for an ``f`` that dynamo cannot trace inside a ``torch.func`` transform.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from di.backends import fallbacks
from di.backends.compile import static_argnums
from di.backends.protocol import Programs
from di.contexts import Context
from di.engines.torch.base import TorchBase
from di.engines.torch.ownership import detaching
from di.engines.torch.reverse import (
    NotTwiceDifferentiable,
    Reverse,
    double_backward,
    gradient_backward,
    hessian_backward,
    hvp_backward,
    pullback_backward,
    pushforward_backward,
)
from di.engines.torch.rules import overwritten_error, refusing_writes
from di.engines.torch.transforms import dispatching
from di.errors import UnsupportedContextError
from di.pytrees import is_pytree

__all__ = ["EagerPrograms", "example_cotangent"]


def example_cotangent(adapter: TorchBase, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
    """A cotangent shaped like ``f``'s output at the prepared arguments (``f`` run
    once without recording), to compile a pullback with."""
    convert_values = adapter.torch_context_converters(x, contexts)
    xt = adapter.input_converters([x])[0](x).detach()

    def evaluate() -> Any:
        with torch.no_grad():  # (untraced: nothing stops a write into x, refused after)
            return f(xt, *[c(v.value) for c, v in zip(convert_values, contexts)])

    y = refusing_writes(evaluate, [xt], lambda written: overwritten_error(adapter.backend, "pullback", x, written))
    return torch.ones_like(y[0] if isinstance(y, tuple) else y)


class EagerPrograms:
    """Every operator from eager reverse mode, for ``f`` writing into a ``Cache``
    (which ``torch.func`` cannot do) and for ``f`` that dynamo cannot trace inside
    a ``torch.func`` transform. On a compiled backend ``f`` itself is compiled and
    differentiated with ``torch.autograd.grad``."""

    def __init__(self, adapter: TorchBase) -> None:
        self.adapter = adapter

    def _compiled_f(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], warm_up: Any) -> Any:
        if not self.adapter.compiles_now():
            return f
        argnums = static_argnums(contexts, self.adapter.backend, 1)
        compiled, _ = self.adapter.compiler.compile_now(f, warm_up, argnums, x=x)
        return compiled

    def _counted(self, programs: Programs, contexts: Sequence[Context], lead: int) -> Programs:
        return {name: self.adapter.counted(program, contexts, lead) for name, program in programs.items()}

    def gradient(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool, traced: Programs | None = None
    ) -> Programs:
        """``traced``: the programs to run inside transforms (see :meth:`Reverse.program`)."""
        adapter, values = self.adapter, [c.value for c in contexts]
        backward = gradient_backward(adapter.backend, is_pytree(x))
        inside = traced or {}

        def warm_up(compiled: Any) -> Any:
            program = Reverse(adapter, compiled, x, contexts, "gradient", has_aux).program
            return program(backward, with_value=False, with_tangents=False)(x, *values)

        reverse = Reverse(adapter, self._compiled_f(f, x, contexts, warm_up), x, contexts, "gradient", has_aux)
        programs = {
            "gradient": reverse.program(backward, with_value=False, with_tangents=False, traced=inside.get("gradient")),
            "value_and_gradient": reverse.program(
                backward, with_value=True, with_tangents=False, traced=inside.get("value_and_gradient")
            ),
        }
        return self._counted(programs, contexts, 1)

    def pullback(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        has_aux: bool,
        traced: Programs | None = None,
    ) -> Programs:
        """``traced``: the programs to run inside transforms (see :meth:`Reverse.program`)."""
        adapter, values = self.adapter, [c.value for c in contexts]
        inside = traced or {}

        def warm_up(compiled: Any) -> Any:
            cotangent = example_cotangent(adapter, f, x, contexts)
            program = Reverse(adapter, compiled, x, contexts, "pullback", has_aux).program
            return program(pullback_backward, with_value=False, with_tangents=True)(x, (cotangent,), *values)

        reverse = Reverse(adapter, self._compiled_f(f, x, contexts, warm_up), x, contexts, "pullback", has_aux)
        programs = {
            "pullback": reverse.program(
                pullback_backward, with_value=False, with_tangents=True, traced=inside.get("pullback")
            ),
            "value_and_pullback": reverse.program(
                pullback_backward, with_value=True, with_tangents=True, traced=inside.get("value_and_pullback")
            ),
        }
        return self._counted(programs, contexts, 2)

    def pushforward(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context], has_aux: bool
    ) -> Programs:
        return fallbacks.pushforward_programs(self.adapter, f, x, tx, contexts, has_aux=has_aux)

    def pushforward_by_double_vjp(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        has_aux: bool,
        traced: Programs,
    ) -> Programs:
        """The pushforward by two reverse passes
        (:func:`~di.engines.torch.reverse.pushforward_backward`); inside transforms
        and ``forward_ad`` levels, ``traced``'s programs (``torch.func.jvp``). Eager
        only. The programs own their results (as the pullback's do)."""
        reverse, backend = Reverse(self.adapter, f, x, contexts, "pushforward", has_aux), self.adapter.backend
        # (the traced programs are forward mode, which a forward_ad level refuses: dispatching says so)
        inside = {name: dispatching(program, program, name, backend) for name, program in traced.items()}
        programs = {
            name: reverse.program(pushforward_backward, with_value=with_value, with_tangents=True, traced=inside[name])
            for name, with_value in (("pushforward", False), ("value_and_pushforward", True))
        }
        programs = {name: _falling_back(program, traced[name]) for name, program in programs.items()}
        for program in programs.values():
            program.owns_results = True  # type: ignore[attr-defined]
        return programs

    def jacobian(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool) -> Programs:
        return fallbacks.jacobian_programs(self.adapter, f, x, contexts, forward=False, has_aux=has_aux)

    def derivative(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool) -> Programs:
        return fallbacks.derivative_programs(self.adapter, f, x, contexts, has_aux=has_aux)

    def hessian(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        # (the value comes from an evaluation of f, which records what f closes over)
        programs = fallbacks.hessian_programs(self.adapter, f, x, contexts)
        return {name: detaching(program, 1, self.adapter.selector.create_graph) for name, program in programs.items()}

    def hessian_by_double_backward(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], traced: Programs
    ) -> Programs:
        """The hessian by double backward, the second pass batched over the
        standard basis (:func:`~di.engines.torch.reverse.hessian_backward`); inside
        transforms, ``traced``'s programs (``torch.func`` ones). Eager only."""
        reverse = Reverse(self.adapter, f, x, contexts, "hessian")
        hessian = reverse.program(_hessian_alone, with_value=False, with_tangents=False, traced=traced["hessian"])
        value_and_both = reverse.program(hessian_backward, with_value=True, with_tangents=False)

        def value_gradient_and_hessian(x: Any, *values: Any) -> Any:
            y, (g, h) = value_and_both(x, *values)
            return y, g, h

        full = dispatching(
            value_gradient_and_hessian,
            traced["value_gradient_and_hessian"],
            "value_gradient_and_hessian",
            self.adapter.backend,
        )
        return {"hessian": hessian, "value_gradient_and_hessian": full}

    def hvp(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        traced: Programs | None = None,
    ) -> Programs:
        """hvp by reverse over reverse (double backward). Eager only: compiled graphs
        have no double backward. ``traced``: the programs to run inside transforms
        (see :meth:`Reverse.program`)."""
        if self.adapter.compiled:
            raise UnsupportedContextError(
                f"{self.adapter.backend!r} cannot use Cache contexts for hvp or hessian: torch.func cannot write "
                f"into buffers and compiled graphs have no double backward. Use AutoTorch() (eager), or pass the "
                f"buffer as a Constant and build new tensors in f."
            )
        reverse, backend = Reverse(self.adapter, f, x, contexts, "hvp"), self.adapter.backend
        # (the traced programs are forward over reverse, which a forward_ad level refuses: dispatching says so)
        inside = {name: dispatching(program, program, name, backend) for name, program in (traced or {}).items()}
        return {
            "hvp": reverse.program(hvp_backward, with_value=False, with_tangents=True, traced=inside.get("hvp")),
            "gradient_and_hvp": reverse.program(
                double_backward, with_value=False, with_tangents=True, traced=inside.get("gradient_and_hvp")
            ),
        }

    def second_derivative(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        raise UnsupportedContextError(
            f"{self.adapter.backend!r} cannot use Cache contexts for second_derivative: torch.func cannot write "
            f"traced values into buffers. Pass the buffer as a Constant and build new tensors in f, or use "
            f"AutoJAX or AutoFiniteDiff."
        )


def _falling_back(program: Callable[..., Any], forward: Callable[..., Any]) -> Callable[..., Any]:
    """``program`` (a double vjp), or ``forward`` (``torch.func.jvp``) for a call
    where ``f``'s pullback cannot be differentiated again (a ``once_differentiable``
    backward, an operation without double backward): forward mode then runs the
    Function's own ``jvp`` rule, as it did before the double vjp."""

    def run(x: Any, *args: Any) -> Any:
        try:
            return program(x, *args)
        except NotTwiceDifferentiable:
            return forward(x, *args)

    return run


def _hessian_alone(y: Any, alias: Any, cotangents: Any, create_graph: bool) -> Any:
    return hessian_backward(y, alias, cotangents, create_graph)[1]
