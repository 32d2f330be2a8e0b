"""What torch's outputs and refusals mean to ``di``: the output rules of its
programs (:data:`RULES`, and the reverse- and forward-mode ones), and torch's
errors inside ``f`` read as ``di`` errors: a write into ``x`` (refused by torch,
or found after ``f`` ran), a ``torch.autograd.Function`` that a ``torch.func``
program cannot run, and an output cut off from ``x`` (:func:`refuse_cut_off`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.autograd.forward_ad as forward_ad

from di.backends.outputs import OutputRules, untraced_output_error
from di.backends.selectors import AbstractBackend
from di.engines.torch.ownership import storage_address
from di.engines.torch.transforms import dynamo_compiling
from di.errors import InvalidInputError, InvalidOutputError, UnsupportedOperatorError

__all__ = [
    "FORWARD_RULES",
    "REVERSE_RULES",
    "RULES",
    "custom_function_error",
    "custom_operator_error",
    "cut_off_error",
    "overwritten_error",
    "refuse_cut_off",
    "refusing_writes",
    "version_of",
    "write_error",
]


_WRITE = "leaf Variable that requires grad is being used in an in-place operation"
"""torch's refusal of a write into the tensor it differentiates (``x[0] = 0``,
``x += 1``; "a view of a ..." for an indexed write)."""


_CAPTURED = "that would mutate a captured Tensor"
"""torch.func's refusal of a write, inside a transform, into a tensor made outside
it (``x`` under a second derivative's nested ``jvp``, a ``Constant``)."""
_RULE = (
    "x and every Constant are read only (the mutation rule, docs/preparation.md): build a new tensor instead "
    "(x + 1, xp.where(mask, 0.0, x)), or write into a di.Cache passed as scratch space."
)


def write_error(error: BaseException, backend: AbstractBackend, operator: str) -> InvalidInputError | None:
    """The :class:`di.InvalidInputError` for torch's ``error`` when it says ``f``
    wrote into ``x`` (or, for ``torch.func``, a tensor it did not make) in place,
    else ``None``. torch refused the write: nothing was written."""
    text = str(error) if isinstance(error, RuntimeError) else ""
    if _WRITE in text:
        what = "x"
    elif _CAPTURED in text:
        what = "x (or a Constant, or a tensor it closes over)"
    else:
        return None
    return InvalidInputError(
        f"{operator} with {backend!r}: f wrote into {what} in place (x[i] = ..., x += ...), which torch cannot "
        f"differentiate. {_RULE}"
    )


_SETUP_CONTEXT = "it must override the setup_context staticmethod"
"""torch.func's refusal of a ``torch.autograd.Function`` written in the classic
style, ``forward(ctx, x)``, inside any of its transforms."""
_NO_JVP = "You must implement the jvp function for custom autograd.Function"
"""torch's refusal of a ``torch.autograd.Function`` without ``jvp`` in forward mode."""
_NO_VMAP = "but it does not have vmap support"
"""torch.func's refusal of a ``torch.autograd.Function`` without a vmap rule under ``vmap``
("You tried to vmap over Name, but it does not have vmap support ...")."""
_EXTENDING = "https://pytorch.org/docs/stable/notes/extending.func.html"
_UNBATCHED = {
    "jacobian": "or use AutoTorch(mode='reverse'), whose jacobian batches only the Function's backward",
    "hessian": "or compute hvp with one tangent per call",
    "pushforward": "or pass one tangent per call",
    "pullback": "or pass one cotangent per call",
    "hvp": "or pass one tangent per call",
}
"""What computes without batching the Function, per operator."""


def custom_function_error(
    error: BaseException, backend: AbstractBackend, operator: str
) -> UnsupportedOperatorError | None:
    """The :class:`di.UnsupportedOperatorError` for torch's refusal of a
    ``torch.autograd.Function`` in ``f`` that ``operator``'s ``torch.func``
    program cannot run (no ``setup_context``, no ``jvp``, no vmap rule), saying
    what to add to it and what works as it is; ``None`` for any other error.

    Examples:
        >>> import di
        >>> from di.engines.torch.rules import custom_function_error
        >>> error = NotImplementedError("You must implement the jvp function for custom autograd.Function to use it")
        >>> message = str(custom_function_error(error, di.AutoTorch(), "pushforward"))
        >>> message.startswith("pushforward with AutoTorch("), "Add a jvp staticmethod" in message
        (True, True)
        >>> custom_function_error(NotImplementedError("my own"), di.AutoTorch(), "pushforward") is None
        True
    """
    if not isinstance(error, RuntimeError):  # (NotImplementedError is one)
        return None
    text = str(error)
    where = f"{operator} with {backend!r}"
    if "use_reentrant=True" in text:
        return UnsupportedOperatorError(
            f"{where}: f calls torch.utils.checkpoint with use_reentrant=True, which torch runs only under "
            f".backward() without inputs, not torch.autograd.grad (di's reverse mode) nor torch.func. Pass "
            f"use_reentrant=False (torch's recommended setting, which recomputes the same way)."
        )
    if _SETUP_CONTEXT in text and _custom_operator(error):
        return UnsupportedOperatorError(
            f"{where} runs f inside torch.func transforms, which cannot run the derivative of a torch.library "
            f"custom operator in f: register_autograd gives torch's eager autograd its backward, and torch.func "
            f"does not run it. Use gradient or pullback (and their value_* forms), whose eager reverse mode runs "
            f"it, or let DifferentiateWith(f, AutoTorch()) serve f to another engine; for hvp and hessian, give the "
            f"operator's computation in torch operations instead of a custom operator."
        )
    if _SETUP_CONTEXT in text:
        return UnsupportedOperatorError(
            f"{where} runs f inside torch.func transforms, which cannot run a torch.autograd.Function written "
            f"in the classic style, forward(ctx, ...). Write forward without ctx and add a setup_context "
            f"staticmethod (setup_context(ctx, inputs, output) saving what backward needs; see {_EXTENDING}), "
            f"or use gradient, pullback or hvp (and their value_* forms; hessian up to 1024 elements of x), whose "
            f"eager reverse mode runs it as it is."
        )
    if _NO_JVP in text:
        instead = (
            "or use reverse mode: pullback, or jacobian with AutoTorch(mode='reverse')"
            if operator in ("pushforward", "derivative", "jacobian")
            else f"{operator} differentiates forward over reverse here (compiled, or inside a transform), or call "
            f"it eagerly on AutoTorch(), whose double backward runs the Function's backward"
        )
        return UnsupportedOperatorError(
            f"{where} runs f in forward mode, and a torch.autograd.Function in f has no jvp. Add a jvp "
            f"staticmethod (jvp(ctx, *tangents), from what setup_context saved on ctx; see {_EXTENDING}), "
            f"{instead}."
        )
    if _NO_VMAP in text:
        name = text.split("vmap over ", 1)[1].split(",", 1)[0] if "vmap over " in text else ""
        function = f"torch.autograd.Function {name}" if name else "a torch.autograd.Function in f"
        instead = f", {_UNBATCHED[operator]}" if operator in _UNBATCHED else ""
        return UnsupportedOperatorError(
            f"{where} batches f with torch.func.vmap, and {function} has no vmap rule. Set "
            f"generate_vmap_rule = True on it (or define its vmap staticmethod; see {_EXTENDING}){instead}."
        )
    return None


def version_of(tensor: Any) -> int | None:
    """The version counter of a plain tensor (bumped by every write into its
    memory, through any view: about 60 ns), ``None`` for anything else and for
    an inference tensor, which keeps none."""
    if tensor.__class__ is not torch.Tensor:
        return None
    try:
        return int(tensor._version)
    except RuntimeError:
        return None


def refusing_writes(call: Callable[[], Any], tensors: Sequence[Any], error: Callable[[Any], Exception]) -> Any:
    """``call()``, refusing a write it made into one of ``tensors`` (its version
    counter moved) with ``error(tensor)``: chained to the ``Exception`` the call
    raised after the write, or instead of its result. A ``KeyboardInterrupt`` (a
    ``BaseException`` that is no ``Exception``) passes unchanged, whatever was
    written. For the untraced evaluations of ``f`` a preparation makes; the
    per-call runners (:mod:`.running`) inline the same check.

    Examples:
        >>> import torch
        >>> from di.engines.torch.rules import refusing_writes
        >>> t = torch.zeros(2)
        >>> refusing_writes(lambda: t.add_(1), [t], lambda written: ValueError("written"))
        Traceback (most recent call last):
        ...
        ValueError: written
    """
    versions = [version_of(t) for t in tensors]

    def written() -> Any:
        for tensor, version in zip(tensors, versions):
            if version is not None and tensor._version != version:
                return tensor
        return None

    try:
        result = call()
    except Exception as err:
        tensor = written()
        if tensor is not None:
            raise error(tensor) from err
        raise
    tensor = written()
    if tensor is not None:
        raise error(tensor)
    return result


def overwritten_error(
    backend: AbstractBackend, operator: str, x: Any, tensor: Any, *, untraced: bool = False
) -> InvalidInputError:
    """The :class:`di.InvalidInputError` for an ``f`` found, after it ran, to have
    written into ``tensor``, the torch ``x`` it received for the caller's ``x``
    (torch's forward mode, and ``f`` run untraced, let it write). ``untraced``:
    ``f`` was evaluated untraced for ``operator`` (an output's shape at
    preparation, a value); ``operator`` ``""`` where no operator is known (a
    strategy asked for ``f``'s value). It says whether the caller's ``x`` now
    holds the writes: it does where the two share memory.

    Examples:
        >>> import torch, di
        >>> from di.engines.torch.rules import overwritten_error
        >>> x = torch.zeros(2)
        >>> message = str(overwritten_error(di.AutoTorch(), "jacobian", x, x, untraced=True))
        >>> message.startswith("jacobian with AutoTorch("), message.split(": ")[0].endswith("(evaluating f untraced)")
        (True, True)
    """
    if x is tensor:
        shared: bool | None = True
    elif isinstance(x, (torch.Tensor, np.ndarray)):
        shared = storage_address(x) == storage_address(tensor) != 0
    else:
        shared = False if isinstance(x, (float, int)) else None  # (another family's memory: unknown)
    if shared:
        fate = "The caller's x already holds what f wrote (it shares memory with the tensor f received)"
        if getattr(x, "ndim", None) == 0 and isinstance(x, np.ndarray):  # (di's own array for a Python float x)
            fate = f"{fate}, unless x is a Python float"
    elif shared is None:
        fate = "The caller's x may already hold what f wrote, where it shares memory with the tensor f received"
    else:
        fate = "The caller's x is unchanged (f received a copy)"
    if not operator:
        where = f"evaluating f untraced with {backend!r}"
    else:
        where = f"{operator} with {backend!r}" + (" (evaluating f untraced)" if untraced else "")
    return InvalidInputError(
        f"{where}: f wrote into x in place (x[i] = ..., x += ...), found after f ran. {fate}. {_RULE}"
    )


def custom_operator_error(
    f: Callable[..., Any], primals: Sequence[Any], backend: AbstractBackend, operator: str
) -> UnsupportedOperatorError | None:
    """The :class:`di.UnsupportedOperatorError` for an output without a tangent under
    ``torch.func.jvp`` when ``f`` calls a ``torch.library`` custom operator (which has
    no forward-mode derivative: ``register_autograd`` gives only a backward), else
    ``None``. Runs ``f`` once more on ``primals``, watching the operators it calls:
    only on that error's path.

    Examples:
        >>> import torch, di
        >>> from di.engines.torch.rules import custom_operator_error
        >>> custom_operator_error(torch.sin, (torch.ones(2),), di.AutoTorch(), "pushforward") is None
        True
    """
    seen = _CalledOperators()
    try:
        with seen:
            f(*primals)
    except Exception:  # the diagnosis is best effort: the caller reports the cut-off output
        return None
    if not seen.custom:
        return None
    return UnsupportedOperatorError(
        f"{operator} with {backend!r} runs f in forward mode, which cannot differentiate the torch.library custom "
        f"operator {seen.custom[0]} in f: register_autograd gives it a backward only, which forward mode does not "
        f"run. Use gradient or pullback (and their value_* forms), whose eager reverse mode runs it, or let "
        f"DifferentiateWith(f, AutoTorch()) serve f to another engine; or give the operator's computation in torch "
        f"operations instead of a custom operator."
    )


class _CalledOperators(torch.overrides.TorchFunctionMode):
    """Records the ``torch.library`` custom operators (outside torch's own
    namespaces) called while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.custom: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        namespace = getattr(func, "namespace", None)
        if isinstance(func, torch._ops.OpOverload) and namespace not in _TORCH_NAMESPACES:
            self.custom.append(f"{namespace}::{func._opname}")
        return func(*args, **(kwargs or {}))


_TORCH_NAMESPACES = ("aten", "prim", "prims", "_c10d_functional", "c10d", "inductor")


def _custom_operator(error: BaseException) -> bool:
    """Whether ``error`` was raised running a ``torch.library`` custom operator's
    derivative (torch's own autograd.Function for it, which has no setup_context)."""
    traceback = error.__traceback__
    while traceback is not None:
        if "_library" in traceback.tb_frame.f_code.co_filename:
            return True
        traceback = traceback.tb_next
    return False


_FOREIGN = (
    ("Concatenation operation is not implemented for NumPy arrays", "closure"),  # data + x
    ("'numpy.ndarray' and 'Tensor'", "closure"),  # data * x, data @ x, data - x: "unsupported operand type(s)"
    ("Can't call numpy() on Tensor that requires grad", "either"),  # np.sin(x), x * data
    ("Cannot access data pointer of Tensor that doesn't have storage", "either"),  # the same in torch.func
)
"""torch's refusals of NumPy inside ``f``, and what each says ``f`` did."""


class _Rules(OutputRules):
    """torch outputs: tensors; traced from ``x`` as the transform records it."""

    traces = True
    conversion_errors = (RuntimeError, TypeError)  # torch's refusals of NumPy (_FOREIGN)

    def accepts_array(self, y: Any) -> bool:
        return isinstance(y, torch.Tensor) and y.is_floating_point()

    def translate(
        self, error: BaseException, backend: AbstractBackend, operator: str, values: Sequence[Any]
    ) -> BaseException | None:
        # torch refused a write into x, or a torch.autograd.Function its torch.func program cannot run
        return write_error(error, backend, operator) or custom_function_error(error, backend, operator)

    def foreign_cause(self, error: BaseException) -> str:
        text = str(error)
        return next((cause for marker, cause in _FOREIGN if marker in text), "")

    def foreign_output(self, y: Any) -> str:
        # np.asarray(x) on a tensor torch.func traces gives NumPy's array, not a tensor
        return "numpy" if isinstance(y, np.ndarray) else ""


class _ReverseRules(_Rules):
    """Reverse mode (``torch.autograd.grad``, ``torch.func.grad``/``vjp``): an
    output computed from ``x`` requires grad."""

    def is_traced(self, y: Any, x: Any) -> bool:
        first = x[0] if isinstance(x, (list, tuple)) and x else x  # the leaves of a pytree x
        return not (isinstance(first, torch.Tensor) and first.requires_grad) or bool(getattr(y, "requires_grad", False))


class _ForwardRules(_Rules):
    """Forward mode (``torch.func.jvp``, eager): an output computed from ``x``
    carries a tangent."""

    def is_traced(self, y: Any, x: Any) -> bool:
        if dynamo_compiling():  # dynamo's fake tensors cannot unpack duals (and say nothing of f)
            return True
        try:
            if forward_ad.unpack_dual(x).tangent is None:
                return True  # x is not being differentiated here
            return forward_ad.unpack_dual(y).tangent is not None
        except RuntimeError:  # a level or wrapper it cannot read: do not refuse
            return True


RULES = _Rules()
"""Outputs of programs whose tracing ``di`` cannot inspect (compiled forward mode)."""
REVERSE_RULES = _ReverseRules()
FORWARD_RULES = _ForwardRules()


def refuse_cut_off(y: Any, differentiated: Any, backend: Any, operator: str) -> None:
    """Raise :class:`di.InvalidOutputError` for an array output (one that
    :func:`~di.backends.outputs.check_output` accepted) that reverse mode did not
    record from ``x``: one that does not require grad, as a ``.detach()``, a
    tensor built anew or another engine's result leaves it. Its derivative
    would read as zeros, which it is not; a scalar output is refused the same
    way by ``check_output``. An ``f`` constant in ``x`` returns an array computed
    from ``x`` (``x * 0 + c``), which is recorded and differentiates to zeros.

    Raises:
        InvalidOutputError: ``y`` was not computed from ``x``.
    """
    if y.__class__ is torch.Tensor and not y.requires_grad and not REVERSE_RULES.is_traced(y, differentiated):
        raise cut_off_error(y, backend, operator)


def cut_off_error(y: Any, backend: Any, operator: str) -> InvalidOutputError:
    """The :class:`di.InvalidOutputError` for an array output cut off from ``x``:
    the contract's account (:func:`~di.backends.outputs.untraced_output_error`),
    and the remedy for the other common cut, another engine's result inside
    ``f`` (a ``di`` call on another backend, which comes back detached)."""
    error = untraced_output_error(y, backend, operator)
    return InvalidOutputError(
        f"{error} If f calls a di operator on another backend (its results come back detached), wrap that "
        f"function g as di.DifferentiateWith(g, that_backend) so that torch can differentiate it."
    )
