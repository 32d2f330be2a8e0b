"""What ``AutoTorch(compile=True)`` checks at preparation, because dynamo cannot see it.

A compiled ``torch.func`` program is traced by dynamo, which gets two things
silently wrong that eager mode gets right:

* an output cut off from ``x`` (``x.detach() * 2``, another engine's result):
  inside the trace ``x`` itself reads ``requires_grad=False``, so the check that
  refuses the cut eagerly (:func:`~di.engines.torch.rules.refuse_cut_off`)
  cannot tell, and the derivative comes out as zeros;
* a ``torch.autograd.Function``: dynamo traces its ``forward`` and differentiates
  that, dropping the Function's own ``backward`` and ``jvp`` under a ``torch.func``
  transform (PyTorch's bug, pytorch/pytorch#193279; #192985 for forward mode).

So before compiling, :func:`refuse_what_compiling_drops` runs ``f`` once,
uncompiled, on a detached alias of ``x`` that requires grad, and looks at the
recorded output. It costs one eager evaluation of ``f`` and a walk of its graph
per compiled preparation (compiling takes seconds); calls cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as torch_pytree

from di.contexts import Context
from di.engines.torch.base import TorchBase
from di.engines.torch.rules import overwritten_error, refuse_cut_off, refusing_writes
from di.errors import UnsupportedOperatorError
from di.pytrees import is_pytree, tree_flatten, tree_unflatten

__all__ = ["custom_function", "refuse_what_compiling_drops"]

_HOST = __name__.rpartition(".")[0] + ".host"
"""Where ``di.DifferentiateWith``'s torch Functions live (named, not imported: a higher layer)."""
_CLASSIC_SETUP = torch.autograd.Function.setup_context


def refuse_what_compiling_drops(
    adapter: TorchBase, f: Callable[..., Any], x: Any, contexts: Sequence[Context], operator: str, has_aux: bool
) -> None:
    """Refuse, at the preparation of a compiled ``torch.func`` program of
    ``operator``, an ``f`` whose derivative the compiled program would get
    silently wrong: evaluated once uncompiled at ``x`` (a detached alias that
    requires grad, grad mode on, the context values as the operators pass
    them), ``f``'s differentiated output (``y`` of ``(y, aux)``) is looked at leaf
    by leaf. An error ``f`` raises here is left to the preparation that follows,
    which says it as it does without this check.

    Raises:
        InvalidOutputError: a floating-point output that does not require grad,
            so was cut off from ``x`` (an output constant in ``x`` such as
            ``x * 0`` is computed from ``x`` and passes).
        UnsupportedOperatorError: the output was computed through a
            ``torch.autograd.Function`` (:func:`custom_function`).
        InvalidInputError: ``f`` wrote into ``x``.
    """
    backend = adapter.backend
    xt = adapter.input_converters([x])[0](x)
    leaves, spec = tree_flatten(xt) if is_pytree(xt) else ([xt], None)
    aliases = [_alias(leaf) for leaf in leaves]
    differentiated = [a for a, leaf in zip(aliases, leaves) if a is not leaf]
    if not differentiated:  # nothing to differentiate (integer x): the preparation says so
        return
    argument = aliases[0] if spec is None else tree_unflatten(spec, aliases)
    convert_values = adapter.torch_context_converters(x, contexts)
    refusals: list[Exception] = []

    def evaluate() -> Any:
        with torch.enable_grad():  # (untraced: nothing stops a write into x, refused after)
            return f(argument, *[convert(c.value) for convert, c in zip(convert_values, contexts)])

    def refusal(alias: Any) -> Exception:
        refusals.append(overwritten_error(backend, operator, x, alias, untraced=True))
        return refusals[-1]

    try:
        output = refusing_writes(evaluate, differentiated, refusal)
    except Exception as err:
        if refusals and err is refusals[-1]:
            raise
        return  # f's own error, or torch's refusal: the preparation reports it as usual
    if has_aux:
        if not isinstance(output, (tuple, list)) or len(output) != 2:
            return  # the preparation refuses the output's form
        output = output[0]
    outputs = [y for y in torch_pytree.tree_leaves(output) if isinstance(y, torch.Tensor) and y.is_floating_point()]
    if not getattr(f, "checked_program", False):  # (an engine's own program may be constant in x)
        for y in outputs:
            refuse_cut_off(y, differentiated, backend, operator)
    name = custom_function(outputs)
    if name:
        raise UnsupportedOperatorError(
            f"{operator} with {backend!r}: f calls the torch.autograd.Function {name}, and torch.compile of a "
            f"torch.func transform traces its forward and drops its own backward and jvp, so the compiled "
            f"{operator} would silently differentiate the forward instead (PyTorch's bug, "
            f"https://github.com/pytorch/pytorch/issues/193279). Use AutoTorch() (eager), which follows the "
            f"Function's rules."
        )


def custom_function(outputs: Sequence[Any]) -> str:
    """The name of a ``torch.autograd.Function`` that ``torch.func`` runs (one with
    ``setup_context``) found in the recorded graph of ``outputs``, or ``""``.

    Its node is an instance of ``torch.autograd.function.BackwardCFunction`` (the
    ``<Name>Backward`` class torch makes for each Function, ``_forward_cls`` the
    Function). Not counted: a Function in the classic style (``forward(ctx, ...)``,
    ``torch.utils.checkpoint`` with ``use_reentrant=True``, a ``torch.library``
    custom op's), which ``torch.func`` refuses with an error of its own, and
    ``di``'s own (:class:`di.DifferentiateWith`), one opaque custom op under
    ``torch.compile`` whose derivative dynamo keeps. The walk is iterative and
    visits each node once.

    Examples:
        >>> import torch
        >>> from di.engines.torch.checks import custom_function
        >>> class Twice(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(x):
        ...         return 2 * x
        ...
        ...     @staticmethod
        ...     def setup_context(ctx, inputs, output):
        ...         pass
        ...
        ...     @staticmethod
        ...     def backward(ctx, g):
        ...         return 2 * g
        >>> x = torch.ones(2, requires_grad=True)
        >>> custom_function([Twice.apply(x).sin()]), custom_function([x.sin()])
        ('Twice', '')
    """
    stack = [y.grad_fn for y in outputs if y.grad_fn is not None]
    seen = set(stack)  # (the nodes themselves: held, their Python objects stay the same ones)
    while stack:
        node = stack.pop()
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            function = node._forward_cls  # type: ignore[attr-defined]
            own = function.__module__ == _HOST
            if not own and function.setup_context is not _CLASSIC_SETUP:
                return str(function.__qualname__)
        for following, _ in node.next_functions:
            if following is not None and following not in seen:
                seen.add(following)
                stack.append(following)
    return ""


def _alias(tensor: Any) -> Any:
    """A detached alias of a floating-point ``tensor`` that requires grad (an
    inference tensor, which cannot, is cloned); anything else as it is."""
    if not isinstance(tensor, torch.Tensor) or not (tensor.is_floating_point() or tensor.is_complex()):
        return tensor
    if tensor.is_inference():
        return tensor.clone().requires_grad_()
    return tensor.detach().requires_grad_()
