"""``di`` inside the engines' transforms, against the native composition (issue 20).

``python -m bench.transforms`` (``--quick`` for a short budget) prints the table and
writes ``bench/transforms_results.md``. Each row times, in one process and
interleaved (``bench.timing.compare``), the native code and the same code calling
a prepared ``di`` operator, and repeats the comparison ``--runs`` times: the
machine is shared and noisy, so the report quotes the median ratio of the runs
and their range.

* ``jax.jit`` of a 50-step gradient-descent loop (``lax.fori_loop``) calling a
  prepared ``di.value_and_gradient`` on ``AutoJAX(jit=True)`` (and ``AutoJAX()``),
  against the same loop with ``jax.value_and_grad``: one compiled program either
  way (the jit cache holds one entry after the runs). Target: within 1.05x.
* ``torch.func.vmap`` over a prepared ``di.gradient`` on ``AutoTorch()``, against
  ``torch.func.vmap(torch.func.grad(f))``. Target: within 1.10x.
* ``torch.compile(..., fullgraph=True)`` of a step calling a prepared ``di.gradient``
  on ``AutoTorch()``, against ``torch.compile(torch.func.grad(f), fullgraph=True)``
  (inductor; each compiled from a reset dynamo cache). Target: within 1.10x.

``f`` is the Rosenbrock function, float32, n = 10 and 1000 (a batch of 64 for vmap).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import di
from bench.report import about_line, format_ns, format_ratio
from bench.timing import Settings, Timing, compare

__all__ = ["main", "transform_rows"]

SIZES = (10, 1000)
STEPS = 50
BATCH = 64
OUTPUT = Path(__file__).resolve().parent / "transforms_results.md"
TARGETS = {"jax.jit loop": 1.05, "torch.func.vmap": 1.10, "torch.compile": 1.10}

Case = tuple[str, str, Callable[[], Any], Callable[[], Any], Callable[[], str]]


def rosenbrock(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def _point(n: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1.0, 1.0, n).astype(np.float32)


def _jax_loop(backend: Any, n: int) -> Case:
    import jax
    import jax.numpy as jnp

    x0 = jnp.asarray(_point(n))
    prep = di.prepare_gradient(rosenbrock, backend, x0)
    value_and_gradient = di.value_and_gradient

    def native_step(i: Any, x: Any) -> Any:
        _, g = jax.value_and_grad(rosenbrock)(x)
        return x - 1e-4 * g

    def di_step(i: Any, x: Any) -> Any:
        _, g = value_and_gradient(rosenbrock, prep, backend, x)
        return x - 1e-4 * g

    native = jax.jit(lambda x: jax.lax.fori_loop(0, STEPS, native_step, x))
    through_di = jax.jit(lambda x: jax.lax.fori_loop(0, STEPS, di_step, x))
    np.testing.assert_allclose(np.asarray(through_di(x0)), np.asarray(native(x0)), rtol=1e-5, atol=1e-6)

    def programs() -> str:
        return f"{native._cache_size()} / {through_di._cache_size()}"

    return (
        "jax.jit loop",
        f"{backend!r}",
        lambda: native(x0).block_until_ready(),
        lambda: through_di(x0).block_until_ready(),
        programs,
    )


def _torch_vmap(n: int) -> Case:
    import torch

    backend = di.AutoTorch()
    batch = torch.from_numpy(np.stack([_point(n)] * BATCH))
    prep = di.prepare_gradient(rosenbrock, backend, batch[0])
    gradient = di.gradient
    native = torch.func.vmap(torch.func.grad(rosenbrock))
    through_di = torch.func.vmap(lambda x: gradient(rosenbrock, prep, backend, x))
    torch.testing.assert_close(through_di(batch), native(batch))
    return "torch.func.vmap", f"{backend!r}", lambda: native(batch), lambda: through_di(batch), lambda: "-"


def _torch_compile(n: int, compile_backend: str) -> Case:
    import torch

    # dynamo keeps its compiles per code object: each size's two functions start from an empty
    # cache, as a user's first compile does (a second entry would add its guards to every call)
    torch._dynamo.reset()
    backend = di.AutoTorch()
    x = torch.from_numpy(_point(n))
    prep = di.prepare_gradient(rosenbrock, backend, x)
    gradient = di.gradient
    native = torch.compile(torch.func.grad(rosenbrock), fullgraph=True, backend=compile_backend)
    through_di = torch.compile(
        lambda x: gradient(rosenbrock, prep, backend, x), fullgraph=True, backend=compile_backend
    )
    torch.testing.assert_close(through_di(x), native(x))
    return "torch.compile", f"{backend!r}", lambda: native(x), lambda: through_di(x), lambda: "-"


def transform_rows(settings: Settings, runs: int, compile_backend: str = "inductor") -> list[dict[str, Any]]:
    """One row per case and size: ``runs`` interleaved comparisons, native then ``di``
    (``compile_backend``: ``torch.compile``'s backend for the torch.compile rows)."""
    import jax  # noqa: F401  (both engines are needed)

    rows = []
    for n in SIZES:
        cases = [
            _jax_loop(di.AutoJAX(jit=True), n),
            _jax_loop(di.AutoJAX(), n),
            _torch_vmap(n),
            _torch_compile(n, compile_backend),
        ]
        for kind, backend, native, through_di, programs in cases:
            timings = [compare(native, through_di, settings) for _ in range(runs)]
            rows.append({"kind": kind, "backend": backend, "n": n, "timings": timings, "programs": programs()})
    return rows


def _summary(timings: list[Timing]) -> tuple[float, float, float, float, float]:
    ratios = [t.ratio for t in timings]
    return (
        statistics.median(t.a_ns for t in timings),
        statistics.median(t.b_ns for t in timings),
        statistics.median(ratios),
        min(ratios),
        max(ratios),
    )


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| inside | backend | n | native | di | di / native: median of runs (range) | target | "
        "compiled programs (native / di) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        native, through_di, ratio, low, high = _summary(row["timings"])
        target = TARGETS[row["kind"]]
        verdict = "PASS" if ratio <= target else "MISS"
        lines.append(
            f"| {row['kind']} | `{row['backend']}` | {row['n']:g} | {format_ns(native)} | {format_ns(through_di)} | "
            f"{format_ratio(ratio)} ({format_ratio(low)}-{format_ratio(high)}) | {verdict} <= {target} | "
            f"{row['programs']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transforms", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short budget per comparison")
    parser.add_argument("--runs", type=int, default=5, help="comparisons per row (median and range reported)")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the markdown report")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    settings = Settings(budget_s=0.5) if args.quick else Settings(budget_s=2.0)
    table = render(transform_rows(settings, args.runs))
    print(table)
    about = about_line()
    report = (
        "# di inside the engines' transforms, against the native composition\n\n"
        f"{about}\n\nGenerated by `python -m bench.transforms`; torch on 1 intra-op thread. Each row is "
        f"{args.runs} interleaved comparisons (pairs of blocks, `bench/timing.py`); the ratio is the median of "
        "their median ratios, with their range. The jax rows: `jax.jit` of a "
        f"{STEPS}-step `lax.fori_loop` calling a prepared `di.value_and_gradient`, against the loop with "
        f"`jax.value_and_grad`. The torch rows: `torch.func.vmap` over a prepared `di.gradient` (a batch of "
        f"{BATCH}), against `torch.func.vmap(torch.func.grad(f))`; `torch.compile(fullgraph=True)` (inductor) "
        "of a step calling a prepared `di.gradient`, against `torch.compile(torch.func.grad(f), "
        "fullgraph=True)`. Rosenbrock, float32.\n\n" + table + "\n"
    )
    args.output.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
