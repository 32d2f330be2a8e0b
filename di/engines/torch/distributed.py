"""``di`` in ``torch.distributed`` training: DDP and FSDP2.

DDP averages gradients in its reducer, which hooks ``loss.backward()``;
``torch.autograd.grad`` and ``torch.func`` (what ``di`` differentiates with)
bypass it, so a gradient with respect to the parameters DDP manages would be one
process's own, silently. :func:`watching` runs ``di``'s programs with a
module-forward hook that sees each DDP module ``f`` runs; for a gradient (and
``value_and_gradient``) with respect to parameters such a module holds while
``f`` runs it (DDP's own, or tensors ``torch.func.functional_call`` put in their
place), the gradient is averaged over DDP's process group, as ``backward()``
leaves it in ``.grad``; inside ``no_sync()`` it stays the process's own, as
``backward()`` leaves it there. Every other operator with respect to those
parameters is refused. While ``f`` runs, the DDP module is kept from preparing
its reducer for a backward that never comes, so training goes on as before.

FSDP2 (``fully_shard``) makes parameters DTensors whose forward and backward
are hooked to gather and reduce-scatter them: ``di`` refuses DTensors in ``x``
before running anything (:func:`refuse_sharded_parameters`), so the module is
never left half gathered.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Any

import torch

from di.backends.processes import Processes
from di.backends.protocol import Program, Programs
from di.errors import DistributedError
from di.pytrees import tree_flatten, tree_leaves, tree_unflatten

__all__ = ["TorchProcesses", "processes_of", "refuse_sharded_parameters", "watching"]

_AVERAGED = frozenset({"gradient", "value_and_gradient"})

DDP_PATTERNS = (
    "Two patterns work: (1) let DDP reduce: compute the loss through the DDP module and call loss.backward(), "
    "which leaves the averaged gradient in each parameter's .grad (use di for derivatives with respect to "
    "inputs); (2) differentiate the unwrapped module (ddp.module) with di and reduce yourself, "
    "torch.distributed.all_reduce(g) then g / world_size, on every process."
)


def _initialized() -> bool:
    """Whether a default process group exists (nothing distributed otherwise)."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def refuse_sharded_parameters(x: Any, operator: str, backend: Any) -> None:
    """Refuse DTensors in ``x`` (FSDP2's parameters), before anything runs.

    Raises:
        DistributedError: a leaf of ``x`` is a DTensor.
    """
    tensor_module = sys.modules.get("torch.distributed.tensor")
    if tensor_module is None:
        return
    dtensor = tensor_module.DTensor
    if not any(isinstance(leaf, dtensor) for leaf in tree_leaves(x)):
        return
    second = operator in ("hvp", "hessian", "second_derivative")
    why = (
        "FSDP's post-backward hooks free the gathered parameters that a second (double) backward would need"
        if second
        else "the gradient FSDP gives is reduced and scattered by its own backward hooks, which di's "
        "torch.autograd.grad and torch.func calls would bypass or leave half done (the module then fails "
        "with 'got mixed torch.Tensor and DTensor')"
    )
    raise DistributedError(
        f"{operator} with {backend!r} cannot differentiate with respect to DTensor parameters (FSDP2, fully_shard): "
        f"{why}. For the parameters' gradient, call loss.backward() on the FSDP module, which leaves the reduced "
        f"shards as DTensors in each parameter's .grad; use di for derivatives with respect to inputs, or for "
        f"parameters held as ordinary tensors outside FSDP."
    )


class _Seen:
    """The DDP modules ``f`` ran during one call, with the storage addresses of
    the parameters each held then."""

    __slots__ = ("buffers", "modules", "pointers", "syncing", "unreadable")

    def __init__(self) -> None:
        self.modules: list[Any] = []
        self.buffers: list[bool] = []
        self.pointers: set[int] = set()
        self.syncing: list[bool] = []
        self.unreadable = False

    def hook(self, module: Any, args: Any) -> None:
        _refuse_substituted_fsdp_parameters(module)
        ddp = sys.modules["torch.nn.parallel"].DistributedDataParallel
        if not isinstance(module, ddp) or any(module is m for m in self.modules):
            return
        self.modules.append(module)
        self.syncing.append(bool(module.require_backward_grad_sync))
        self.buffers.append(bool(module.require_forward_param_sync))
        module.require_backward_grad_sync = False  # no reducer preparation for a backward that never comes
        for parameter in [*module.parameters(), *getattr(module, "_module_parameters", ())]:
            try:
                self.pointers.add(parameter.data_ptr())
            except RuntimeError:  # a torch.func wrapper (functional_call put x's leaves there)
                self.unreadable = True

    def restore(self) -> None:
        """DDP's flags as they were (its forward sets the buffers' one from the other)."""
        for module, syncing, buffers in zip(self.modules, self.syncing, self.buffers):
            module.require_backward_grad_sync = syncing
            module.require_forward_param_sync = buffers


def _refuse_substituted_fsdp_parameters(module: Any) -> None:
    """Refuse an FSDP2 module about to run with other tensors than its DTensor
    parameters (``functional_call`` with full tensors): raised before FSDP's own
    pre-forward hook, which would gather its shards into a module whose
    parameters were swapped (and leave it mixing tensors and DTensors).

    Raises:
        DistributedError: the module is FSDP2's and holds a parameter that is
            not a DTensor.
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")
    tensor_module = sys.modules.get("torch.distributed.tensor")
    fsdp_module: Any = getattr(fsdp, "FSDPModule", None)
    if fsdp_module is None or tensor_module is None or not isinstance(module, fsdp_module):
        return
    if all(isinstance(p, tensor_module.DTensor) for p in module.parameters()):
        return
    raise DistributedError(
        "f runs an FSDP2 module (fully_shard) with tensors put in place of its DTensor parameters "
        "(torch.func.functional_call), which FSDP's hooks would gather and reduce as its own, leaving the module "
        "broken. For the parameters' gradient, call loss.backward() on the FSDP module (it leaves the reduced "
        "shards as DTensors in .grad); derivatives with respect to inputs through the module itself work."
    )


def _pointer(leaf: Any) -> int | None:
    try:
        return leaf.data_ptr() if isinstance(leaf, torch.Tensor) else None
    except RuntimeError:
        return None


def _managed(seen: _Seen, x: Any) -> list[bool]:
    """For each leaf of ``x``: whether it served as a parameter of a DDP module."""
    leaves = tree_leaves(x)
    return [
        (pointer := _pointer(leaf)) is not None and (pointer in seen.pointers or seen.unreadable) for leaf in leaves
    ]


def _average(gradient: Any, managed: Sequence[bool], seen: _Seen) -> Any:
    """``gradient`` with the leaves DDP manages averaged over its process group
    (one all-reduce of them all, flattened)."""
    dist = sys.modules["torch.distributed"]
    groups = {id(m.process_group): m.process_group for m in seen.modules}
    if len(groups) > 1:
        raise DistributedError(
            "f runs DDP modules of different process groups, whose gradients di cannot average as their "
            f"backward() would. {DDP_PATTERNS}"
        )
    (group,) = groups.values()
    leaves, spec = tree_flatten(gradient)
    chosen = [leaf for leaf, m in zip(leaves, managed) if m]
    flat = torch.cat([leaf.reshape(-1) for leaf in chosen])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    flat = flat / dist.get_world_size(group)
    pieces = iter(torch.split(flat, [leaf.numel() for leaf in chosen]))
    return tree_unflatten(spec, [next(pieces).reshape(leaf.shape) if m else leaf for leaf, m in zip(leaves, managed)])


def _check_reducible(seen: _Seen, operator: str, backend: Any) -> None:
    hooked = [m for m in seen.modules if getattr(m, "_comm_hooks", None)]
    if hooked:
        raise DistributedError(
            f"{operator} with {backend!r}: f runs a DDP module with a communication hook (register_comm_hook), "
            f"whose reduction di cannot reproduce, with respect to its parameters. {DDP_PATTERNS}"
        )
    if operator not in _AVERAGED:
        raise DistributedError(
            f"{operator} with {backend!r} would be this process's own with respect to parameters DDP manages "
            f"(DistributedDataParallel averages gradients in loss.backward() only, which di's calls bypass); di "
            f"averages the gradient (di.gradient, di.value_and_gradient) and refuses other operators there. "
            f"{DDP_PATTERNS}"
        )


def watching(programs: Programs, backend: Any, has_aux: bool = False) -> Programs:
    """``programs`` aware of DDP modules ``f`` runs (see the module docstring);
    the programs themselves where no process group exists (the check is made at
    preparation: nothing is added to a call outside distributed training)."""
    if not _initialized():
        return programs
    return {name: _watched(name, program, backend, has_aux) for name, program in programs.items()}


def _averaged(name: str, result: Any, managed: Sequence[bool], seen: _Seen, has_aux: bool) -> Any:
    """A gradient program's ``result`` (``g``, ``(y, g)``, each with ``aux`` beside
    it under ``has_aux``) with ``g`` averaged."""
    if has_aux:
        return _averaged(name, result[0], managed, seen, False), result[1]
    if name == "value_and_gradient":
        return result[0], _average(result[1], managed, seen)
    return _average(result, managed, seen)


def _watched(name: str, program: Program, backend: Any, has_aux: bool) -> Program:
    register = torch.nn.modules.module.register_module_forward_pre_hook
    operator = name.removeprefix("value_and_").removeprefix("value_gradient_and_").removeprefix("gradient_and_")

    @functools.wraps(program)
    def run(x: Any, *rest: Any) -> Any:
        seen = _Seen()
        handle = register(seen.hook)
        try:
            result = program(x, *rest)
        finally:
            handle.remove()
            seen.restore()
        if not seen.modules:
            return result
        managed = _managed(seen, x)
        if not any(managed):  # derivatives with respect to inputs: what backward() gives too
            return result
        _check_reducible(seen, operator, backend)
        if not any(seen.syncing):  # inside no_sync(): backward() leaves the process's own gradient too
            return result
        return _averaged(name, result, managed, seen, has_aux)

    return run


class TorchProcesses(Processes):
    """The processes of a ``torch.distributed`` process group."""

    def __init__(self, group: Any = None) -> None:
        dist = sys.modules["torch.distributed"]
        super().__init__(dist.get_world_size(group), dist.get_rank(group), "torch.distributed")
        self.group = group

    def broadcast_text(self, text: str) -> str:
        dist = sys.modules["torch.distributed"]
        box = [text]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return str(box[0])


def processes_of(values: Sequence[Any]) -> TorchProcesses | None:
    """:class:`TorchProcesses` of the default group when one of several processes
    exists and ``values`` hold a module's parameters (which every process of a
    DDP run differentiates together); ``None`` otherwise."""
    if not _initialized() or sys.modules["torch.distributed"].get_world_size() == 1:
        return None
    if not any(isinstance(leaf, torch.nn.Parameter) for leaf in tree_leaves(list(values))):
        return None
    return TorchProcesses()
