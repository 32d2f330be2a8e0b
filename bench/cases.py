"""Per-backend pairs of callables: the native engine call and the same work through ``di``.

Every input is in the engine's own array family (JAX arrays for ``AutoJAX``,
torch tensors for ``AutoTorch``, numpy arrays for ``AutoAutograd`` and
``AutoFiniteDiff``), so neither side converts anything. The native side is what a
careful user of that engine writes by hand; the ``di`` side is the public call.
JAX results are waited for with ``block_until_ready()`` on both sides.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import di

__all__ = ["ENGINES", "Case", "Engine", "to_numpy"]

Thunk = Callable[[], Any]

GRADIENT = "gradient"
UNPREPARED = "gradient, unprepared"
VALUE_AND_GRADIENT = "value_and_gradient"
OPERATORS = (GRADIENT, UNPREPARED, VALUE_AND_GRADIENT)


@dataclass
class Case:
    """One backend, one function, one size.

    Attributes:
        pairs: operator -> ``(native, di)`` zero-argument callables.
        dtype: dtype of ``x`` (for the report).
        note: anything the reader must know about this case.
    """

    pairs: dict[str, tuple[Thunk, Thunk]]
    dtype: str
    note: str = ""
    results: tuple[Thunk, Thunk] | None = field(default=None, repr=False)
    breakdown: dict[str, Thunk] = field(default_factory=dict, repr=False)


def _breakdown(f: Callable[..., Any], backend: Any, x: Any, prep: Any, wait: bool) -> dict[str, Thunk]:
    """Thunks splitting a prepared ``di.gradient`` into its layers: the adapter's
    program alone (``prep.programs["gradient"]``, internal), and ``di.gradient``
    through a non-strict prep (the facade without the signature check)."""
    program = prep.programs[GRADIENT]
    loose = di.prepare_gradient(f, backend, x, strict=False)
    gradient = di.gradient
    if wait:

        def program_only() -> Any:
            return program(x).block_until_ready()

        def not_strict() -> Any:
            return gradient(f, loose, backend, x).block_until_ready()

    else:

        def program_only() -> Any:
            return program(x)

        def not_strict() -> Any:
            return gradient(f, loose, backend, x)

    return {"adapter program alone": program_only, "di.gradient, strict=False prep": not_strict}


@dataclass(frozen=True)
class Engine:
    """A backend under test.

    Attributes:
        label: how the row names it, e.g. ``AutoJAX(jit=True)``.
        native: the native call it is compared with.
        build: ``build(f, x_numpy) -> Case``.
        max_n: the largest size benchmarked (``None``: all).
    """

    label: str
    native: str
    build: Callable[[Callable[..., Any], np.ndarray], Case]
    requires: str | None = None
    max_n: int | None = None

    @property
    def installed(self) -> bool:
        """Whether the engine this backend needs can be imported (checked without importing it)."""
        return self.requires is None or importlib.util.find_spec(self.requires) is not None


def to_numpy(value: Any) -> np.ndarray:
    """Any family's array as a numpy float64 array (for the correctness check)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64)


def _jax(jit: bool) -> Callable[[Callable[..., Any], np.ndarray], Case]:
    def build(f: Callable[..., Any], x_np: np.ndarray) -> Case:
        import jax
        import jax.numpy as jnp

        x = jnp.asarray(x_np, dtype=jnp.float32)
        backend = di.AutoJAX(jit=jit)
        native = jax.value_and_grad(f)
        if jit:
            native = jax.jit(native)
        prep = di.prepare_gradient(f, backend, x)
        gradient, value_and_gradient = di.gradient, di.value_and_gradient

        def native_g() -> Any:
            return native(x)[1].block_until_ready()

        def di_g() -> Any:
            return gradient(f, prep, backend, x).block_until_ready()

        def di_g_unprepared() -> Any:
            return gradient(f, backend, x).block_until_ready()

        def native_vg() -> Any:
            y, g = native(x)
            y.block_until_ready()
            return g.block_until_ready()

        def di_vg() -> Any:
            y, g = value_and_gradient(f, prep, backend, x)
            y.block_until_ready()
            return g.block_until_ready()

        return Case(
            {
                GRADIENT: (native_g, di_g),
                UNPREPARED: (native_g, di_g_unprepared),
                VALUE_AND_GRADIENT: (native_vg, di_vg),
            },
            "float32",
            results=(native_g, di_g),
            breakdown=_breakdown(f, backend, x, prep, wait=True),
        )

    return build


def _torch(f: Callable[..., Any], x_np: np.ndarray) -> Case:
    import torch

    x = torch.from_numpy(x_np.astype(np.float32))
    backend = di.AutoTorch()
    autograd_grad = torch.autograd.grad
    prep = di.prepare_gradient(f, backend, x)
    gradient, value_and_gradient = di.gradient, di.value_and_gradient

    def native_g() -> Any:
        xr = x.detach().requires_grad_()
        y = f(xr)
        (g,) = autograd_grad(y, xr)
        return g

    def native_vg() -> Any:
        xr = x.detach().requires_grad_()
        y = f(xr)
        (g,) = autograd_grad(y, xr)
        return y.detach(), g

    def di_g() -> Any:
        return gradient(f, prep, backend, x)

    def di_g_unprepared() -> Any:
        return gradient(f, backend, x)

    def di_vg() -> Any:
        return value_and_gradient(f, prep, backend, x)

    return Case(
        {GRADIENT: (native_g, di_g), UNPREPARED: (native_g, di_g_unprepared), VALUE_AND_GRADIENT: (native_vg, di_vg)},
        "float32",
        results=(native_g, di_g),
        breakdown=_breakdown(f, backend, x, prep, wait=False),
    )


def _autograd(f: Callable[..., Any], x_np: np.ndarray) -> Case:
    import autograd

    x = x_np.astype(np.float64)
    backend = di.AutoAutograd()
    native_grad = autograd.grad(f)
    native_value_and_grad = autograd.value_and_grad(f)
    prep = di.prepare_gradient(f, backend, x)
    gradient, value_and_gradient = di.gradient, di.value_and_gradient

    def native_g() -> Any:
        return native_grad(x)

    def native_vg() -> Any:
        return native_value_and_grad(x)

    def di_g() -> Any:
        return gradient(f, prep, backend, x)

    def di_g_unprepared() -> Any:
        return gradient(f, backend, x)

    def di_vg() -> Any:
        return value_and_gradient(f, prep, backend, x)

    return Case(
        {GRADIENT: (native_g, di_g), UNPREPARED: (native_g, di_g_unprepared), VALUE_AND_GRADIENT: (native_vg, di_vg)},
        "float64",
        results=(native_g, di_g),
        breakdown=_breakdown(f, backend, x, prep, wait=False),
    )


_STEP = float(np.finfo(np.float64).eps) ** (1 / 3)


def central_differences(f: Callable[..., Any], x: np.ndarray, with_value: bool = False) -> Any:
    """The hand-written central-difference gradient a numpy user would write:
    float64, step ``eps**(1/3) * max(1, |x_i|)`` made exactly representable, one
    pair of evaluations per coordinate."""
    point = np.array(x, dtype=np.float64)
    h = _STEP * np.maximum(1.0, np.abs(point))
    h = (point + h) - point
    g = np.empty_like(point)
    for i in range(point.size):
        xi = point[i]
        point[i] = xi + h[i]
        up = float(f(point))
        point[i] = xi - h[i]
        down = float(f(point))
        g[i] = (up - down) / (2 * h[i])
        point[i] = xi
    if with_value:
        return np.asarray(f(point)), g
    return g


def _finitediff(f: Callable[..., Any], x_np: np.ndarray) -> Case:
    x = x_np.astype(np.float64)
    backend = di.AutoFiniteDiff()
    prep = di.prepare_gradient(f, backend, x)
    gradient, value_and_gradient = di.gradient, di.value_and_gradient

    def native_g() -> Any:
        return central_differences(f, x)

    def native_vg() -> Any:
        return central_differences(f, x, with_value=True)

    def di_g() -> Any:
        return gradient(f, prep, backend, x)

    def di_g_unprepared() -> Any:
        return gradient(f, backend, x)

    def di_vg() -> Any:
        return value_and_gradient(f, prep, backend, x)

    return Case(
        {GRADIENT: (native_g, di_g), UNPREPARED: (native_g, di_g_unprepared), VALUE_AND_GRADIENT: (native_vg, di_vg)},
        "float64",
        results=(native_g, di_g),
        breakdown=_breakdown(f, backend, x, prep, wait=False),
    )


ENGINES = {
    "jax-jit": Engine("AutoJAX(jit=True)", "jax.jit(jax.value_and_grad(f))(x)[1]", _jax(True), "jax"),
    "jax": Engine("AutoJAX()", "jax.value_and_grad(f)(x)[1] (eager)", _jax(False), "jax"),
    "torch": Engine(
        "AutoTorch()",
        "xr = x.detach().requires_grad_(); (g,) = torch.autograd.grad(f(xr), xr)",
        _torch,
        "torch",
    ),
    "autograd": Engine("AutoAutograd()", "autograd.grad(f)(x)", _autograd, "autograd"),
    "finitediff": Engine("AutoFiniteDiff()", "hand-written numpy central differences", _finitediff, max_n=1000),
}
