"""Auxiliary outputs: prepared ``value_and_gradient(has_aux=True)`` against the native
``has_aux`` call a JAX or torch user writes, in one process, interleaved.

``python -m bench.aux`` (``--quick`` for a short budget) prints the table and writes
``bench/aux_results.md``. Native references:

* ``AutoJAX(jit=True)``: ``jax.jit(jax.value_and_grad(f, has_aux=True))``;
* ``AutoTorch()``: ``torch.autograd.grad`` on a detached ``requires_grad_()`` copy, with
  ``aux``'s tensors detached (what a careful torch user writes);
* ``AutoTorch(compile=True)`` (``--compile``): ``torch.compile`` of
  ``torch.func.grad_and_value(f, has_aux=True)``.

``f`` is ``sum(sin(x)^2)`` with ``aux = {"norm": sum(x*x), "mean": mean(x)}`` (arrays only:
``jax.jit`` refuses a string in a native output, which ``di`` returns), float64 and
float32, n = 10 and 1e5. Targets (issue 14, as for the plain gradient): within 1.10x at
small n (1.15x on JAX-jit at n = 10) and 1.03x at n >= 1e5.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import di
from bench.report import about_line, render_backend_dtype_rows
from bench.timing import Settings, compare

__all__ = ["aux_rows", "main"]

SIZES = (10, 100_000)
DTYPES = ("float64", "float32")
OUTPUT = Path(__file__).resolve().parent / "aux_results.md"

Pair = tuple[str, Callable[[], Any], Callable[[], Any]]


def _jax_pair(n: int, dtype: str) -> Pair:
    import jax
    import jax.numpy as jnp

    def f(x: Any) -> Any:
        return jnp.sum(jnp.sin(x) ** 2), {"norm": jnp.sum(x * x), "mean": jnp.mean(x)}

    x = jax.device_put(np.random.default_rng(0).standard_normal(n).astype(dtype))
    native = jax.jit(jax.value_and_grad(f, has_aux=True))
    backend = di.AutoJAX(jit=True)
    prep = di.prepare_gradient(f, backend, x, has_aux=True)
    value_and_gradient = di.value_and_gradient

    def run_native() -> Any:
        _, g = native(x)
        return g.block_until_ready()

    def run_di() -> Any:
        _, g = value_and_gradient(f, prep, backend, x, has_aux=True)
        return g.block_until_ready()

    return "AutoJAX(jit=True)", run_native, run_di


def _torch_f(x: Any) -> Any:
    import torch

    return torch.sum(torch.sin(x) ** 2), {"norm": torch.sum(x * x), "mean": torch.mean(x)}


def _torch_pair(n: int, dtype: str) -> Pair:
    import torch

    x = torch.from_numpy(np.random.default_rng(0).standard_normal(n).astype(dtype))
    backend = di.AutoTorch()
    prep = di.prepare_gradient(_torch_f, backend, x, has_aux=True)
    value_and_gradient = di.value_and_gradient

    def run_native() -> Any:
        leaf = x.detach().requires_grad_()
        y, aux = _torch_f(leaf)
        (g,) = torch.autograd.grad(y, leaf)
        return y.detach(), {key: v.detach() if isinstance(v, torch.Tensor) else v for key, v in aux.items()}, g

    def run_di() -> Any:
        return value_and_gradient(_torch_f, prep, backend, x, has_aux=True)

    return "AutoTorch()", run_native, run_di


def _torch_compile_pair(n: int, dtype: str) -> Pair:
    import torch

    x = torch.from_numpy(np.random.default_rng(0).standard_normal(n).astype(dtype))
    native = torch.compile(torch.func.grad_and_value(_torch_f, has_aux=True), fullgraph=True)
    backend = di.AutoTorch(compile=True)
    prep = di.prepare_gradient(_torch_f, backend, x, has_aux=True)
    value_and_gradient = di.value_and_gradient

    def run_native() -> Any:
        return native(x)

    def run_di() -> Any:
        return value_and_gradient(_torch_f, prep, backend, x, has_aux=True)

    return "AutoTorch(compile=True)", run_native, run_di


def aux_rows(settings: Settings, include_compile: bool = False) -> list[dict[str, Any]]:
    """One row per backend, dtype and size: native and ``di`` per-call times and their ratio."""
    makers: list[Callable[[int, str], Pair]] = [_jax_pair, _torch_pair]
    if include_compile:
        makers.append(_torch_compile_pair)
    rows = []
    for make in makers:
        for dtype in DTYPES:
            for n in SIZES:
                name, native, through_di = make(n, dtype)
                timing = compare(native, through_di, settings)
                rows.append({"backend": name, "dtype": dtype, "n": n, "timing": timing})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.aux", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short budget per row")
    parser.add_argument("--compile", action="store_true", help="add AutoTorch(compile=True) (compiles ~20 s)")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the markdown report")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    settings = Settings(budget_s=0.5) if args.quick else Settings(budget_s=3.0)
    table = render_backend_dtype_rows(aux_rows(settings, args.compile))
    print(table)
    about = about_line()
    report = (
        "# Auxiliary outputs: prepared value_and_gradient(has_aux=True) against the native has_aux call\n\n"
        f"{about}\n\nGenerated by `python -m bench.aux`; torch on 1 intra-op thread. "
        "Ratios are medians of interleaved pairs of blocks.\n\n" + table + "\n"
    )
    args.output.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
