"""Preparation and call time of ``AutoSparse(AutoJAX(jit=True))`` Hessians with
the compressed products built from one seed matrix per batch of colors (the
engine's batched form, ``Adapter.stacked_products``) against the per-color
tangents it replaced, and against asdex, paired in one process.

Run: ``python -m bench.sparse_stacked [PROBLEM ...]`` (sif2jax and asdex, from
the ``bench`` extra). Each round prepares (and calls once) with the per-color
path, the stacked one and asdex, in an order that alternates between rounds;
then the three prepared calls are timed in interleaved rounds. Prints medians
with their ranges, and the load average beside them.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.sparse_cutest import _ready
from di.fastest.plan import format_seconds

PROBLEMS = ("ARGLINA", "INTEQNELS", "FLETCHCR", "GENROSE")
CALL_ROUNDS = 15
ROUND_SECONDS = 0.02


def _prep_rounds(name: str) -> int:
    return 3 if name == "INTEQNELS" else 7


def _summary(values: list[float]) -> str:
    return f"{format_seconds(statistics.median(values))} ({format_seconds(min(values))}-{format_seconds(max(values))})"


def _calls(calls: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    counts = {}
    for label, call in calls.items():
        _ready(call())
        start = time.perf_counter()
        _ready(call())
        counts[label] = max(1, min(1000, int(ROUND_SECONDS / max(time.perf_counter() - start, 1e-7))))
    samples: dict[str, list[float]] = {label: [] for label in calls}
    labels = list(calls)
    for round_number in range(CALL_ROUNDS):
        for label in labels if round_number % 2 == 0 else labels[::-1]:
            start = time.perf_counter()
            for _ in range(counts[label]):
                result = calls[label]()
            _ready(result)
            samples[label].append((time.perf_counter() - start) / counts[label])
    return samples


def measure(name: str) -> None:
    """Print one problem's figures."""
    import asdex
    import jax
    import sif2jax

    import di
    from di.backends.protocol import Adapter
    from di.engines.jax.adapter import JAXAdapter

    problem = next(p for p in sif2jax.unconstrained_minimisation_problems if p.name == name)
    backend = di.AutoSparse(di.AutoJAX(jit=True))
    stacked_products = JAXAdapter.stacked_products

    def f(y: Any) -> Any:
        return problem.objective(y, problem.args)

    def ours(stacked: bool) -> Callable[[], Any]:
        JAXAdapter.stacked_products = stacked_products if stacked else Adapter.stacked_products  # type: ignore[method-assign]
        try:
            prep = di.prepare_hessian(f, backend, x)
            _ready(di.hessian(f, prep, backend, x))
        finally:
            JAXAdapter.stacked_products = stacked_products  # type: ignore[method-assign]
        return lambda: di.hessian(f, prep, backend, x)

    def theirs() -> Callable[[], Any]:
        native = jax.jit(asdex.hessian_from_coloring(f, asdex.hessian_coloring(f, x)))
        _ready(native(x))
        return lambda: native(x)

    makers: dict[str, Callable[[], Callable[[], Any]]] = {
        "per color": lambda: ours(False),
        "stacked": lambda: ours(True),
        "asdex": theirs,
    }
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = jax.device_put(np.asarray(problem.y0, dtype=np.float64))
        load = [os.getloadavg()[0]]
        prep_times: dict[str, list[float]] = {label: [] for label in makers}
        calls: dict[str, Callable[[], Any]] = {}
        labels = list(makers)
        for round_number in range(_prep_rounds(name)):
            for label in labels if round_number % 2 == 0 else labels[::-1]:
                start = time.perf_counter()
                calls[label] = makers[label]()
                prep_times[label].append(time.perf_counter() - start)
        reference = np.asarray(calls["asdex"]().todense())
        for label in ("per color", "stacked"):
            assert np.allclose(np.asarray(calls[label]().todense()), reference, rtol=1e-9, atol=1e-9), label
        call_times = _calls(calls)
        load.append(os.getloadavg()[0])
    prep_ratio = [s / a for s, a in zip(prep_times["stacked"], prep_times["asdex"])]
    before_ratio = [s / b for s, b in zip(prep_times["stacked"], prep_times["per color"])]
    call_ratio = [s / b for s, b in zip(call_times["stacked"], call_times["per color"])]
    call_asdex = [s / a for s, a in zip(call_times["stacked"], call_times["asdex"])]
    print(f"## {name} (n = {x.size}), load {load[0]:.1f}-{load[1]:.1f}", flush=True)
    for label in labels:
        print(f"- {label}: prep {_summary(prep_times[label])}, call {_summary(call_times[label])}")
    print(
        f"- stacked / asdex prep {statistics.median(prep_ratio):.2f} ({min(prep_ratio):.2f}-{max(prep_ratio):.2f}); "
        f"stacked / per color prep {statistics.median(before_ratio):.2f} "
        f"({min(before_ratio):.2f}-{max(before_ratio):.2f}); call stacked / per color "
        f"{statistics.median(call_ratio):.2f} ({min(call_ratio):.2f}-{max(call_ratio):.2f}), stacked / asdex "
        f"{statistics.median(call_asdex):.2f} ({min(call_asdex):.2f}-{max(call_asdex):.2f})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    from bench.sparse_cutest import warm_up

    names = (argv if argv is not None else sys.argv[1:]) or list(PROBLEMS)
    warm_up("ARGLINB")
    for name in names:
        measure(name)


if __name__ == "__main__":
    main()
