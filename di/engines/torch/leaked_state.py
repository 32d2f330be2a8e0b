"""What a failed call of a graph compiled with dynamo's ``"eager"`` backend leaves
changed in torch's global autograd state, put back.

That backend runs the captured graph op by op, ``torch.func``'s own state changes
included as calls of their own (``_saved_tensors_hooks_disable``, entering a
forward-mode dual level, ...), and an exception between a change and its undo
skips the undo: after a compiled ``jvp`` of a ``grad`` failed, saved-tensor hooks
stayed disabled for the whole process and every later forward-mode call raised
"Nested forward mode AD is not supported" (natively too:
``torch.compile(lambda x, t: torch.func.jvp(torch.func.grad(f), (x,), (t,)),
backend="eager")``). The inductor and aot_eager backends compile those changes
away and leave nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import forward_ad

__all__ = ["hooks_enabled", "restore", "restoring"]

hooks_enabled: Callable[[], bool] = torch._C._autograd._saved_tensors_hooks_is_enabled  # type: ignore[attr-defined]
"""Whether saved-tensor hooks are enabled (torch's global flag)."""


def restore(hooks_were_enabled: bool) -> None:
    """After a failed compiled call: saved-tensor hooks enabled again if they were
    before it, and a forward-mode dual level left open closed (where the caller
    has none of its own: ``forward_ad``'s level is -1)."""
    if hooks_were_enabled and not hooks_enabled():
        torch._C._autograd._saved_tensors_hooks_enable()
    if forward_ad._current_level >= 0:
        return
    try:
        level = torch._C._enter_dual_level()
    except RuntimeError:  # ("Nested forward mode AD is not supported"): one left open
        torch._C._exit_dual_level(level=0)
    else:
        torch._C._exit_dual_level(level=level)


def restoring(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, with what a failure leaves changed put back (:func:`restore`)
    before its error goes on.

    Examples:
        >>> import torch
        >>> from di.engines.torch.leaked_state import hooks_enabled, restoring
        >>> def failing():
        ...     torch._C._autograd._saved_tensors_hooks_disable("left disabled")
        ...     raise ValueError("f's own error")
        >>> try:
        ...     restoring(failing)()
        ... except ValueError as error:
        ...     print(error, hooks_enabled())
        f's own error True
    """

    def restoring_call(*args: Any) -> Any:
        hooks = hooks_enabled()
        try:
            return call(*args)
        except BaseException:
            restore(hooks)
            raise

    return restoring_call
