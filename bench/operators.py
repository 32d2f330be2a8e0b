"""Prepared hvp, jacobian, pushforward and pullback against the native composition a
careful JAX or torch user writes, at one size (issue 7: at most 1.05 at n = 1e3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import di
from bench.report import Table, format_ns, format_ratio
from bench.timing import Settings, compare

__all__ = ["operators_table"]

Pair = tuple[str, Callable[[], Any], Callable[[], Any]]


def _jax_pairs(n: int, jit: bool) -> list[Pair]:
    import jax
    import jax.numpy as jnp

    def scalar(x: Any) -> Any:
        return jnp.sum(jnp.sin(x) * x**2)

    def vector(x: Any) -> Any:
        return jnp.tanh(x) * x

    x = jnp.linspace(-1.0, 1.0, n, dtype=jnp.float32)
    v = jnp.cos(x)
    backend = di.AutoJAX(jit=jit)
    wrap = jax.jit if jit else (lambda fn: fn)
    native_hvp = wrap(lambda x, v: jax.jvp(jax.grad(scalar), (x,), (v,))[1])
    native_jac = wrap(jax.jacfwd(vector))
    native_jvp = wrap(lambda x, v: jax.jvp(vector, (x,), (v,))[1])
    native_vjp = wrap(lambda x, v: jax.vjp(vector, x)[1](v)[0])
    preps = {
        "hvp": di.prepare_hvp(scalar, backend, x, (v,)),
        "jacobian": di.prepare_jacobian(vector, backend, x),
        "pushforward": di.prepare_pushforward(vector, backend, x, (v,)),
        "pullback": di.prepare_pullback(vector, backend, x, (v,)),
    }
    hvp, jacobian, pushforward, pullback = di.hvp, di.jacobian, di.pushforward, di.pullback
    return [
        (
            "hvp",
            lambda: native_hvp(x, v).block_until_ready(),
            lambda: hvp(scalar, preps["hvp"], backend, x, (v,))[0].block_until_ready(),
        ),
        (
            "jacobian",
            lambda: native_jac(x).block_until_ready(),
            lambda: jacobian(vector, preps["jacobian"], backend, x).block_until_ready(),
        ),
        (
            "pushforward",
            lambda: native_jvp(x, v).block_until_ready(),
            lambda: pushforward(vector, preps["pushforward"], backend, x, (v,))[0].block_until_ready(),
        ),
        (
            "pullback",
            lambda: native_vjp(x, v).block_until_ready(),
            lambda: pullback(vector, preps["pullback"], backend, x, (v,))[0].block_until_ready(),
        ),
    ]


def _torch_pairs(n: int) -> list[Pair]:
    import torch
    import torch.func as func

    def scalar(x: Any) -> Any:
        return torch.sum(torch.sin(x) * x**2)

    def vector(x: Any) -> Any:
        return torch.tanh(x) * x

    x = torch.linspace(-1.0, 1.0, n)
    v = torch.cos(x)
    backend = di.AutoTorch()
    preps = {
        "hvp": di.prepare_hvp(scalar, backend, x, (v,)),
        "jacobian": di.prepare_jacobian(vector, backend, x),
        "pushforward": di.prepare_pushforward(vector, backend, x, (v,)),
        "pullback": di.prepare_pullback(vector, backend, x, (v,)),
    }

    def native_pullback() -> Any:
        xr = x.detach().requires_grad_()
        return torch.autograd.grad(vector(xr), xr, grad_outputs=v)[0]

    hvp, jacobian, pushforward, pullback = di.hvp, di.jacobian, di.pushforward, di.pullback
    return [
        (
            "hvp",
            lambda: func.jvp(func.grad(scalar), (x,), (v,))[1],
            lambda: hvp(scalar, preps["hvp"], backend, x, (v,)),
        ),
        ("jacobian", lambda: func.jacfwd(vector)(x), lambda: jacobian(vector, preps["jacobian"], backend, x)),
        (
            "pushforward",
            lambda: func.jvp(vector, (x,), (v,))[1],
            lambda: pushforward(vector, preps["pushforward"], backend, x, (v,)),
        ),
        ("pullback", native_pullback, lambda: pullback(vector, preps["pullback"], backend, x, (v,))),
    ]


NATIVE = {
    "AutoJAX(jit=True)": "jax.jit of jvp(grad(f)) / jacfwd / jvp / vjp",
    "AutoJAX()": "the same transforms, eager",
    "AutoTorch()": "torch.func jvp(grad(f)) / jacfwd / jvp; torch.autograd.grad(grad_outputs=v) for the pullback",
}


def operators_table(settings: Settings, n: int, engines: set[str]) -> Table:
    """One row per backend and operator: the prepared ``di`` call against the native
    composition, one tangent, float32, ``n`` elements (jacobian: ``n x n``)."""
    table = Table(
        f"Prepared hvp, jacobian, pushforward, pullback at n = {n:.0e}",
        ["backend", "operator", "native", "di", "ratio di/native", "pair ratios q1-q3"],
        intro=(
            "One tangent or cotangent, float32, f = sum(sin(x) * x**2) for hvp and f = tanh(x) * x otherwise. "
            + "Native: "
            + "; ".join(f"{label}: {what}" for label, what in NATIVE.items())
            + "."
        ),
    )
    builders: list[tuple[str, Callable[[], list[Pair]]]] = []
    if "jax-jit" in engines:
        builders.append(("AutoJAX(jit=True)", lambda: _jax_pairs(n, True)))
    if "jax" in engines:
        builders.append(("AutoJAX()", lambda: _jax_pairs(n, False)))
    if "torch" in engines:
        builders.append(("AutoTorch()", lambda: _torch_pairs(n)))
    for label, build in builders:
        for operator, native, through_di in build():
            np.testing.assert_allclose(_numpy(through_di()), _numpy(native()), rtol=1e-4, atol=1e-5)
            timing = compare(native, through_di, settings)
            table.rows.append(
                [
                    label,
                    operator,
                    format_ns(timing.a_ns),
                    format_ns(timing.b_ns),
                    format_ratio(timing.ratio),
                    f"{timing.ratio_q1:.3f}-{timing.ratio_q3:.3f}",
                ]
            )
    return table


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, tuple):
        value = value[0]
    if hasattr(value, "detach"):
        value = value.detach().numpy()
    return np.asarray(value, dtype=np.float64)
