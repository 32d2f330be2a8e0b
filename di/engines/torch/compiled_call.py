"""The common prepared call of a compiled ``torch.func`` program, in one Python frame.

A compiled program runs dynamo's compiled function (its guards and the graph:
about 20 us at n = 1e3 on a CPU, nearly all of it fixed) inside ``di``'s layers,
each a closure of its own: the traced form chosen inside transforms
(:func:`~di.engines.torch.transforms.dispatching`), the inputs converted and the
forward-mode lock (:func:`~di.engines.torch.running.running`), the results
detached (:func:`~di.engines.torch.ownership.detaching`) and owned
(:func:`~di.engines.torch.ownership.owning`). Python runs them with caches cold
from dynamo's call: measured at n = 1e3, they added 4.9 us to the compiled
function's 23.5 us pushforward, where one frame doing the same work added 2.0
(the layers' work alone, timed warm, is about 1.5 us).

:func:`fused_call` makes the common call (outside transforms; ``x`` a plain
dense tensor, and with tangents one plain dense tensor tangent of ``x``'s dtype
and device) in one frame that does what the layers do to it: the same lock, the
same check of a write into ``x``, and the results detached and owned by the
same functions. Every other call (a pytree ``x``, a NumPy tangent, several
tangents, inside a transform, an inference tensor) goes to the layered program,
unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import forward_ad

from di.backends.protocol import Program
from di.engines.torch.ownership import detached_unless_kept, requires_grad_anywhere
from di.engines.torch.running import FORWARD_MODE_LOCK
from di.engines.torch.transforms import dynamo_compiling, functorch_active

__all__ = ["Fusible", "fused_call"]

_TENSOR = torch.Tensor


class Fusible:
    """What a compiled program built by :class:`~di.engines.torch.func_builder.FuncBuilder`
    offers the adapter, which owns its results: the same program in one frame
    (:meth:`fused`). Made only for a program whose layers leave the common call's
    inputs as they are (a ``torch`` ``x``, no context converted, the selector's
    ``create_graph`` on, no static context counted).

    Args:
        layered: the program as layered (dispatching, detaching, running).
        function: the compiled function those layers run: ``(x, [tangent,] *values)``,
            one tangent tensor bare.
        lead: 1, or 2 for a program with tangents.
        locked: the function runs forward mode (see :data:`FORWARD_MODE_LOCK`).
        refuse: the error for a write of ``f`` into ``x`` (``refuse(x, x)``), or
            ``None`` where the layered program makes no such check (only without
            tangents).
    """

    __slots__ = ("function", "layered", "lead", "locked", "refuse")

    def __init__(
        self,
        layered: Program,
        function: Callable[..., Any],
        lead: int,
        locked: bool,
        refuse: Callable[[Any, Any], Exception] | None,
    ) -> None:
        self.layered = layered
        self.function = function
        self.lead = lead
        self.locked = locked
        self.refuse = refuse

    def fused(
        self, general: Program, owned: Callable[[Any, tuple[Any, ...]], Any] | None, products_alone: bool
    ) -> Program:
        """The program in one frame (:func:`fused_call`): ``general``, the layered
        program with its results owned by ``owned(output, args)`` (``None``: taken
        as they are), for every call but the common one; ``products_alone``: it
        returns its products alone."""
        program = fused_call(general, self.function, self.lead, self.locked, self.refuse, owned, products_alone)
        if getattr(self.layered, "keeps_x_structure", False):
            program.keeps_x_structure = True  # type: ignore[attr-defined]
        return program


def fused_call(
    general: Program,
    function: Callable[..., Any],
    lead: int,
    locked: bool,
    refuse: Callable[[Any, Any], Exception] | None,
    owned: Callable[[Any, tuple[Any, ...]], Any] | None,
    products_alone: bool = False,
) -> Program:
    """``general`` with its common call made in one frame (see the module
    docstring): ``function`` (the compiled function ``general`` runs, taking one
    tangent bare) under the forward-mode lock where ``locked``, a write into ``x``
    refused with ``refuse(x, x)`` (chained to the error ``f`` raised after it, as
    :func:`~di.engines.torch.running.running` does), the results detached unless
    the call keeps the caller's graph and owned by ``owned``. ``products_alone``:
    the program returns its products alone (no value, no ``aux``), so a computed
    product, no view and no tangent, is owned as it is (as ``owned`` finds).

    Examples:
        >>> import torch
        >>> from di.engines.torch.compiled_call import fused_call
        >>> general = lambda x, tangents: ("general", tangents)
        >>> refuse = lambda x, written: ValueError("f wrote into x")
        >>> run = fused_call(general, lambda x, t: (2 * t,), 2, False, refuse, None)
        >>> run(torch.ones(2), (torch.ones(2),))
        (tensor([2., 2.]),)
        >>> run(torch.ones(2), [torch.ones(2)])[0]  # not the common call: the layered program
        'general'
    """
    lock = FORWARD_MODE_LOCK if locked else None
    level = forward_ad  # (its _current_level: -1 outside dual_level())
    # (one body per signature, inline: the point of this module is a frame per call; the
    # transform test is inside_transform's, and the lock and write check running's, spelled
    # out here for that reason)
    if lead == 2:
        if refuse is None:  # (a program with tangents always runs the layers' write check)
            raise ValueError("fused_call: a program with tangents takes refuse")

        def run_with_tangents(x: Any, tangents: Any, *values: Any) -> Any:
            if (
                x.__class__ is not _TENSOR
                or tangents.__class__ is not tuple
                or len(tangents) != 1
                or dynamo_compiling()
                or functorch_active()
                or level._current_level >= 0
            ):
                return general(x, tangents, *values)
            t = tangents[0]
            if not (
                t.__class__ is _TENSOR
                and t.dtype is x.dtype
                and t.get_device() == x.get_device()
                and x.is_contiguous()
                and t.is_contiguous()
            ):
                return general(x, tangents, *values)
            try:
                version = x._version
            except RuntimeError:  # an inference tensor keeps no count
                return general(x, tangents, *values)
            try:
                if lock is None:
                    output = function(x, t, *values)
                else:
                    with lock:
                        output = function(x, t, *values)
            except Exception as err:  # (f's own error, or torch's refusal, may come after the write)
                if x._version != version:
                    raise refuse(x, x) from err
                raise
            if x._version != version:
                raise refuse(x, x)
            if products_alone and output.__class__ is tuple and len(output) == 1:
                p = output[0]  # the common product: computed, no view, no graph (nothing to own or detach)
                if p.__class__ is _TENSOR and p is not t and p._base is None and not p.requires_grad:
                    return output
            if requires_grad_anywhere(output):
                output = detached_unless_kept(output, (x, tangents, *values), 2, True)
            return output if owned is None else owned(output, (x, tangents, *values))

        return run_with_tangents

    def run(x: Any, *values: Any) -> Any:
        if dynamo_compiling() or functorch_active() or level._current_level >= 0:
            return general(x, *values)
        if refuse is None:  # (the layered program checks nothing of x: no write check, nothing made dense)
            output = function(x, *values)
        else:
            if x.__class__ is not _TENSOR or not x.is_contiguous():
                return general(x, *values)
            try:
                version = x._version
            except RuntimeError:
                return general(x, *values)
            try:
                if lock is None:
                    output = function(x, *values)
                else:
                    with lock:
                        output = function(x, *values)
            except Exception as err:
                if x._version != version:
                    raise refuse(x, x) from err
                raise
            if x._version != version:
                raise refuse(x, x)
        if owned is None and output.__class__ is _TENSOR and not output.requires_grad:
            return output  # the common gradient: nothing to own or detach
        if requires_grad_anywhere(output):
            output = detached_unless_kept(output, (x, *values), 1, True)
        return output if owned is None else owned(output, (x, *values))

    return run
