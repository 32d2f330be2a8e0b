"""Complex x: prepared ``gradient`` at a complex ``x`` against the native spelling a JAX or
torch user writes for the same convention, in one process, interleaved.

``python -m bench.complex`` (``--quick`` for a short budget) prints the table and writes
``bench/complex_results.md``. Native references (``di``'s convention is torch's,
``df/da + i df/db``):

* ``AutoJAX(jit=True)``: ``jax.jit`` of ``conj(jax.grad(f))`` (JAX's gradient is the conjugate);
* ``AutoTorch()``: ``torch.autograd.grad`` on a detached ``requires_grad_()`` copy;
* ``AutoTensorFlow()``: ``tf.GradientTape.gradient`` of the watched complex tensor;
* ``AutoMLX()``: ``mx.grad`` (complex64 only: MLX has no complex128).

``f`` is ``Re(sum(sin(x)^2))``, complex128 and complex64, n = 1e3 (and 10). JAX's ``di`` computes
through the real view (``di/complex``): ``x`` split into its real and imaginary parts in the
caller's family, ``f`` differentiated as a real function, the result recombined. The engines
whose own gradient at a complex ``x`` is the convention (``Capabilities.complex_native``) run it
on ``x`` as it is; a second table times that against the real view on the same engine (the
real view forced by preparing with ``complex_native`` cleared), paired and interleaved.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import di
from bench.report import about_line, render_backend_dtype_rows
from bench.timing import Settings, compare
from di.backends.registry import get_adapter

__all__ = ["complex_rows", "main"]

SIZES = (10, 1000)
DTYPES = ("complex128", "complex64")
OUTPUT = Path(__file__).resolve().parent / "complex_results.md"

Pair = tuple[str, Callable[[], Any], Callable[[], Any]]


def _point(n: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)


def _f(x: Any) -> Any:
    xp = di.array_namespace(x)
    s = xp.sin(x)
    return xp.real(xp.sum(s * s))


def _jax_pair(n: int, dtype: str) -> Pair:
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(dtype == "complex128"):
        x = jax.device_put(_point(n, dtype))
        native = jax.jit(lambda z: jnp.conj(jax.grad(_f)(z)))
        native(x).block_until_ready()
    backend = di.AutoJAX(jit=True)
    prep = di.prepare_gradient(_f, backend, x)
    gradient = di.gradient

    def run_native() -> Any:
        with jax.enable_x64(dtype == "complex128"):
            return native(x).block_until_ready()

    def run_di() -> Any:
        return gradient(_f, prep, backend, x).block_until_ready()

    return "AutoJAX(jit=True)", run_native, run_di


def _torch_pair(n: int, dtype: str) -> Pair:
    import torch

    x = torch.from_numpy(_point(n, dtype))
    backend = di.AutoTorch()
    prep = di.prepare_gradient(_f, backend, x)
    gradient = di.gradient

    def run_native() -> Any:
        leaf = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(_f(leaf), leaf)
        return g

    def run_di() -> Any:
        return gradient(_f, prep, backend, x)

    return "AutoTorch()", run_native, run_di


def _tensorflow_pair(n: int, dtype: str) -> Pair:
    import tensorflow as tf

    x = tf.constant(_point(n, dtype))
    backend = di.AutoTensorFlow()
    prep = di.prepare_gradient(_f, backend, x)
    gradient = di.gradient

    def run_native() -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = _f(x)
        return tape.gradient(y, x)

    def run_di() -> Any:
        return gradient(_f, prep, backend, x)

    return "AutoTensorFlow()", run_native, run_di


def _mlx_pair(n: int, dtype: str) -> Pair | None:
    if dtype != "complex64":
        return None
    import mlx.core as mx

    x = mx.array(_point(n, dtype))
    native_grad = mx.grad(_f)
    backend = di.AutoMLX()
    prep = di.prepare_gradient(_f, backend, x)
    gradient = di.gradient

    def run_native() -> Any:
        g = native_grad(x)
        mx.eval(g)
        return g

    def run_di() -> Any:
        g = gradient(_f, prep, backend, x)
        mx.eval(g)
        return g

    return "AutoMLX()", run_native, run_di


@contextlib.contextmanager
def _real_view_only(backend: di.AbstractBackend) -> Iterator[None]:
    """Preparations inside go through the real view on ``backend``'s engine (as before
    ``Capabilities.complex_native``): the adapter's declaration cleared, then restored."""
    cls = type(get_adapter(backend))
    declared = cls.capabilities
    cls.capabilities = replace(declared, complex_native=frozenset())
    try:
        yield
    finally:
        cls.capabilities = declared


def _real_view_pair(make: Callable[[int, str], Pair | None], n: int, dtype: str) -> Pair | None:
    """``(name, di through the real view, di on the engine's own gradient)``, or ``None``
    where the engine runs no complex gradient of its own."""
    made = make(n, dtype)
    if made is None:
        return None
    name, _, own = made
    backend = {"AutoTorch()": di.AutoTorch(), "AutoTensorFlow()": di.AutoTensorFlow(), "AutoMLX()": di.AutoMLX()}[name]
    if "gradient" not in get_adapter(backend).capabilities.complex_native:
        return None
    with _real_view_only(backend):
        _, _, through_view = make(n, dtype)  # type: ignore[misc]
    return name, through_view, own


MAKERS: tuple[Callable[[int, str], Pair | None], ...] = (_jax_pair, _torch_pair, _tensorflow_pair, _mlx_pair)


def complex_rows(settings: Settings) -> list[dict[str, Any]]:
    """One row per backend, dtype and size: native and ``di`` per-call times and their ratio,
    after checking that both give the same gradient."""
    rows = []
    for make in MAKERS:
        for dtype in DTYPES:
            for n in SIZES:
                made = make(n, dtype)
                if made is None:
                    continue
                name, native, through_di = made
                expected, got = np.asarray(native()), np.asarray(through_di())
                assert got.dtype == np.dtype(dtype), (name, got.dtype)
                assert np.allclose(got, expected, rtol=1e-4, atol=1e-4), name
                timing = compare(native, through_di, settings)
                rows.append({"backend": name, "dtype": dtype, "n": n, "timing": timing})
    return rows


def real_view_rows(settings: Settings) -> list[dict[str, Any]]:
    """One row per engine with its own complex gradient, dtype and size: ``di`` through the
    real view against ``di`` on the engine's own gradient, after checking they agree."""
    rows = []
    for make in MAKERS[1:]:
        for dtype in DTYPES:
            for n in SIZES:
                made = _real_view_pair(make, n, dtype)
                if made is None:
                    continue
                name, through_view, own = made
                assert np.allclose(np.asarray(own()), np.asarray(through_view()), rtol=1e-4, atol=1e-4), name
                rows.append({"backend": name, "dtype": dtype, "n": n, "timing": compare(through_view, own, settings)})
    return rows


def render_real_view_rows(rows: list[dict[str, Any]]) -> str:
    """The table of :func:`real_view_rows`."""
    columns = ("di, real view (before)", "di, engine's own (after)", "after / before")
    return render_backend_dtype_rows(rows, columns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.complex", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short budget per row")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the markdown report")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    settings = Settings(budget_s=0.5) if args.quick else Settings(budget_s=2.0)
    table = render_backend_dtype_rows(complex_rows(settings))
    print(table)
    before_after = render_real_view_rows(real_view_rows(settings))
    print(before_after)
    report = (
        "# Complex x: prepared gradient against the native spelling of the same convention\n\n"
        f"{about_line()}\n\nGenerated by `python -m bench.complex`; torch on 1 intra-op thread. "
        "Ratios are medians of interleaved pairs of blocks.\n\n" + table + "\n\n"
        "The engine's own complex gradient (`Capabilities.complex_native`) against the real view, "
        "on the same engine:\n\n" + before_after + "\n"
    )
    args.output.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
