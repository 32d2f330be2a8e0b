"""Unprepared calls and the everyday ML call, against the native call, in one process, interleaved.

``python -m bench.unprepared`` (``--quick`` for a short budget) prints the tables and
writes ``bench/unprepared_results.md``; ``python -m bench`` includes them.

* **Unprepared calls**: ``di.gradient(f, backend, x)``, ``di.hvp(f, backend, x, (v,))`` and
  ``di.jacobian(g, backend, x)`` in a loop (the implicit preparation cache serves every
  call after the first) against the native call a user of each engine writes:
  ``jax.jit(jax.grad(f))``, forward-over-reverse hvp and ``jax.jacrev`` (jitted for
  ``AutoJAX(jit=True)``, not for ``AutoJAX()``); ``torch.autograd.grad`` (hvp by double
  backward, jacobian by ``torch.func.jacrev``); ``autograd.grad``,
  ``autograd.hessian_vector_product`` and ``autograd.jacobian``; ``mx.grad``,
  ``mx.jvp`` of ``mx.grad`` and ``mx.vmap`` over ``mx.vjp`` rows, each result
  evaluated with ``mx.eval`` (under ``mx.compile`` for ``AutoMLX(compile=True)``);
  ``tape.gradient`` of a ``tf.GradientTape``, the faster of forward over reverse (a
  ``tf.autodiff.ForwardAccumulator`` around a tape) and reverse over reverse for the
  hvp (as ``bench/cases_tensorflow.py`` picks it) and ``tape.jacobian`` with ``pfor``
  (each inside ``tf.function(jit_compile=True)`` for ``AutoTensorFlow(compile=True)``;
  eagerly, ``tape.jacobian`` traces a new function at every call, which di's eager
  jacobian of few outputs avoids with one reverse pass per output); for
  ``AutoPyTensor()``, the compiled ``pytensor.function`` of the fastest of
  ``bench/cases_pytensor.py``'s spellings (``grad``; ``hessian_vector_product`` or
  the gradient's pushforward or pullback; ``jacobian`` vectorised or by scan). Finite differences have
  no native call: their row compares the unprepared call with the prepared one. The
  last column is one unprepared call with the cache off (``di.caching(False)``): what
  every unprepared call cost before the cache.
* **The everyday ML call**: ``value_and_gradient(loss, ..., has_aux=True)`` of a 7-leaf
  parameter dict with an ``(X, y)`` batch as one ``Constant``, on ``AutoJAX(jit=True)`` and
  ``AutoTorch()``: prepared (strict, ``strict=False``) and unprepared, against
  ``jax.jit(jax.value_and_grad(loss, has_aux=True))`` and torch's
  ``torch.autograd.grad`` on ``requires_grad_()`` leaves. ``di``'s added time is the
  median of the per-pair differences.

Targets (issue 36): unprepared within 1.3x of native at n = 10 and 1.05x at n = 1e3;
the ML call at most 3 us added.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import di
from bench.cases import GRADIENT, HVP, JACOBIAN
from bench.report import Table, about_line, format_ns, format_ratio
from bench.timing import Settings, Timing, compare

__all__ = ["main", "ml_call_table", "tables", "unprepared_table"]

SIZES = (10, 1_000)
OUTPUT = Path(__file__).resolve().parent / "unprepared_results.md"

Thunk = Callable[[], Any]


def scalar_f(x: Any) -> Any:
    """``sum(sin(x) * x)``."""
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x)


def vector_g(x: Any) -> Any:
    """``sin(x) * x``, elementwise."""
    xp = di.array_namespace(x)
    return xp.sin(x) * x


# --- the native calls -------------------------------------------------------------------


def _jax_natives(jit: bool, x_np: np.ndarray) -> tuple[Any, dict[str, Thunk], bool]:
    import jax

    x, v = jax.device_put(x_np), jax.device_put(np.ones_like(x_np))
    wrap = jax.jit if jit else (lambda fn: fn)
    grad = wrap(jax.grad(scalar_f))
    hvp = wrap(lambda x, v: jax.jvp(jax.grad(scalar_f), (x,), (v,))[1])
    jacobian = wrap(jax.jacrev(vector_g))
    natives = {
        "gradient": lambda: grad(x).block_until_ready(),
        "hvp": lambda: hvp(x, v).block_until_ready(),
        "jacobian": lambda: jacobian(x).block_until_ready(),
    }
    return (x, v), natives, True


def _torch_natives(x_np: np.ndarray) -> tuple[Any, dict[str, Thunk], bool]:
    import torch

    x, v = torch.from_numpy(x_np), torch.ones(len(x_np), dtype=torch.float64)
    jacrev = torch.func.jacrev(vector_g)

    def grad() -> Any:
        leaf = x.detach().requires_grad_()
        return torch.autograd.grad(scalar_f(leaf), leaf)[0]

    def hvp() -> Any:  # double backward
        leaf = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(scalar_f(leaf), leaf, create_graph=True)
        return torch.autograd.grad(g @ v, leaf)[0]

    return (x, v), {"gradient": grad, "hvp": hvp, "jacobian": lambda: jacrev(x)}, False


def _autograd_natives(x_np: np.ndarray) -> tuple[Any, dict[str, Thunk], bool]:
    import autograd

    v = np.ones_like(x_np)
    grad = autograd.grad(scalar_f)
    hvp = autograd.hessian_vector_product(scalar_f)
    jacobian = autograd.jacobian(vector_g)
    natives = {"gradient": lambda: grad(x_np), "hvp": lambda: hvp(x_np, v), "jacobian": lambda: jacobian(x_np)}
    return (x_np, v), natives, False


def _mlx_natives(compiled: bool, x_np: np.ndarray) -> tuple[Any, dict[str, Thunk], bool]:
    import mlx.core as mx

    from bench.cases_mlx import _spellings

    x = mx.array(x_np, dtype=mx.float64)
    v = mx.ones_like(x)
    spellings = _spellings(scalar_f, vector_g, x, v, compiled)  # each thunk evaluates its result
    natives = {
        "gradient": spellings[GRADIENT]["mx.grad"],
        "hvp": spellings[HVP]["mx.jvp(mx.grad)"],
        "jacobian": spellings[JACOBIAN]["mx.vmap(mx.vjp)"],
    }
    return (x, v), natives, False


def _tensorflow_natives(compiled: bool, x_np: np.ndarray) -> tuple[Any, dict[str, Thunk], bool]:
    import tensorflow as tf

    from bench.cases_tensorflow import _fastest, tape_spellings

    x, v = tf.constant(x_np), tf.ones(len(x_np), dtype=tf.float64)
    # autograph off: f has no Python control flow on tensors, and autograph would try (and
    # fail, with a warning) to convert di.array_namespace's own code; it acts at trace time only
    wrap = (lambda fn: tf.function(fn, jit_compile=True, autograph=False)) if compiled else (lambda fn: fn)
    spelled = {name: wrap(function) for name, function in tape_spellings(scalar_f, vector_g).items()}
    forward_over_reverse, reverse_over_reverse = spelled["forward_over_reverse"], spelled["reverse_over_reverse"]
    hvp = _fastest(
        {
            "forward over reverse": lambda: forward_over_reverse(x, v),
            "reverse over reverse": lambda: reverse_over_reverse(x, v),
        }
    )
    natives = {"gradient": lambda: spelled["gradient"](x), "hvp": hvp, "jacobian": lambda: spelled["jacobian"](x)}
    return (x, v), natives, False


def _pytensor_natives(x_np: np.ndarray) -> tuple[Any, dict[str, Thunk], bool]:
    from bench.cases_pytensor import _natives

    v = np.ones_like(x_np)
    natives = _natives(scalar_f, vector_g, x_np, v, (GRADIENT, HVP, JACOBIAN))
    return (x_np, v), {"gradient": natives[GRADIENT], "hvp": natives[HVP], "jacobian": natives[JACOBIAN]}, False


def _finitediff_natives(x_np: np.ndarray) -> tuple[Any, dict[str, Thunk], bool]:
    backend, v = di.AutoFiniteDiff(), np.ones_like(x_np)
    gradient_prep = di.prepare_gradient(scalar_f, backend, x_np)
    hvp_prep = di.prepare_hvp(scalar_f, backend, x_np, (v,))
    jacobian_prep = di.prepare_jacobian(vector_g, backend, x_np)
    natives = {
        "gradient": lambda: di.gradient(scalar_f, gradient_prep, backend, x_np),
        "hvp": lambda: di.hvp(scalar_f, hvp_prep, backend, x_np, (v,)),
        "jacobian": lambda: di.jacobian(vector_g, jacobian_prep, backend, x_np),
    }
    return (x_np, v), natives, False


def _engines() -> Iterator[tuple[str, Callable[[], Any], str, Callable[[np.ndarray], Any]]]:
    """``(label, selector factory, native description, natives maker)`` of each installed engine."""
    import importlib.util

    if importlib.util.find_spec("jax"):
        yield "AutoJAX(jit=True)", lambda: di.AutoJAX(jit=True), "jax.jit(...)", lambda x: _jax_natives(True, x)
        yield "AutoJAX()", lambda: di.AutoJAX(), "jax (eager)", lambda x: _jax_natives(False, x)
    if importlib.util.find_spec("torch"):
        yield "AutoTorch()", lambda: di.AutoTorch(), "torch.autograd", _torch_natives
    if importlib.util.find_spec("autograd"):
        yield "AutoAutograd()", lambda: di.AutoAutograd(), "autograd", _autograd_natives
    if importlib.util.find_spec("mlx"):
        yield "AutoMLX()", lambda: di.AutoMLX(), "mlx (eager)", lambda x: _mlx_natives(False, x)
        yield (
            "AutoMLX(compile=True)",
            lambda: di.AutoMLX(compile=True),
            "mx.compile(...)",
            lambda x: _mlx_natives(True, x),
        )
    if importlib.util.find_spec("tensorflow"):
        yield "AutoTensorFlow()", lambda: di.AutoTensorFlow(), "tf (eager)", lambda x: _tensorflow_natives(False, x)
        yield (
            "AutoTensorFlow(compile=True)",
            lambda: di.AutoTensorFlow(compile=True),
            "tf.function(jit_compile=True)",
            lambda x: _tensorflow_natives(True, x),
        )
    if importlib.util.find_spec("pytensor"):
        yield "AutoPyTensor()", lambda: di.AutoPyTensor(), "pytensor.function", _pytensor_natives
    yield "AutoFiniteDiff()", lambda: di.AutoFiniteDiff(), "di, prepared", _finitediff_natives


def _unprepared_thunks(backend: Any, x: Any, v: Any, waits: bool) -> dict[str, Thunk]:
    """The unprepared calls, spelled as the native ones are: no wrapper frame around the
    call, JAX's results waited for with the array's own ``block_until_ready()`` (the
    function ``jax.block_until_ready`` walks a tree: about 1 us more, which the
    native calls do not pay), the tangents' tuple built once."""
    gradient, hvp, jacobian, tangents = di.gradient, di.hvp, di.jacobian, (v,)
    if waits:
        return {
            "gradient": lambda: gradient(scalar_f, backend, x).block_until_ready(),
            "hvp": lambda: hvp(scalar_f, backend, x, tangents)[0].block_until_ready(),
            "jacobian": lambda: jacobian(vector_g, backend, x).block_until_ready(),
        }
    return {
        "gradient": lambda: gradient(scalar_f, backend, x),
        "hvp": lambda: hvp(scalar_f, backend, x, tangents),
        "jacobian": lambda: jacobian(vector_g, backend, x),
    }


def _cache_off_ns(thunk: Thunk, repeats: int = 3) -> float:
    """The median time of one call of ``thunk`` with the preparation cache off."""
    times = []
    with di.caching(False):
        for _ in range(repeats):
            start = time.perf_counter_ns()
            thunk()
            times.append(time.perf_counter_ns() - start)
    return statistics.median(times)


def unprepared_table(settings: Settings, sizes: tuple[int, ...] = SIZES, cache_off: bool = True) -> Table:
    """The unprepared call of each operator on each engine against its native call
    (and, with ``cache_off``, one call with the cache off at the first size)."""
    table = Table(
        "Unprepared calls",
        ["backend", "operator", "n", "native", "di unprepared", "di / native (q1-q3)", "di added", "cache off"],
        intro=(
            "`di.gradient(f, backend, x)` (and `di.hvp`, `di.jacobian`) called in a loop, float64 on every "
            "engine but JAX (float32 there, whose x64 mode is off here: both sides alike), against the "
            "native call (see `bench/unprepared.py`; for finite differences, against di's prepared call). "
            "'di added' is the median per-pair difference; 'cache off' is one unprepared call under "
            "`di.caching(False)`, which prepares afresh as every unprepared call did before the cache. "
            "Targets: 1.3x at n = 10, 1.05x at n = 1e3."
        ),
    )
    for label, make, _, natives_of in _engines():
        backend = make()
        for n in sizes:
            x_np = np.linspace(0.5, 1.5, n)
            (x, v), natives, waits = natives_of(x_np)
            for operator, through_di in _unprepared_thunks(backend, x, v, waits).items():
                if operator == "jacobian" and n > 1_000:
                    continue
                timing = compare(natives[operator], through_di, settings)
                off = _cache_off_ns(through_di) if cache_off and n == sizes[0] else None
                table.rows.append([*_row(label, operator, n, timing), format_ns(off) if off else ""])
    return table


def _row(label: str, operator: str, n: int, timing: Timing) -> list[str]:
    spread = f"{format_ratio(timing.ratio)} ({timing.ratio_q1:.3f}-{timing.ratio_q3:.3f})"
    added = f"{timing.diff_ns / 1e3:+.2f} us"
    return [f"`{label}`", operator, str(n), format_ns(timing.a_ns), format_ns(timing.b_ns), spread, added]


# --- the everyday ML call ---------------------------------------------------------------


LEAVES = ("w1", "b1", "w2", "b2", "w3", "b3", "scale")
INPUTS, WIDTH, BATCH = 8, 16, 32


def ml_numpy() -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """A 7-leaf MLP parameter dict, a batch ``X`` and targets ``y`` (float32)."""
    rng = np.random.default_rng(0)
    shapes = {
        "w1": (INPUTS, WIDTH),
        "b1": (WIDTH,),
        "w2": (WIDTH, WIDTH),
        "b2": (WIDTH,),
        "w3": (WIDTH, 1),
        "b3": (1,),
        "scale": (),
    }
    params = {name: np.asarray(rng.normal(size=shape) / 4, dtype=np.float32) for name, shape in shapes.items()}
    X = rng.normal(size=(BATCH, INPUTS)).astype(np.float32)
    y = np.sin(X.sum(axis=1, keepdims=True)).astype(np.float32)
    return params, X, y


def ml_loss(params: Any, batch: Any) -> Any:
    """Mean squared error of a tanh MLP, with the predictions' mean as ``aux``."""
    X, y = batch
    xp = di.array_namespace(X)
    hidden = xp.tanh(X @ params["w1"] + params["b1"])
    hidden = xp.tanh(hidden @ params["w2"] + params["b2"])
    prediction = params["scale"] * (hidden @ params["w3"] + params["b3"])
    return xp.mean((prediction - y) ** 2), {"prediction_mean": xp.mean(prediction)}


def _ml_jax() -> tuple[str, Any, Any, Any, Thunk]:
    import jax

    params_np, X, y = ml_numpy()
    params = {name: jax.device_put(value) for name, value in params_np.items()}
    batch = (jax.device_put(X), jax.device_put(y))
    native = jax.jit(jax.value_and_grad(ml_loss, has_aux=True))
    backend = di.AutoJAX(jit=True)
    return "AutoJAX(jit=True)", backend, params, batch, lambda: jax.block_until_ready(native(params, batch))


def _ml_torch() -> tuple[str, Any, Any, Any, Thunk]:
    import torch

    params_np, X, y = ml_numpy()
    params = {name: torch.from_numpy(value) for name, value in params_np.items()}
    batch = (torch.from_numpy(X), torch.from_numpy(y))
    names = tuple(params)

    def native() -> Any:
        leaves = {name: value.detach().requires_grad_() for name, value in params.items()}
        (value, aux) = ml_loss(leaves, batch)
        grads = torch.autograd.grad(value, tuple(leaves.values()))
        return (value.detach(), {key: item.detach() for key, item in aux.items()}), dict(zip(names, grads))

    return "AutoTorch()", di.AutoTorch(), params, batch, native


def ml_call_table(settings: Settings) -> Table:
    """The everyday ML call through ``di`` (prepared strict and not, unprepared) against native."""
    table = Table(
        "The everyday ML call: value_and_gradient, has_aux, 7-leaf dict, (X, y) Constant",
        ["backend", "di call", "native", "di", "di / native (q1-q3)", "di added"],
        intro=(
            "`di.value_and_gradient(loss, [prep,] backend, params, di.Constant((X, y)), has_aux=True)` with a "
            f"7-leaf float32 parameter dict (a {INPUTS}-{WIDTH}-{WIDTH}-1 tanh MLP and a scale), a batch of {BATCH}, "
            "against `jax.jit(jax.value_and_grad(loss, has_aux=True))` and, for torch, `torch.autograd.grad` on "
            "`requires_grad_()` copies of the leaves (aux detached). Target: at most 3 us added."
        ),
    )
    import importlib.util

    makers = [maker for maker, module in ((_ml_jax, "jax"), (_ml_torch, "torch")) if importlib.util.find_spec(module)]
    for maker in makers:
        label, backend, params, batch, native = maker()
        for name, through_di in _ml_calls(label, backend, params, batch).items():
            timing = compare(native, through_di, settings)
            row = _row(label, name, 0, timing)
            table.rows.append([row[0], name, *row[3:]])
    return table


def _ml_calls(label: str, backend: Any, params: Any, batch: Any) -> dict[str, Thunk]:
    """The ML call through ``di``: prepared strict and not, and unprepared (JAX's results
    waited for as the native call's are; nothing around torch's, as around the native call)."""
    context = di.Constant(batch)
    strict = di.prepare_gradient(ml_loss, backend, params, context, has_aux=True)
    loose = di.prepare_gradient(ml_loss, backend, params, context, has_aux=True, strict=False)
    value_and_gradient = di.value_and_gradient
    if label.startswith("AutoJAX"):
        import jax

        block = jax.block_until_ready
        return {
            "prepared": lambda: block(value_and_gradient(ml_loss, strict, backend, params, context, has_aux=True)),
            "prepared, strict=False": lambda: block(
                value_and_gradient(ml_loss, loose, backend, params, context, has_aux=True)
            ),
            "unprepared": lambda: block(value_and_gradient(ml_loss, backend, params, context, has_aux=True)),
        }
    return {
        "prepared": lambda: value_and_gradient(ml_loss, strict, backend, params, context, has_aux=True),
        "prepared, strict=False": lambda: value_and_gradient(ml_loss, loose, backend, params, context, has_aux=True),
        "unprepared": lambda: value_and_gradient(ml_loss, backend, params, context, has_aux=True),
    }


def tables(settings: Settings, smoke: bool = False) -> list[Table]:
    """Both tables (for ``python -m bench``; ``smoke``: n = 10 only, no call with the cache off)."""
    sizes = SIZES[:1] if smoke else SIZES
    return [unprepared_table(settings, sizes, cache_off=not smoke), ml_call_table(settings)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short budget per comparison")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    # (up to 1,001 pairs, as python -m bench's side measurements: at 201 the median of a 0.6 ms eager
    # call's pairs moved by about 1 % from run to run, the size of the n = 1e3 target's margin)
    settings = Settings(budget_s=0.3) if args.quick else Settings(budget_s=2.0, min_pairs=9, max_pairs=1001)
    load = os.getloadavg()[0]
    found = tables(settings)
    from bench.report import _markdown_table

    lines = [
        "# Unprepared calls and the everyday ML call",
        "",
        about_line(),
        "",
        "Generated by `python -m bench.unprepared`; torch on 1 intra-op thread. Ratios are medians of "
        "interleaved pairs of blocks (bench/timing.py). Load average (1 min) at start / end: "
        f"{load:.2f} / {os.getloadavg()[0]:.2f}.",
    ]
    for table in found:
        lines += ["", f"## {table.title}", "", table.intro, "", *_markdown_table(table.headers, table.rows)]
        print("\n".join(["", f"== {table.title} ==", *_markdown_table(table.headers, table.rows)]), flush=True)
    args.output.write_text("\n".join(lines) + "\n")
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
