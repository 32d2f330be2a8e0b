"""One process of the two-process JAX checks (tests/test_distributed.py starts two).

Usage: python distributed_jax.py RANK PORT OUT.json. The processes join one
``jax.distributed`` run over loopback with gloo CPU collectives, one CPU device
each, and run every check of :data:`CHECKS` in the same order (a collective
waits for both); each check compares ``di``'s result with JAX's own, shard by
shard, and records ``[ok, detail]`` under its name in OUT.json.
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

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.config.update("jax_num_cpu_devices", 1)
jax.distributed.initialize(f"127.0.0.1:{PORT}", num_processes=2, process_id=RANK, initialization_timeout=60)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import di  # noqa: E402

MESH = jax.make_mesh((2,), ("x",))  # explicit axes: JAX's default
AUTO_MESH = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))


def global_array(mesh: Any) -> Any:
    """1..8, each process holding its half."""
    local = np.arange(1.0, 5.0, dtype=np.float32) + 4 * RANK
    return jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), local, (8,))


X = global_array(MESH)
X_AUTO = global_array(AUTO_MESH)


def loss(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x**2) / 3


def square(x: Any) -> Any:
    return x**2 + 0.5 * x


def same(result: Any, expected: Any, like: Any = None) -> str:
    """'' when ``result`` equals ``expected`` shard by shard (and has ``like``'s
    sharding), else what differs."""
    for got, want in zip(jax.tree_util.tree_leaves(result), jax.tree_util.tree_leaves(expected)):
        if not isinstance(got, jax.Array) or got.shape != want.shape:
            return f"got {type(got).__name__} {getattr(got, 'shape', None)}, want {want.shape}"
        if like is not None and got.ndim == like.ndim and got.sharding.spec != like.sharding.spec:
            return f"sharding {got.sharding.spec} is not x's {like.sharding.spec}"
        mine = {str(s.index): np.asarray(s.data) for s in got.addressable_shards}
        whole = np.asarray(got.addressable_data(0)) if got.sharding.is_fully_replicated else None
        for shard in want.addressable_shards:
            data = mine.get(str(shard.index)) if whole is None else whole[shard.index]
            if data is None:
                return f"no shard at {shard.index}"
            if not np.allclose(data, np.asarray(shard.data), rtol=1e-5, atol=1e-6):
                return f"shard {shard.index}: {data} != {np.asarray(shard.data)}"
    return ""


CHECKS: dict[str, Callable[[], str]] = {}


def check(function: Callable[[], str]) -> Callable[[], str]:
    CHECKS[function.__name__] = function
    return function


GRAD = jax.jit(jax.grad(loss))
BACKENDS = {"eager": di.AutoJAX(), "jit": di.AutoJAX(jit=True)}


@check
def gradient() -> str:
    expected = GRAD(X)
    jit = BACKENDS["jit"]
    for label, result in (
        ("eager", di.gradient(loss, BACKENDS["eager"], X)),
        ("jit", di.gradient(loss, jit, X)),
        ("jit prepared", di.gradient(loss, di.prepare_gradient(loss, jit, X), jit, X)),
        ("jit value_and", di.value_and_gradient(loss, jit, X)[1]),
    ):
        found = same(result, expected, X)
        if found:
            return f"{label}: {found}"
    return ""


@check
def gradient_on_a_mesh_of_automatic_axes() -> str:
    return same(di.gradient(loss, di.AutoJAX(), X_AUTO), GRAD(X_AUTO))


@check
def gradient_inside_jax_jit() -> str:
    return same(jax.jit(lambda x: di.gradient(loss, di.AutoJAX(), x))(X), GRAD(X), X)


@check
def hvp_and_hessian() -> str:
    v = X * 0.5
    expected_hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(loss), (x,), (v,))[1])(X, v)
    for name, backend in BACKENDS.items():
        found = same(di.hvp(loss, backend, X, (v,))[0], expected_hvp, X)
        if found:
            return f"{name}: {found}"
    jit = BACKENDS["jit"]
    try:  # a same-point prep keeps the point's value to compare, which no process can read whole
        di.prepare_hvp_same_point(loss, jit, X, (v,))
    except di.DistributedError:
        pass
    else:
        return "prepare_hvp_same_point was not refused"
    return same(di.hessian(loss, jit, X), jax.jit(jax.hessian(loss))(X))


@check
def jacobian_pushforward_pullback() -> str:
    v, backend = X * 0.5, BACKENDS["jit"]
    expected_pushforward = jax.jit(lambda x, v: jax.jvp(square, (x,), (v,))[1])(X, v)
    expected_pullback = jax.jit(lambda x, v: jax.vjp(square, x)[1](v)[0])(X, v)
    expected_jacobian = jax.jit(jax.jacfwd(square))(X)
    return (
        same(di.jacobian(square, backend, X), expected_jacobian)
        or same(di.jacobian(lambda tree: square(tree["x"]), backend, {"x": X})["x"], expected_jacobian)
        or same(di.pushforward(square, backend, X, (v,))[0], expected_pushforward, X)
        or same(di.pullback(square, backend, X, (v,))[0], expected_pullback, X)
    )


@check
def sparse_jacobian_and_hessian() -> str:
    expected_jacobian = jax.jit(jax.jacfwd(square))(X)
    sparse = di.AutoSparse(BACKENDS["jit"], dense_result=True)
    found = same(di.jacobian(square, sparse, X), expected_jacobian) or same(
        di.hessian(loss, sparse, X), jax.jit(jax.hessian(loss))(X)
    )
    if found:
        return found
    matrix = di.jacobian(square, di.AutoSparse(BACKENDS["jit"]), X)  # BCOO, its nonzeros on every device
    return same(matrix.todense(), expected_jacobian)


@check
def fastest_decides_alike_on_every_process() -> str:
    cache = os.path.join(os.path.dirname(OUT), f"plans-{RANK}.json")  # each process its own file
    backend = di.AutoFastest([BACKENDS["eager"], BACKENDS["jit"]], budget_s=0.05, cache=cache)
    prep = di.prepare_gradient(loss, backend, X)
    found = same(di.gradient(loss, prep, backend, X), GRAD(X), X)
    if found:
        return found
    if RANK == 1:
        os.remove(cache)  # process 1 remembers nothing: process 0's remembered plan decides for both
    again = di.prepare_gradient(loss, backend, X)
    if not again.plan.source.startswith("cache") or again.plan.chosen != prep.plan.chosen:
        return f"the second preparation did not follow process 0's cache: {again.plan.source}"
    return f"chosen {prep.plan.chosen!r}"  # the test compares the two processes' choices


@check
def numpy_caller_of_a_result_no_process_can_read() -> str:
    def weighted(x: Any, weights: Any) -> Any:
        return jnp.sum(x * weights)  # the gradient is sharded like the weights: over both processes

    try:
        di.gradient(weighted, BACKENDS["jit"], np.ones(8, dtype=np.float32), di.Constant(X * 2.0))
    except di.DistributedError as err:
        return "" if "process_allgather" in str(err) else f"message: {err}"
    return "no DistributedError"


CALLBACK_CALLS: list[int] = []


def coupled(x: Any) -> Any:
    """A loss whose every gradient entry depends on every entry of x."""
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x)) ** 2


def counted_coupled(x: Any) -> Any:
    CALLBACK_CALLS.append(int(x.size))
    return coupled(x)


@check
def differentiate_with() -> str:
    wrapped = di.DifferentiateWith(counted_coupled, di.AutoJAX())
    found = same(jax.jit(jax.grad(wrapped))(X), jax.jit(jax.grad(coupled))(X), X)
    return found or f"f ran here on x of sizes {CALLBACK_CALLS}"


def main() -> None:
    results = {}
    only = os.environ.get("DI_DISTRIBUTED_ONLY", "")  # while debugging: some checks by name
    for name, function in CHECKS.items():
        if only and name not in only.split(","):
            continue
        start = time.perf_counter()
        try:
            found = function()
            ok = not found or found.startswith(("chosen", "f ran"))
            results[name] = [ok, found]
        except Exception:
            results[name] = [False, traceback.format_exc(limit=6)]
        results[name].append(round(time.perf_counter() - start, 2))
    results["seconds"] = [True, f"{time.perf_counter() - STARTED:.1f}"]
    with open(OUT, "w", encoding="utf-8") as file:
        json.dump(results, file)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
