"""One process of the two-process torch checks (tests/test_distributed.py starts two).

Usage: python distributed_torch.py RANK PORT OUT.json. The processes form a gloo
process group over loopback and train a small model with DDP and with FSDP2
(``fully_shard``) on CPU, each on its own data; every check compares ``di``'s
result with what the training's own ``loss.backward()`` leaves in ``.grad`` (or
expects a ``di.DistributedError``), and records ``[ok, detail]`` under its name
in OUT.json.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

RANK, PORT, OUT = int(sys.argv[1]), sys.argv[2], sys.argv[3]
STARTED = time.perf_counter()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.func import functional_call  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import di  # noqa: E402

torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{PORT}", rank=RANK, world_size=2)


def model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial parameters on both processes, as DDP requires
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()


torch.manual_seed(1 + RANK)  # each process its own batch
BATCH = torch.randn(5, 3, dtype=torch.float64)
TARGET = torch.randn(5, 1, dtype=torch.float64)


def mse(output: Any) -> Any:
    return ((output - TARGET) ** 2).mean()


DDP = DistributedDataParallel(model())


def backward_grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What DDP's (or FSDP's) own training step leaves in ``.grad``."""
    module.zero_grad()
    mse(module(BATCH)).backward()
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters()}
    module.zero_grad()
    return grads


def local_grads() -> dict[str, torch.Tensor]:
    """This process's own gradient (what a silent rank-local result would be)."""
    plain = model()
    plain.load_state_dict(DDP.module.state_dict())
    grads = torch.autograd.grad(mse(plain(BATCH)), plain.parameters())
    return dict(zip([name for name, _ in plain.named_parameters()], grads))


EXPECTED = backward_grads(DDP)  # names "module.0.weight", ...
LOCAL = local_grads()  # names "0.weight", ...


def same(result: dict[str, Any], expected: dict[str, torch.Tensor]) -> str:
    for (name, got), want in zip(result.items(), expected.values()):
        if not torch.allclose(got, want, rtol=1e-10, atol=1e-12):
            return f"{name}: {got.flatten()[:3].tolist()} != {want.flatten()[:3].tolist()}"
    return ""


CHECKS: dict[str, Callable[[], str]] = {}


def check(function: Callable[[], str]) -> Callable[[], str]:
    CHECKS[function.__name__] = function
    return function


def ddp_loss(params: dict[str, Any]) -> Any:
    return mse(functional_call(DDP, params, (BATCH,)))


@check
def ddp_processes_have_different_local_gradients() -> str:
    # the checks below can fail: a rank-local gradient differs from the averaged one
    return "" if not torch.allclose(LOCAL["0.weight"], EXPECTED["module.0.weight"]) else "local == averaged"


@check
def ddp_gradient_is_the_averaged_one() -> str:
    params = dict(DDP.named_parameters())
    backend = di.AutoTorch()
    prep = di.prepare_gradient(ddp_loss, backend, params)
    value, unprepared = di.value_and_gradient(ddp_loss, backend, params)
    expected_value = mse(DDP.module(BATCH)).item()

    def with_aux(params: dict[str, Any]) -> Any:
        return ddp_loss(params), {"note": "aux"}

    (_, aux), with_aux_gradient = di.value_and_gradient(with_aux, backend, params, has_aux=True)  # JAX's layout
    return (
        same(di.gradient(ddp_loss, prep, backend, params), EXPECTED)
        or same(di.gradient(ddp_loss, prep, backend, params), EXPECTED)  # a second prepared call
        or same(unprepared, EXPECTED)
        or same(di.gradient(with_aux, backend, params, has_aux=True)[0], EXPECTED)
        or same(with_aux_gradient, EXPECTED)
        or ("" if aux == {"note": "aux"} else f"aux {aux}")
        or ("" if abs(value.item() - expected_value) < 1e-12 else "the value is not this process's loss")
    )


@check
def ddp_gradient_of_copies_of_the_parameters_is_averaged() -> str:
    params = {name: p.detach().clone() for name, p in DDP.named_parameters()}
    return same(di.gradient(ddp_loss, di.AutoTorch(), params), EXPECTED)


@check
def ddp_gradient_inside_no_sync_is_the_local_one() -> str:
    params = dict(DDP.named_parameters())
    with DDP.no_sync():
        return same(di.gradient(ddp_loss, di.AutoTorch(), params), LOCAL)


@check
def ddp_refuses_other_operators_on_its_parameters() -> str:
    params = dict(DDP.named_parameters())
    tangent = {name: torch.ones_like(p) for name, p in params.items()}
    try:
        di.hvp(ddp_loss, di.AutoTorch(), params, (tangent,))
    except di.DistributedError as err:
        return "" if "DDP" in str(err) and "loss.backward()" in str(err) else f"message: {err}"
    return "hvp was not refused"


@check
def ddp_gradient_with_respect_to_inputs_stays_local() -> str:
    def input_loss(batch: Any) -> Any:
        return mse(DDP(batch))

    got = di.gradient(input_loss, di.AutoTorch(), BATCH)
    batch = BATCH.clone().requires_grad_()
    want = torch.autograd.grad(mse(DDP.module(batch)), batch)[0]
    return "" if torch.allclose(got, want) else "the input gradient differs"


@check
def ddp_training_continues_after_di() -> str:
    params = dict(DDP.named_parameters())
    di.gradient(ddp_loss, di.AutoTorch(), params)
    found = same(backward_grads(DDP), EXPECTED)  # .grad and buckets as before
    if found:
        return found
    optimizer = torch.optim.SGD(DDP.parameters(), lr=0.1)
    mse(DDP(BATCH)).backward()
    optimizer.step()
    di.gradient(ddp_loss, di.AutoTorch(), params)
    after = backward_grads(DDP)  # the next step's averaged gradient: both processes agree
    gathered = [torch.zeros_like(after["module.0.weight"]) for _ in range(2)]
    dist.all_gather(gathered, after["module.0.weight"])
    return "" if torch.allclose(gathered[0], gathered[1]) else "the processes' .grad differ after a step"


@check
def ddp_fastest_decides_alike_on_every_process() -> str:
    params = dict(DDP.named_parameters())
    backend = di.AutoFastest([di.AutoTorch(), di.AutoTorch(create_graph=False)], budget_s=0.05)
    prep = di.prepare_gradient(ddp_loss, backend, params)
    expected = backward_grads(DDP)  # (the parameters as the checks before left them)
    return same(di.gradient(ddp_loss, prep, backend, params), expected) or f"chosen {prep.plan.chosen!r}"


def fsdp_model() -> Any:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    module = model()
    fully_shard(module, mesh=init_device_mesh("cpu", (2,)))
    return module


@check
def fsdp_refuses_dtensor_parameters_and_keeps_training() -> str:
    module = fsdp_model()
    expected = backward_grads(module)  # reduced shards, as DTensors
    params = dict(module.named_parameters())

    def loss(p: Any) -> Any:
        return mse(functional_call(module, p, (BATCH,)))

    for operator, args in (("gradient", ()), ("hvp", ({n: torch.ones_like(p) for n, p in params.items()},))):
        try:
            getattr(di, operator)(loss, di.AutoTorch(), params, *[(a,) for a in args])
        except di.DistributedError as err:
            if "FSDP" not in str(err):
                return f"{operator} message: {err}"
        else:
            return f"{operator} was not refused"
    after = backward_grads(module)  # the module's next step works, with the same gradient
    for name, want in expected.items():
        if not torch.allclose(after[name].full_tensor(), want.full_tensor()):
            return f"{name} differs after di's calls"
    return ""


@check
def fsdp_refuses_full_tensors_in_place_of_its_parameters() -> str:
    module = fsdp_model()
    expected = backward_grads(module)
    params = {name: p.full_tensor().detach() for name, p in module.named_parameters()}
    try:
        di.gradient(lambda p: mse(functional_call(module, p, (BATCH,))), di.AutoTorch(), params)
    except di.DistributedError as err:
        if "FSDP" not in str(err):
            return f"message: {err}"
    else:
        return "not refused"
    after = backward_grads(module)
    for name, value in expected.items():
        if not torch.allclose(after[name].full_tensor(), value.full_tensor()):
            return f"{name} differs after di's calls"
    return ""


@check
def fsdp_gradient_with_respect_to_inputs() -> str:
    module = fsdp_model()
    expected = backward_grads(module)
    plain = model()
    batch = BATCH.clone().requires_grad_()
    want = torch.autograd.grad(mse(plain(batch)), batch)[0]
    try:
        got = di.gradient(lambda b: mse(module(b)), di.AutoTorch(), BATCH)
    except di.DistributedError as err:
        refused = f"refused: {err}"
    else:
        refused = ""
        if not torch.allclose(got, want):
            return "the input gradient differs"
    grads = [p.grad for p in module.parameters()]
    if any(g is not None for g in grads):
        return f"di left .grad set on FSDP's parameters ({refused})"
    after = backward_grads(module)
    for name, value in expected.items():
        if not torch.allclose(after[name].full_tensor(), value.full_tensor()):
            return f"{name} differs after di's calls ({refused})"
    return refused and f"refused: {refused}"


def main() -> None:
    results: dict[str, list[Any]] = {}
    only = os.environ.get("DI_DISTRIBUTED_ONLY", "")  # while debugging: some checks by name
    for name, function in CHECKS.items():
        if only and name not in only.split(","):
            continue
        start = time.perf_counter()
        try:
            found = function()
            results[name] = [not found or found.startswith("chosen"), found]
        except Exception:
            results[name] = [False, traceback.format_exc()]
        results[name].append(round(time.perf_counter() - start, 2))
    results["seconds"] = [True, f"{time.perf_counter() - STARTED:.1f}"]
    with open(OUT, "w", encoding="utf-8") as file:
        json.dump(results, file)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
