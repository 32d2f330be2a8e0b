"""Mixing engines: ``di.DifferentiateWith`` against hand-made bridges and the native gradient.

Run ``python -m bench.mixing [--sizes 10,1000,100000] [--runs 5] [--out bench/mixing_results.md]``
(needs the bench extra for ``wrap-torch2jax``: ``pip install 'differentiation-interface[bench]'``).

Two directions, on an MLP loss of ``n`` parameters (one flat vector: a hidden layer
as wide as ``n`` allows, the rest weight-decayed), float32, CPU:

* a torch loss inside ``jax.jit(jax.grad(...))``: through ``DifferentiateWith(loss,
  AutoTorch())``, through ``wrap-torch2jax`` (``torch2jax(..., depth=1)``), and the
  native torch gradient (``torch.autograd.grad``, what the inner engine costs alone);
* a JAX loss inside torch's ``torch.autograd.grad``: through ``DifferentiateWith(loss,
  AutoJAX(jit=True))``, through a hand-written bridge in the style of ``jax2torch``
  (a ``torch.autograd.Function`` calling a jitted ``jax.vjp`` forward and its
  ``vjp`` backward, DLPack both ways), and the native JAX gradient (``jax.jit(jax.grad)``).

Each comparison is timed interleaved (:mod:`bench.timing`: blocks of calls, A B / B A)
``--runs`` times; the report gives the median per-call times and the median and
range (min to max over the runs) of each ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import di
from bench.timing import Settings, compare

INPUTS, BATCH = 4, 64


def hidden_width(n: int) -> int:
    """The width of the hidden layer an ``n``-parameter MLP gets (``n`` at least ``INPUTS + 3``)."""
    return max(1, (n - 1) // (INPUTS + 2))


def mlp_loss(n: int) -> Callable[..., Any]:
    """The mean squared error of a one-hidden-layer tanh MLP whose ``n`` parameters are
    one flat vector, plus weight decay on the parameters the layer does not use."""
    width = hidden_width(n)
    used = width * (INPUTS + 2) + 1

    def loss(theta: Any, inputs: Any, targets: Any) -> Any:
        xp = di.array_namespace(theta)
        w1 = xp.reshape(theta[: INPUTS * width], (INPUTS, width))
        b1 = theta[INPUTS * width : INPUTS * width + width]
        w2 = theta[INPUTS * width + width : used - 1]
        hidden = xp.tanh(inputs @ w1 + b1)
        prediction = hidden @ w2 + theta[used - 1]
        return xp.mean((prediction - targets) ** 2) + 1e-3 * xp.sum(theta[used:] ** 2)

    loss.__name__ = f"mlp_loss_{n}"
    return loss


def _data(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    theta = (rng.normal(size=n) * 0.3).astype(np.float32)
    inputs = rng.normal(size=(BATCH, INPUTS)).astype(np.float32)
    targets = np.sin(inputs.sum(axis=1)).astype(np.float32)
    return theta, inputs, targets


def _repeated(a: Callable[[], Any], b: Callable[[], Any], runs: int, settings: Settings) -> dict[str, Any]:
    """``b`` against ``a``, ``runs`` times: median times, median and range of ``b / a``."""
    timings = [compare(a, b, settings) for _ in range(runs)]
    ratios = [t.ratio for t in timings]
    return {
        "a": statistics.median(t.a_ns for t in timings),
        "b": statistics.median(t.b_ns for t in timings),
        "ratio": statistics.median(ratios),
        "low": min(ratios),
        "high": max(ratios),
        "diff": statistics.median(t.diff_ns for t in timings),
        "diff_low": min(t.diff_ns for t in timings),
        "diff_high": max(t.diff_ns for t in timings),
    }


# --- torch inside JAX ----------------------------------------------------------------------------


def torch_in_jax(n: int, runs: int, settings: Settings, wrap: bool = True) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import torch

    loss = mlp_loss(n)
    theta, inputs, targets = _data(n)
    theta_t, inputs_t, targets_t = (torch.from_numpy(a) for a in (theta, inputs, targets))
    theta_j = jnp.asarray(theta)

    g = di.DifferentiateWith(loss, di.AutoTorch(), di.Constant(inputs_t), di.Constant(targets_t))
    through_di = jax.jit(jax.grad(g))

    def native() -> Any:
        leaf = theta_t.detach().requires_grad_()
        return torch.autograd.grad(loss(leaf, inputs_t, targets_t), leaf)[0]

    expected = native().numpy()
    np.testing.assert_allclose(np.asarray(through_di(theta_j)), expected, rtol=2e-4, atol=1e-6)
    di_call = lambda: through_di(theta_j).block_until_ready()
    row = {"n": n, "native": _repeated(native, di_call, runs, settings), "wrap": None}
    if wrap:
        from wrap_torch2jax import torch2jax

        wrapped = torch2jax(loss, theta_t, inputs_t, targets_t, depth=1, nondiff_argnums=(1, 2))
        inputs_j, targets_j = jnp.asarray(inputs), jnp.asarray(targets)
        through_wrap = jax.jit(jax.grad(lambda t: wrapped(t, inputs_j, targets_j)))
        np.testing.assert_allclose(np.asarray(through_wrap(theta_j)), expected, rtol=2e-4, atol=1e-6)
        row["wrap"] = _repeated(lambda: through_wrap(theta_j).block_until_ready(), di_call, runs, settings)
    return row


# --- JAX inside torch ---------------------------------------------------------------------------


def _bridge(f: Callable[..., Any]) -> Callable[[Any], Any]:
    """A hand-written jax2torch-style bridge: one tensor in, one out; the forward runs a
    jitted ``jax.vjp`` and keeps its ``vjp`` for the backward; DLPack both ways."""
    import jax
    import torch

    forward = jax.jit(lambda x: jax.vjp(f, x))
    backward = jax.jit(lambda vjp, cotangent: vjp(cotangent)[0])

    class Bridge(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            y, vjp = forward(jax.dlpack.from_dlpack(x.detach()))
            ctx.vjp = vjp
            return torch.from_dlpack(y)

        @staticmethod
        def backward(ctx: Any, cotangent: Any) -> Any:
            return torch.from_dlpack(backward(ctx.vjp, jax.dlpack.from_dlpack(cotangent.contiguous())))

    return Bridge.apply


def jax_in_torch(n: int, runs: int, settings: Settings) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import torch

    loss = mlp_loss(n)
    theta, inputs, targets = _data(n)
    inputs_j, targets_j = jnp.asarray(inputs), jnp.asarray(targets)
    theta_t = torch.from_numpy(theta)

    g = di.DifferentiateWith(loss, di.AutoJAX(jit=True), di.Constant(inputs_j), di.Constant(targets_j))
    bridged = _bridge(lambda t: loss(t, inputs_j, targets_j))
    native_grad = jax.jit(jax.grad(loss))
    theta_j = jnp.asarray(theta)

    def through(function: Callable[[Any], Any]) -> Callable[[], Any]:
        def call() -> Any:
            leaf = theta_t.detach().requires_grad_()
            return torch.autograd.grad(function(leaf), leaf)[0]

        return call

    expected = np.asarray(native_grad(theta_j, inputs_j, targets_j))
    for call in (through(g), through(bridged)):
        np.testing.assert_allclose(call().numpy(), expected, rtol=2e-4, atol=1e-6)
    native = lambda: native_grad(theta_j, inputs_j, targets_j).block_until_ready()
    return {
        "n": n,
        "native": _repeated(native, through(g), runs, settings),
        "bridge": _repeated(through(bridged), through(g), runs, settings),
    }


# --- the report ---------------------------------------------------------------------------------


def _time(ns: float) -> str:
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} us"
    return f"{ns / 1e6:.2f} ms"


def _ratio(row: dict[str, Any]) -> str:
    return f"{row['ratio']:.2f} ({row['low']:.2f} to {row['high']:.2f})"


def _markdown(
    torch_rows: list[dict[str, Any]], jax_rows: list[dict[str, Any]], runs: int, load: tuple[float, float] | None = None
) -> str:
    loads = "" if load is None else f" Load average (1 min) at start / end: {load[0]:.2f} / {load[1]:.2f}."
    lines = [
        "# Mixing engines: benchmark",
        "",
        f"Written by `python -m bench.mixing` (float32, CPU, one torch thread, results ready; {runs} interleaved "
        "runs per comparison: times are medians, ratios `median (min to max)` over the runs). The loss is a "
        f"one-hidden-layer tanh MLP on a batch of {BATCH} inputs of size {INPUTS}, its `n` parameters one flat "
        f"vector.{loads}",
        "",
        "## A torch loss inside `jax.jit(jax.grad(...))`",
        "",
        "| n | DifferentiateWith(AutoTorch()) | wrap-torch2jax | native torch gradient | "
        "di / wrap-torch2jax | di / native |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in torch_rows:
        native, wrap = row["native"], row["wrap"]
        wrap_time, wrap_ratio = ("-", "-") if wrap is None else (_time(wrap["a"]), _ratio(wrap))
        lines.append(
            f"| {row['n']} | {_time(native['b'])} | {wrap_time} | {_time(native['a'])} | {wrap_ratio} | "
            f"{_ratio(native)} |"
        )
    lines += [
        "",
        "## A JAX loss inside torch (`torch.autograd.grad`)",
        "",
        "| n | DifferentiateWith(AutoJAX(jit=True)) | jax2torch-style bridge | native `jax.jit(jax.grad)` | "
        "di / bridge | di / native |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in jax_rows:
        native, bridge = row["native"], row["bridge"]
        lines.append(
            f"| {row['n']} | {_time(native['b'])} | {_time(bridge['a'])} | {_time(native['a'])} | "
            f"{_ratio(bridge)} | {_ratio(native)} |"
        )
    lines += ["", "## Targets", ""]
    if torch_rows:
        largest, smallest = torch_rows[-1], torch_rows[0]
        wrap_ratio = "not measured" if largest["wrap"] is None else _ratio(largest["wrap"])
        lines.append(
            f"- torch inside JAX, n = {largest['n']}: di / wrap-torch2jax = {wrap_ratio} (target <= 1.2); "
            f"di / native torch gradient = {_ratio(largest['native'])} (target <= 1.5)."
        )
        native = smallest["native"]
        lines.append(
            f"- callback overhead per call at n = {smallest['n']} (di minus the native torch gradient): "
            f"{_time(native['diff'])} ({_time(native['diff_low'])} to {_time(native['diff_high'])})."
        )
    if jax_rows:
        smallest = jax_rows[0]
        lines.append(
            f"- JAX inside torch, n = {smallest['n']}: di minus the jax2torch-style bridge = "
            f"{_time(smallest['bridge']['diff'])} per call."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run the mixing benchmark and write its Markdown report."""
    parser = argparse.ArgumentParser(prog="python -m bench.mixing", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,100000", help="comma-separated n (default: 10,1000,100000)")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs per comparison (default: 5)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per run of a comparison (default: 1)")
    parser.add_argument("--out", default="bench/mixing_results.md", help="the Markdown report to write")
    parser.add_argument("--skip-wrap", action="store_true", help="leave wrap-torch2jax out (its extension builds)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    settings = Settings(budget_s=args.budget)
    torch_rows, jax_rows = [], []
    start_load = os.getloadavg()[0]
    for n in sizes:
        torch_rows.append(torch_in_jax(n, args.runs, settings, wrap=not args.skip_wrap))
        jax_rows.append(jax_in_torch(n, args.runs, settings))
        print(f"n={n} done", flush=True)
    report = _markdown(torch_rows, jax_rows, args.runs, (start_load, os.getloadavg()[0]))
    Path(args.out).write_text(report)
    print(report)


if __name__ == "__main__":
    main()
