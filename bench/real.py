"""Real inputs: what users pass besides one array in the engine's own family.

``python -m bench.real [--sizes 10,1e3,1e5] [--repeats N] [--no-compile] [--out PATH]``
runs only these rows (``python -m bench`` runs them too, into ``bench/results.md``).

Each row is the prepared ``di`` call against the call a user of that engine writes by
hand for the same input, timed interleaved in one process (:mod:`bench.timing`):

* **pytree x**: a flat dict of 1, 8 or 64 leaves (``f`` sums over its leaves, with one
  ``Constant`` 0-d context) and a nested dict/list of an MLP's parameters
  (``{"layers": [{"w", "b"}, ...]}``, the batch as two ``Constant`` contexts), on
  ``AutoJAX(jit=True)``, ``AutoJAX()``, ``AutoTorch()`` and ``AutoAutograd()``, for
  ``gradient`` and ``value_and_gradient``;
* **a torch nn.Module** through ``torch.func.functional_call`` with
  ``dict(model.named_parameters())`` as ``x``, against ``torch.autograd.grad`` on the
  same loss (and against ``loss.backward()``);
* **an optax-style loop step** on ``AutoJAX(jit=True)``: ``value_and_gradient`` then a
  jitted Adam update of the nested parameters, fed back each step (optax is not
  installed here: the update is written by hand with ``jax.tree_util.tree_map``),
  against the same step with ``jax.jit(jax.value_and_grad(loss))`` and against one
  jitted native step;
* **numpy callers** of ``AutoJAX(jit=True)``, ``AutoJAX()`` and ``AutoTorch()``, whose
  native side converts by itself (``np.asarray(jax.jit(jax.grad(f))(x))``;
  ``torch.from_numpy`` in, ``.numpy()`` out);
* **compiles of a value_and_gradient-only loop** on ``AutoJAX(jit=True)`` (traces of
  ``f``, counted by a Python side effect) and ``AutoTorch(compile=True)`` (graphs handed
  to a recording ``torch.compile`` backend): the time and count of compiles in
  preparation, in the first call and in the calls after it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python bench/real.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import di
from bench.report import ROW_HEADERS, Row, Table, format_ns, measured_row
from bench.timing import Settings

__all__ = ["RealCase", "compile_table", "main", "real_cases", "real_rows", "target_lines", "time_case"]

Thunk = Callable[[], Any]
LEAF_COUNTS = (1, 8, 64)
INPUTS, BATCH = 4, 64
GRADIENT, VALUE_AND_GRADIENT = "gradient", "value_and_gradient"


@dataclass
class RealCase:
    """One row: the native call and the ``di`` call on the same input."""

    backend: str
    operator: str
    function: str
    n: int
    dtype: str
    native: Thunk
    through_di: Thunk
    scope: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# --- the functions ----------------------------------------------------------------------------


def leaf_sum(p: Any, c: Any) -> Any:
    """``sum over leaves of sum((leaf**2 - c)**2)`` for a flat dict ``p``."""
    total = 0.0
    for leaf in p.values():
        total = total + ((leaf * leaf - c) ** 2).sum()
    return total


def mlp_loss(params: Any, inputs: Any, targets: Any) -> Any:
    """The mean squared error of a tanh MLP whose parameters are
    ``{"layers": [{"w": ..., "b": ...}, ...]}``."""
    xp = di.array_namespace(inputs)
    hidden = inputs
    layers = params["layers"]
    for layer in layers[:-1]:
        hidden = xp.tanh(hidden @ layer["w"] + layer["b"])
    prediction = hidden @ layers[-1]["w"] + layers[-1]["b"]
    return ((prediction - targets) ** 2).mean()


def mlp_width(n: int) -> int:
    """The hidden width whose MLP (``INPUTS -> h -> h -> 1``) has about ``n`` parameters."""
    width = 1
    while (width + 1) ** 2 + 7 * (width + 1) + 1 <= n:
        width += 1
    return width


def mlp_numpy(n: int, dtype: str) -> tuple[dict[str, Any], np.ndarray, np.ndarray, int]:
    """Parameters (numpy, nested), inputs, targets and the parameter count."""
    width = mlp_width(n)
    rng = np.random.default_rng(n)
    shapes = [(INPUTS, width), (width, width), (width, 1)]
    layers = [
        {"w": (rng.normal(size=s) / np.sqrt(s[0])).astype(dtype), "b": np.zeros(s[1], dtype=dtype)} for s in shapes
    ]
    inputs = rng.normal(size=(BATCH, INPUTS)).astype(dtype)
    targets = np.sin(inputs.sum(axis=1, keepdims=True)).astype(dtype)
    count = sum(layer["w"].size + layer["b"].size for layer in layers)
    return {"layers": layers}, inputs, targets, count


def leaves_numpy(n: int, leaves: int, dtype: str) -> tuple[dict[str, np.ndarray], int]:
    """A flat dict of ``leaves`` arrays of ``max(1, n // leaves)`` values each."""
    size = max(1, n // leaves)
    rng = np.random.default_rng(n + leaves)
    tree = {f"w{i:02d}": rng.uniform(-1.0, 1.0, size).astype(dtype) for i in range(leaves)}
    return tree, size * leaves


def tree_to_numpy(value: Any) -> np.ndarray:
    """Every leaf of a result (dicts, lists, tuples of any family) in one float64 vector."""
    if isinstance(value, dict):  # sorted: JAX rebuilds dicts in sorted key order
        return np.concatenate([tree_to_numpy(value[key]) for key in sorted(value)]) if value else np.zeros(0)
    if isinstance(value, (list, tuple)):
        return np.concatenate([tree_to_numpy(item) for item in value]) if value else np.zeros(0)
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64).reshape(-1)


def _map(function: Callable[[Any], Any], tree: Any) -> Any:
    """A hand-written map over dicts and lists (what the torch side of a user's loop writes)."""
    if isinstance(tree, dict):
        return {key: _map(function, value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_map(function, value) for value in tree]
    return function(tree)


def _leaves(tree: Any) -> Iterator[Any]:
    if isinstance(tree, dict):
        for value in tree.values():
            yield from _leaves(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _leaves(value)
    else:
        yield tree


def _rebuild(tree: Any, leaves: Iterator[Any]) -> Any:
    return _map(lambda _: next(leaves), tree)


# --- pytree x ----------------------------------------------------------------------------------


def _inputs(n: int, dtype: str) -> list[tuple[str, Any, tuple[Any, ...], Callable[..., Any], int]]:
    """(name, x numpy, context values numpy, f, element count) for each pytree input."""
    found: list[tuple[str, Any, tuple[Any, ...], Callable[..., Any], int]] = []
    for leaves in LEAF_COUNTS:
        tree, count = leaves_numpy(n, leaves, dtype)
        found.append((f"dict of {leaves} leaves", tree, (np.asarray(0.5, dtype=dtype),), leaf_sum, count))
    params, inputs, targets, count = mlp_numpy(n, dtype)
    found.append(("nested MLP dict/list", params, (inputs, targets), mlp_loss, count))
    return found


def _gradient_rows(
    label: str,
    name: str,
    count: int,
    dtype: str,
    backend: Any,
    f: Callable[..., Any],
    x: Any,
    wrapped: tuple[Any, ...],
    native_grad: Callable[[], Any],
    native_vag: Callable[[], Any],
    block: Callable[[Any], Any] | None = None,
) -> list[RealCase]:
    """The gradient and value_and_gradient cases of one input: the native calls
    given, di's through one prep of ``f`` at ``x`` (their results passed to
    ``block``, when given, as the native side does)."""
    prep = di.prepare_gradient(f, backend, x, *wrapped)
    if block is None:

        def di_grad(f: Any = f, prep: Any = prep, x: Any = x, wrapped: Any = wrapped) -> Any:
            return di.gradient(f, prep, backend, x, *wrapped)

        def di_vag(f: Any = f, prep: Any = prep, x: Any = x, wrapped: Any = wrapped) -> Any:
            return di.value_and_gradient(f, prep, backend, x, *wrapped)

    else:

        def di_grad(f: Any = f, prep: Any = prep, x: Any = x, wrapped: Any = wrapped) -> Any:
            return block(di.gradient(f, prep, backend, x, *wrapped))

        def di_vag(f: Any = f, prep: Any = prep, x: Any = x, wrapped: Any = wrapped) -> Any:
            return block(di.value_and_gradient(f, prep, backend, x, *wrapped))

    return [
        RealCase(label, GRADIENT, name, count, dtype, native_grad, di_grad),
        RealCase(label, VALUE_AND_GRADIENT, name, count, dtype, native_vag, di_vag),
    ]


def _jax_pytree_cases(n: int, dtype: str, jit: bool) -> list[RealCase]:
    import jax
    import jax.numpy as jnp

    label = "AutoJAX(jit=True)" if jit else "AutoJAX()"
    backend = di.AutoJAX(jit=jit)
    block = jax.block_until_ready
    wrap = jax.jit if jit else (lambda fn: fn)
    cases = []
    for name, tree, contexts, f, count in _inputs(n, dtype):
        x = jax.tree_util.tree_map(jnp.asarray, tree)
        values = tuple(jnp.asarray(c) for c in contexts)
        wrapped = tuple(di.Constant(v) for v in values)
        grad, value_and_grad = wrap(jax.grad(f)), wrap(jax.value_and_grad(f))

        def native_grad(grad: Any = grad, x: Any = x, values: Any = values) -> Any:
            return block(grad(x, *values))

        def native_vag(value_and_grad: Any = value_and_grad, x: Any = x, values: Any = values) -> Any:
            return block(value_and_grad(x, *values))

        cases += _gradient_rows(label, name, count, dtype, backend, f, x, wrapped, native_grad, native_vag, block)
    return cases


def _torch_pytree_cases(n: int, dtype: str) -> list[RealCase]:
    import torch

    backend = di.AutoTorch()
    autograd_grad = torch.autograd.grad
    cases = []
    for name, tree, contexts, f, count in _inputs(n, dtype):
        x = _map(torch.from_numpy, tree)
        values = tuple(torch.from_numpy(np.asarray(c)) for c in contexts)
        wrapped = tuple(di.Constant(v) for v in values)

        def native_grad(f: Any = f, x: Any = x, values: Any = values) -> Any:
            leaves = [leaf.detach().requires_grad_() for leaf in _leaves(x)]
            grads = autograd_grad(f(_rebuild(x, iter(leaves)), *values), leaves)
            return _rebuild(x, iter(grads))

        def native_vag(f: Any = f, x: Any = x, values: Any = values) -> Any:
            leaves = [leaf.detach().requires_grad_() for leaf in _leaves(x)]
            y = f(_rebuild(x, iter(leaves)), *values)
            grads = autograd_grad(y, leaves)
            return y.detach(), _rebuild(x, iter(grads))

        cases += _gradient_rows("AutoTorch()", name, count, dtype, backend, f, x, wrapped, native_grad, native_vag)
    return cases


def _autograd_pytree_cases(n: int, dtype: str) -> list[RealCase]:
    import autograd

    backend = di.AutoAutograd()
    cases = []
    for name, tree, contexts, f, count in _inputs(n, dtype):
        wrapped = tuple(di.Constant(c) for c in contexts)
        grad, value_and_grad = autograd.grad(f), autograd.value_and_grad(f)

        def native_grad(grad: Any = grad, x: Any = tree, values: Any = contexts) -> Any:
            return grad(x, *values)

        def native_vag(value_and_grad: Any = value_and_grad, x: Any = tree, values: Any = contexts) -> Any:
            return value_and_grad(x, *values)

        cases += _gradient_rows(
            "AutoAutograd()", name, count, dtype, backend, f, tree, wrapped, native_grad, native_vag
        )
    return cases


# --- a torch nn.Module through functional_call ---------------------------------------------------


def _module_cases(n: int, dtype: str, compiled: bool) -> list[RealCase]:
    import torch
    from torch.func import functional_call

    width = max(1, (n - 1) // (INPUTS + 2))
    torch.manual_seed(n)
    model = torch.nn.Sequential(torch.nn.Linear(INPUTS, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))
    model = model.to(getattr(torch, dtype))
    params = dict(model.named_parameters())
    count = sum(p.numel() for p in params.values())
    rng = np.random.default_rng(n)
    inputs = torch.from_numpy(rng.normal(size=(BATCH, INPUTS)).astype(dtype))
    targets = torch.sin(inputs.sum(dim=1, keepdim=True))

    def loss(p: Any, inputs: Any, targets: Any) -> Any:
        return ((functional_call(model, p, (inputs,)) - targets) ** 2).mean()

    contexts = (di.Constant(inputs), di.Constant(targets))
    name = "nn.Module via functional_call"
    if compiled:
        torch._dynamo.reset()
        backend: Any = di.AutoTorch(compile=True)
        label = "AutoTorch(compile=True)"
        native_grad_fn = torch.compile(torch.func.grad(loss))
        native_vag_fn = torch.compile(torch.func.grad_and_value(loss))

        def native_grad() -> Any:
            return native_grad_fn(params, inputs, targets)

        def native_vag() -> Any:
            grads, value = native_vag_fn(params, inputs, targets)
            return value, grads

    else:
        return _eager_module_cases(loss, params, contexts, name, count, dtype)

    prep = di.prepare_gradient(loss, backend, params, *contexts)

    def di_grad() -> Any:
        return di.gradient(loss, prep, backend, params, *contexts)

    def di_vag() -> Any:
        return di.value_and_gradient(loss, prep, backend, params, *contexts)

    return [
        RealCase(label, GRADIENT, name, count, dtype, native_grad, di_grad),
        RealCase(label, VALUE_AND_GRADIENT, name, count, dtype, native_vag, di_vag),
    ]


def _eager_module_cases(
    loss: Callable[..., Any], params: dict[str, Any], contexts: tuple[Any, ...], name: str, count: int, dtype: str
) -> list[RealCase]:
    """Eager torch on a module's parameters. They require grad, so ``AutoTorch()``
    keeps the caller's graph (its results are differentiable, as
    ``torch.autograd.grad(..., create_graph=True)`` gives them) and is timed against
    that; ``AutoTorch(create_graph=False)`` against ``torch.autograd.grad`` and
    ``loss.backward()``."""
    import torch

    leaves, names = tuple(params.values()), tuple(params)
    values = [c.value for c in contexts]
    grad = torch.autograd.grad

    def native(create_graph: bool = False) -> Any:
        return dict(zip(names, grad(loss(params, *values), leaves, create_graph=create_graph)))

    def native_vag() -> Any:
        y = loss(params, *values)
        return y.detach(), dict(zip(names, grad(y, leaves)))

    def native_backward() -> Any:
        for leaf in leaves:
            leaf.grad = None
        loss(params, *values).backward()
        return {key: leaf.grad for key, leaf in params.items()}

    kept, detached = di.AutoTorch(), di.AutoTorch(create_graph=False)
    kept_prep = di.prepare_gradient(loss, kept, params, *contexts)
    prep = di.prepare_gradient(loss, detached, params, *contexts)

    def di_grad() -> Any:
        return di.gradient(loss, prep, detached, params, *contexts)

    def di_vag() -> Any:
        return di.value_and_gradient(loss, prep, detached, params, *contexts)

    def di_kept() -> Any:
        return di.gradient(loss, kept_prep, kept, params, *contexts)

    label = "AutoTorch(create_graph=False)"
    return [
        RealCase(label, GRADIENT, name, count, dtype, native, di_grad),
        RealCase(label, VALUE_AND_GRADIENT, name, count, dtype, native_vag, di_vag),
        RealCase(label, "gradient vs loss.backward()", name, count, dtype, native_backward, di_grad),
        RealCase("AutoTorch()", "gradient, graph kept", name, count, dtype, lambda: native(create_graph=True), di_kept),
    ]


# --- an optax-style loop step -------------------------------------------------------------------


def adam(learning_rate: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> tuple[Any, Any]:
    """A hand-written Adam in optax's shape: ``(init(params), update(grads, state, params))``."""
    import jax
    import jax.numpy as jnp

    tree_map = jax.tree_util.tree_map

    def init(params: Any) -> Any:
        return (jnp.zeros((), jnp.int32), tree_map(jnp.zeros_like, params), tree_map(jnp.zeros_like, params))

    def update(grads: Any, state: Any, params: Any) -> tuple[Any, Any]:
        count, mu, nu = state
        count = count + 1
        mu = tree_map(lambda m, g: b1 * m + (1 - b1) * g, mu, grads)
        nu = tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, nu, grads)
        scale_mu, scale_nu = 1 - b1**count, 1 - b2**count
        params = tree_map(
            lambda p, m, v: p - learning_rate * (m / scale_mu) / (jnp.sqrt(v / scale_nu) + eps), params, mu, nu
        )
        return params, (count, mu, nu)

    return init, update


def _value_only() -> dict[str, Any]:
    """``value=True`` where di has it: a loop calling value_and_gradient alone."""
    return {"value": True} if "value" in inspect.signature(di.prepare_gradient).parameters else {}


def _loop_cases(n: int, dtype: str) -> list[RealCase]:
    import jax
    import jax.numpy as jnp

    params_np, inputs_np, targets_np, count = mlp_numpy(n, dtype)
    params0 = jax.tree_util.tree_map(jnp.asarray, params_np)
    inputs, targets = jnp.asarray(inputs_np), jnp.asarray(targets_np)
    init, update = adam()
    jitted_update = jax.jit(update)
    value_and_grad = jax.jit(jax.value_and_grad(mlp_loss))

    @jax.jit
    def fused_step(params: Any, state: Any, inputs: Any, targets: Any) -> tuple[Any, Any, Any]:
        value, grads = jax.value_and_grad(mlp_loss)(params, inputs, targets)
        params, state = update(grads, state, params)
        return value, params, state

    backend = di.AutoJAX(jit=True)
    contexts = (di.Constant(inputs), di.Constant(targets))
    prep = di.prepare_gradient(mlp_loss, backend, params0, *contexts, **_value_only())
    # Each side feeds its parameters back, as a training loop does (new arrays every step).
    native_state = {"params": params0, "opt": init(params0)}
    fused_state = {"params": params0, "opt": init(params0)}
    di_state = {"params": params0, "opt": init(params0)}

    def native_step() -> Any:
        value, grads = value_and_grad(native_state["params"], inputs, targets)
        native_state["params"], native_state["opt"] = jitted_update(grads, native_state["opt"], native_state["params"])
        return jax.block_until_ready((value, native_state["params"]))

    def fused() -> Any:
        value, fused_state["params"], fused_state["opt"] = fused_step(
            fused_state["params"], fused_state["opt"], inputs, targets
        )
        return jax.block_until_ready((value, fused_state["params"]))

    def di_step() -> Any:
        value, grads = di.value_and_gradient(mlp_loss, prep, backend, di_state["params"], *contexts)
        di_state["params"], di_state["opt"] = jitted_update(grads, di_state["opt"], di_state["params"])
        return jax.block_until_ready((value, di_state["params"]))

    label = "AutoJAX(jit=True)"
    name = "MLP loop step (value_and_gradient + jitted Adam)"
    return [
        RealCase(label, "step vs native step", name, count, dtype, native_step, di_step),
        RealCase(label, "step vs one jitted native step", name, count, dtype, fused, di_step),
    ]


# --- numpy callers ----------------------------------------------------------------------------------


def rosenbrock(x: Any) -> Any:
    """The extended Rosenbrock function (as in bench/functions.py)."""
    first, second = x[0::2], x[1::2]
    return (100.0 * (second - first * first) ** 2 + (1.0 - first) ** 2).sum()


def _numpy_caller_cases(n: int, dtype: str, engines: Sequence[str]) -> list[RealCase]:
    cases: list[RealCase] = []
    x = np.random.default_rng(n).uniform(-1.0, 1.0, n).astype(dtype)
    for key in engines:
        if key in ("jax-jit", "jax"):
            import jax

            jit = key == "jax-jit"
            scope: Any = (lambda: jax.enable_x64(True)) if dtype == "float64" else contextlib.nullcontext
            backend: Any = di.AutoJAX(jit=jit)
            label = "AutoJAX(jit=True)" if jit else "AutoJAX()"
            with scope():
                grad = jax.jit(jax.grad(rosenbrock)) if jit else jax.grad(rosenbrock)
                prep = di.prepare_gradient(rosenbrock, backend, x)

            def native(grad: Any = grad) -> Any:
                return np.asarray(grad(x))

            def mlp_native(grad: Any, params: Any, inputs: Any, targets: Any) -> Any:
                return jax.tree_util.tree_map(np.asarray, grad(params, inputs, targets))

        elif key == "torch":
            import torch

            scope = contextlib.nullcontext
            backend = di.AutoTorch()
            label = "AutoTorch()"
            prep = di.prepare_gradient(rosenbrock, backend, x)
            autograd_grad = torch.autograd.grad

            def native(grad: Any = autograd_grad) -> Any:
                xr = torch.from_numpy(x).requires_grad_()
                return grad(rosenbrock(xr), xr)[0].numpy()

        else:
            continue

        def through_di(prep: Any = prep, backend: Any = backend) -> Any:
            return di.gradient(rosenbrock, prep, backend, x)

        cases.append(RealCase(label, "gradient, numpy caller", "rosenbrock", n, dtype, native, through_di, scope))
        if key == "jax-jit" and dtype == "float32":
            params, inputs, targets, count = mlp_numpy(n, dtype)
            mlp_grad = jax.jit(jax.grad(mlp_loss))
            contexts = (di.Constant(inputs), di.Constant(targets))
            mlp_prep = di.prepare_gradient(mlp_loss, backend, params, *contexts)

            def mlp_native_call(grad: Any = mlp_grad, data: Any = (params, inputs, targets)) -> Any:
                return mlp_native(grad, *data)

            def mlp_through_di(
                prep: Any = mlp_prep, backend: Any = backend, params: Any = params, contexts: Any = contexts
            ) -> Any:
                return di.gradient(mlp_loss, prep, backend, params, *contexts)

            cases.append(
                RealCase(
                    label,
                    "gradient, numpy caller",
                    "nested MLP dict/list",
                    count,
                    dtype,
                    mlp_native_call,
                    mlp_through_di,
                )
            )
    return cases


# --- all rows -----------------------------------------------------------------------------------------


def real_cases(sizes: Sequence[int], engines: Sequence[str], compiled: bool) -> Iterator[Callable[[], list[RealCase]]]:
    """Builders of the cases, one per group (built lazily: one group's compiles at a time)."""
    pytree_builders: dict[str, Callable[[int, str], list[RealCase]]] = {
        "jax-jit": partial(_jax_pytree_cases, jit=True),
        "jax": partial(_jax_pytree_cases, jit=False),
        "torch": _torch_pytree_cases,
        "autograd": _autograd_pytree_cases,
    }
    for n in sizes:
        for key, build in pytree_builders.items():
            if key in engines:
                yield partial(build, n, "float32")
    for n in sizes:
        if "torch" in engines:
            yield partial(_module_cases, n, "float32", compiled=False)
        if compiled and "torch-compile" in engines and n == 1_000:
            yield partial(_module_cases, n, "float32", compiled=True)
    for n in sizes:
        if "jax-jit" in engines and n >= 1_000:
            yield partial(_loop_cases, n, "float32")
    for n in [n for n in sizes if n <= 1_000]:
        for dtype in ("float32", "float64"):
            yield partial(_numpy_caller_cases, n, dtype, engines)


def _check(case: RealCase) -> str:
    expected, got = tree_to_numpy(case.native()), tree_to_numpy(case.through_di())
    if expected.shape != got.shape:
        return f"RESULTS DIFFER (sizes {expected.shape} and {got.shape})"
    if "step" in case.operator:
        return ""  # each side has fed its own parameters back: compared once, before timing
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    error = float(np.max(np.abs(expected - got))) / scale if expected.size else 0.0
    return "" if error < 1e-3 else f"RESULTS DIFFER (max rel. error {error:.2g})"


def time_case(case: RealCase, settings: Settings) -> Row:
    """The row of one case (a failure becomes the row's note)."""
    return measured_row(
        case.backend,
        case.operator,
        case.function,
        case.n,
        case.dtype,
        case.native,
        case.through_di,
        settings,
        scope=case.scope,
        check=lambda: _check(case),
    )


def real_rows(
    sizes: Sequence[int], engines: Sequence[str], compiled: bool, settings: Settings, emit: Callable[[Row], None]
) -> list[Row]:
    """Every real-input row, printed through ``emit`` as it is measured."""
    rows: list[Row] = []
    for build in real_cases(sizes, engines, compiled):
        try:
            cases = build()
        except Exception as err:
            row = Row("?", "?", "?", 0, note=f"failed to build: {err!r}"[:200])
            rows.append(row)
            emit(row)
            continue
        for case in cases:
            row = time_case(case, settings)
            rows.append(row)
            emit(row)
    return rows


REAL_INTRO = (
    "The prepared di call (strict prep) against the call a user of the engine writes for the same input. "
    "Pytree rows: f sums `(leaf**2 - c)**2` over a flat dict's leaves (one `Constant` 0-d context c) or is an "
    "MLP's mean squared error over a nested dict/list of its parameters (`Constant` inputs and targets); n "
    "counts all leaves' elements. Natives: AutoJAX(jit=True) `jax.jit(jax.grad(f))(p, *contexts)` (and "
    "`value_and_grad`), AutoJAX() the same without `jax.jit`, AutoTorch() requires-grad copies of the leaves "
    "and `torch.autograd.grad`, AutoAutograd() `autograd.grad(f)(p, *contexts)`; JAX results waited for with "
    "`jax.block_until_ready`. nn.Module rows: `dict(model.named_parameters())` as x of a loss through "
    "`torch.func.functional_call` (a 4 -> h -> 1 tanh MLP, batch 64), against `torch.autograd.grad(loss, "
    "params.values())` on the same loss, and against `loss.backward()` (grads reset each call); compiled: "
    "`torch.compile(torch.func.grad(loss))`. Loop steps: value_and_gradient plus a jitted hand-written Adam "
    "update (optax is not installed here), parameters fed back every step, against the same step with "
    "`jax.jit(jax.value_and_grad(loss))` and against one jitted native step (value_and_grad and update in one "
    "`jax.jit`). numpy callers: x a numpy array; natives `np.asarray(jax.jit(jax.grad(f))(x))`, "
    "`np.asarray(jax.grad(f)(x))`, `torch.from_numpy(x).requires_grad_()` ... `.numpy()`; float64 JAX rows "
    "inside `jax.enable_x64(True)` on both sides."
)


# --- compiles of a value_and_gradient-only loop --------------------------------------------------------


def _prepare_variants() -> list[tuple[str, dict[str, Any]]]:
    """``prepare_gradient`` as today, and with ``value=True`` where di has it."""
    variants: list[tuple[str, dict[str, Any]]] = [("prepare_gradient", {})]
    if "value" in inspect.signature(di.prepare_gradient).parameters:
        variants.append(("prepare_gradient(..., value=True)", {"value": True}))
    return variants


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter_ns()
    result = call()
    return result, time.perf_counter_ns() - start


def _loop_counts(
    backend: Any, f: Callable[..., Any], x: Any, options: dict[str, Any], counter: list[int], later_calls: int
) -> tuple[float, int, float, int, int]:
    """Prepare, one timed value_and_gradient call, ``later_calls`` more: the times and
    the compiles (``counter[0]``) in each phase."""
    import jax

    def block(value: Any) -> Any:
        return jax.block_until_ready(value) if isinstance(backend, di.AutoJAX) else value

    prep, prepare_ns = _timed(lambda: di.prepare_gradient(f, backend, x, **options))
    in_prepare = counter[0]
    _, first_ns = _timed(lambda: block(di.value_and_gradient(f, prep, backend, x)))
    in_first = counter[0] - in_prepare
    for _ in range(later_calls):
        block(di.value_and_gradient(f, prep, backend, x))
    return prepare_ns, in_prepare, first_ns, in_first, counter[0] - in_prepare - in_first


def _counting_f(counter: list[int]) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        counter[0] += 1  # a Python side effect: runs once per JAX trace
        return rosenbrock(x)

    return f


def _plain_rosenbrock() -> Callable[..., Any]:
    def f(x: Any) -> Any:  # a fresh function: nothing compiled for it yet
        return rosenbrock(x)

    return f


def _jax_compile_rows(n: int, later_calls: int) -> list[list[str]]:
    import jax
    import jax.numpy as jnp

    rows = []
    x = jnp.asarray(np.random.default_rng(n).uniform(-1.0, 1.0, n), dtype=jnp.float32)
    for variant, options in _prepare_variants():
        traces = [0]
        measured = _loop_counts(di.AutoJAX(jit=True), _counting_f(traces), x, options, traces, later_calls)
        rows.append(_compile_row("AutoJAX(jit=True)", variant, "traces of f", measured))
    fresh = [0]
    g = _counting_f(fresh)
    _, native_ns = _timed(lambda: jax.jit(jax.value_and_grad(g)).lower(x).compile())
    rows.append(
        [
            "native",
            "jax.jit(jax.value_and_grad(f)).lower(x).compile()",
            "traces of f",
            format_ns(native_ns),
            str(fresh[0]),
            "-",
            "-",
            "-",
        ]
    )
    return rows


def _compile_row(label: str, variant: str, counted: str, measured: tuple[float, int, float, int, int]) -> list[str]:
    prepare_ns, in_prepare, first_ns, in_first, later = measured
    times = [format_ns(prepare_ns), str(in_prepare), format_ns(first_ns), str(in_first), str(later)]
    return [label, variant, counted, *times]


def _recording_backend(inner: str, counter: list[int]) -> Callable[..., Any]:
    from torch._dynamo import lookup_backend

    compiled_backend = lookup_backend(inner)

    def recording(gm: Any, example_inputs: Any) -> Any:
        counter[0] += 1
        return compiled_backend(gm, example_inputs)

    return recording


def _torch_compile_rows(n: int, later_calls: int, inner: str) -> list[list[str]]:
    import torch

    rows = []
    x = torch.from_numpy(np.random.default_rng(n).uniform(-1.0, 1.0, n).astype(np.float32))
    for variant, options in _prepare_variants():
        torch._dynamo.reset()
        graphs = [0]
        backend = di.AutoTorch(compile=True, compile_options={"backend": _recording_backend(inner, graphs)})
        # f without a side effect: torch.compile guards on one and would recompile for it
        measured = _loop_counts(backend, _plain_rosenbrock(), x, options, graphs, later_calls)
        rows.append(_compile_row("AutoTorch(compile=True)", variant, f"graphs compiled ({inner})", measured))
    return rows


def compile_table(engines: Sequence[str], compiled: bool, torch_backend: str = "inductor") -> Table:
    """Compiles (count and time) of a loop that calls only ``value_and_gradient``."""
    table = Table(
        "Compiles of a value_and_gradient-only loop",
        [
            "backend",
            "preparation",
            "counted",
            "preparation time",
            "compiles in preparation",
            "first value_and_gradient",
            "compiles in the first call",
            "compiles in 10 calls after",
        ],
        intro=(
            "A loop that prepares once and then calls only `di.value_and_gradient` (rosenbrock, n = 1e3, "
            "float32), timed once each (wall clock, a fresh f). JAX counts traces of f (a Python side effect in "
            "f runs once per trace); torch counts the graphs dynamo hands to a recording `torch.compile` backend "
            f"that passes them to `{torch_backend}`. A loop that compiles once shows 1 in one of the two "
            "compile columns and 0 elsewhere."
        ),
    )
    if "jax-jit" in engines:
        table.rows += _jax_compile_rows(1_000, 10)
    if compiled and "torch-compile" in engines:
        table.rows += _torch_compile_rows(1_000, 10, torch_backend)
    return table


# --- issue 23's targets -----------------------------------------------------------------------------------

PER_CALL_OPERATORS = frozenset({GRADIENT, VALUE_AND_GRADIENT, "jacobian", "pushforward", "pullback", "hvp"})


def _worst(rows: Sequence[Row], keep: Callable[[Row], bool]) -> tuple[Row | None, list[Row]]:
    chosen = [r for r in rows if r.ratio is not None and keep(r)]
    worst = max(chosen, key=lambda r: r.ratio or 0.0, default=None)
    return worst, [r for r in chosen if (r.ratio or 0.0) > 1.05]


def _ratio_line(text: str, rows: Sequence[Row], keep: Callable[[Row], bool]) -> str:
    worst, misses = _worst(rows, keep)
    if worst is None:
        return f"- n/a: {text} (not measured)"
    line = (
        f"- {'MISS' if misses else 'PASS'}: {text} <= 1.05; worst {worst.ratio:.3f} ({worst.backend} "
        f"{worst.operator}, {worst.function}, {worst.dtype}, n = {worst.n})"
    )
    if misses:
        line += f"; {len(misses)} rows over: " + ", ".join(
            f"{r.backend} {r.operator} {r.function} {r.dtype} n={r.n}: {r.ratio:.3f}" for r in misses
        )
    return line


def target_lines(
    rows: Sequence[Row], real: Sequence[Row], own_costs: dict[str, tuple[float, float]], compiles: Table | None
) -> list[str]:
    """PASS / MISS against issue 23's targets.

    Args:
        rows: the per-call rows of single arrays (``python -m bench``; empty for ``bench.real``).
        real: the real-input rows.
        own_costs: backend label -> di's own cost per prepared gradient at the smallest n
            and its uncertainty (ns); a cost whose uncertainty is over half its target
            is reported as not resolved rather than as a pass or a miss.
        compiles: the table of :func:`compile_table`.
    """
    lines = [
        _ratio_line(
            "every prepared operator, every backend, array or pytree x, n >= 1e3",
            [*rows, *real],
            # (a pytree of the 1e3 size class holds a little fewer: 960 in 64 leaves, 981 in the MLP)
            lambda r: r.n >= 900 and r.operator in PER_CALL_OPERATORS,
        )
    ]
    for label, (cost, uncertainty) in own_costs.items():
        limit = 1e3 if label == "AutoJAX(jit=True)" else 2e3
        if 2 * uncertainty > limit:  # e.g. a native call that retraces: milliseconds that vary by more than the target
            verdict = "NOT RESOLVED"
            measured = f"{format_ns(cost)}, standard error {format_ns(uncertainty)}: the native call's noise"
        else:
            verdict = "PASS" if cost <= limit else "MISS"
            measured = f"{format_ns(cost)} (standard error {format_ns(uncertainty)})"
        lines.append(
            f"- {verdict}: di's own cost per prepared gradient at the smallest n, {label}: {measured} "
            f"(target {format_ns(limit)}; from the breakdown table: strict di minus native)"
        )
    lines.append(
        _ratio_line(
            "torch dict-parameter gradient (nn.Module via functional_call, AutoTorch(create_graph=False)) "
            "against torch.autograd.grad",
            real,
            lambda r: (
                r.backend == "AutoTorch(create_graph=False)"
                and r.operator == GRADIENT
                and r.function.startswith("nn.Module")
            ),
        )
    )
    lines.append(
        _ratio_line(
            "numpy caller on AutoJAX(jit=True) against np.asarray(jax.jit(jax.grad(f))(x)), n = 10 and 1e3",
            real,
            lambda r: r.backend == "AutoJAX(jit=True)" and r.operator.endswith("numpy caller") and r.n in (10, 1_000),
        )
    )
    if compiles is not None:
        for row in compiles.rows:
            if len(row) != len(compiles.headers) or row[0] == "native":
                continue
            try:
                total = int(row[4]) + int(row[6]) + int(row[7])
            except ValueError:
                continue
            counted = f"{total} compiles ({row[4]} in preparation, {row[6]} in the first call)"
            if "value=True" not in row[1]:  # the default compiles the plain program first, by design
                lines.append(f"- for comparison, {row[0]} with {row[1]} (the plain program first): {counted}")
                continue
            lines.append(
                f"- {'PASS' if total == 1 else 'MISS'}: a value_and_gradient-only loop compiles once, {row[0]} with "
                f"{row[1]}: {counted}"
            )
    return lines


# --- the command line -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from bench.report import machine, render_markdown, render_text, versions

    parser = argparse.ArgumentParser(prog="python -m bench.real", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1e3,1e5", help="comma-separated n (default 10,1e3,1e5)")
    parser.add_argument("--backends", default="jax-jit,jax,torch,torch-compile,autograd")
    parser.add_argument("--repeats", type=int, help="exactly this many pairs of blocks per row (smoke tests)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per comparison (default 1)")
    parser.add_argument("--no-compile", dest="compile", action="store_false", default=True)
    parser.add_argument("--torch-compile-backend", default="inductor", help="what the recording backend wraps")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "real_results.md")
    args = parser.parse_args(argv)
    sizes = [int(float(part)) for part in args.sizes.split(",") if part.strip()]
    modules = {"jax-jit": "jax", "jax": "jax", "torch": "torch", "torch-compile": "torch", "autograd": "autograd"}
    engines = [key for key in args.backends.split(",") if key in modules and _installed(modules[key])]
    if args.repeats is not None:
        settings = Settings(block_ns=2e5, budget_s=0.0, min_pairs=args.repeats, max_pairs=args.repeats)
    else:
        settings = Settings(block_ns=2.5e5, budget_s=args.budget, min_pairs=5, max_pairs=1001)
    if _installed("torch"):
        import torch

        torch.set_num_threads(1)  # as python -m bench does (see bench/run.py)
    print("  ".join(ROW_HEADERS), flush=True)
    rows = real_rows(sizes, engines, args.compile, settings, lambda row: print("  ".join(row.cells()), flush=True))
    tables = [Table("Per call: real inputs", ROW_HEADERS, [row.cells() for row in rows], intro=REAL_INTRO)]
    compiles = compile_table(engines, args.compile, args.torch_compile_backend)
    print(render_text(compiles), flush=True)
    tables.append(compiles)
    command = "python -m bench.real " + " ".join(sys.argv[1:] if argv is None else argv)
    summary = target_lines([], rows, {}, compiles)
    print("\n".join(summary), flush=True)
    args.out.write_text(render_markdown(command.strip(), machine(), versions(), summary, tables))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
