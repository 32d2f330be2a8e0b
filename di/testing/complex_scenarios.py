"""Scenarios at a complex ``x``: the convention of ``docs/complex.md`` on every engine.

The arguments of :class:`~di.testing.Scenario` (``default_scenarios``' ``"complex"``
group builds them; this module imports nothing from :mod:`di.testing.scenarios`),
at complex64 and complex128, with analytic references computed here with NumPy:

* real-valued ``f`` (gradient, hvp, hessian): ``Re(sum(x^2))`` of a complex
  matrix (the gradient ``2 conj(x)`` an optimiser on a complex manifold expects),
  the Hermitian quadratic form ``x^H M x`` (gradient ``2 M x``, hvp ``2 M v``, the
  real Hessian of shape ``(2, n, 2, n)``) and a quantum-state fidelity
  ``|<psi|U x>|^2 / <x|x>``;
* holomorphic ``f`` (jacobian, pushforward, pullback, derivative): ``exp(x) x``
  and ``C x`` for a complex matrix ``C`` (jacobian ``C``, pushforward ``C v``,
  pullback ``C^H w``).

``python -m di`` runs them on every backend; an engine that cannot differentiate
through complex values declares it (``Capabilities.complex_numbers``), and its
cases are skipped with its reason. Every function is written with
``di.array_namespace``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from di.contexts import Constant
from di.testing.scenario import PrepArgs

__all__ = ["COMPLEX_TAG", "complex_scenario_arguments"]

COMPLEX_TAG = "complex"


def _xp(x: Any) -> Any:
    import di

    return di.array_namespace(x)


# --- the functions -------------------------------------------------------------------------


def real_square(x: Any) -> Any:
    """``Re(sum(x^2))``: real-valued; its gradient is ``2 conj(x)``."""
    xp = _xp(x)
    return xp.real(xp.sum(x * x))


def hermitian_form(x: Any, m: Any) -> Any:
    """``Re(x^H M x)`` for a Hermitian ``Constant`` ``M``: real-valued."""
    xp = _xp(x)
    return xp.real(xp.sum(xp.conj(x) * (m @ x)))


def fidelity(x: Any, u: Any, psi: Any) -> Any:
    """``|<psi|U x>|^2 / <x|x>``: the fidelity of the state ``x`` (unnormalised)
    after the unitary ``U`` with the target ``psi``."""
    xp = _xp(x)
    overlap = xp.sum(xp.conj(psi) * (u @ x))
    return xp.real(overlap * xp.conj(overlap)) / xp.real(xp.sum(xp.conj(x) * x))


def exp_times(x: Any) -> Any:
    """``exp(x) x``, elementwise: holomorphic."""
    return _xp(x).exp(x) * x


def complex_matmul(x: Any, c: Any) -> Any:
    """``C x`` for a complex ``Constant`` ``C``: holomorphic (linear)."""
    return c @ x


# --- the references ------------------------------------------------------------------------


def _fidelity_gradient(x: np.ndarray, u: np.ndarray, psi: np.ndarray) -> np.ndarray:
    """``2 df/dconj(x)``: ``2 (a U^H psi / N - |a|^2 x / N^2)`` with ``a = <psi|U x>``, ``N = <x|x>``."""
    a, n = np.vdot(psi, u @ x), np.vdot(x, x).real
    return 2 * (a * (u.conj().T @ psi) / n - abs(a) ** 2 * x / n**2)


def _real_hessian(hvp: Any, n: int) -> np.ndarray:
    """The ``(2, n, 2, n)`` real Hessian whose column ``(q, k)`` is the hvp along the real
    (``q = 0``) or imaginary (``q = 1``) unit at ``k``, split into real and imaginary parts."""
    hessian = np.zeros((2, n, 2, n))
    for q, unit in enumerate((1.0, 1.0j)):
        for k in range(n):
            v = np.zeros(n, complex)
            v[k] = unit
            column = hvp(v)
            hessian[0, :, q, k], hessian[1, :, q, k] = column.real, column.imag
    return hessian


def _complex(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random complex values exactly representable in ``dtype``."""
    values = rng.uniform(-1.0, 1.0, size=shape) + 1j * rng.uniform(-1.0, 1.0, size=shape)
    return np.asarray(values, dtype=dtype)


def _namer(scenarios: list[dict[str, Any]], suffix: str) -> Any:
    """``named(operator, what, **arguments)``, appending one scenario's arguments
    (named ``operator/complex_what/suffix``, tagged) to ``scenarios``."""
    tags = {COMPLEX_TAG, suffix}

    def named(operator: str, what: str, **arguments: Any) -> None:
        scenarios.append(dict(operator=operator, name=f"{operator}/complex_{what}/{suffix}", tags=tags, **arguments))

    return named


def complex_scenario_arguments(rng: np.random.Generator | None = None) -> list[dict[str, Any]]:
    """The arguments of the complex scenarios, tagged ``"complex"``, with analytic references.

    Args:
        rng: random generator of the points (default: seeded with 0).

    Returns:
        One dict of :class:`~di.testing.Scenario` arguments per scenario.

    Examples:
        >>> from di.testing import Scenario
        >>> from di.testing.complex_scenarios import complex_scenario_arguments
        >>> scenarios = [Scenario(**arguments) for arguments in complex_scenario_arguments()]
        >>> sorted({s.operator for s in scenarios})
        ['derivative', 'gradient', 'hessian', 'hvp', 'jacobian', 'pullback', 'pushforward']
        >>> sorted({str(s.x.dtype) for s in scenarios})
        ['complex128', 'complex64']
    """
    rng = np.random.default_rng(0) if rng is None else rng
    scenarios: list[dict[str, Any]] = []
    for dtype, suffix in ((np.complex128, "c128"), (np.complex64, "c64")):
        named = _namer(scenarios, suffix)

        x = _complex(rng, (2, 3), dtype)
        x128 = x.astype(np.complex128)
        y = np.sum(x128 * x128).real
        named("gradient", "real_square", f=real_square, x=x, res1=2 * np.conj(x128), y=y)
        v = _complex(rng, (2, 3), dtype)
        square = dict(f=real_square, x=x, y=y)
        named("hvp", "real_square", tangents=(v,), res1=2 * np.conj(x128), res2=(2 * np.conj(v),), **square)

        n = 3
        b = _complex(rng, (n, n), np.complex128)
        m = np.asarray((b + b.conj().T) / 2, dtype=dtype)  # Hermitian
        m128 = m.astype(np.complex128)
        z = _complex(rng, (n,), dtype)
        z128 = z.astype(np.complex128)
        form = dict(f=hermitian_form, x=z, contexts=[Constant(m)], y=np.vdot(z128, m128 @ z128).real)
        named("gradient", "hermitian_form", res1=2 * m128 @ z128, **form)
        tz = _complex(rng, (n,), dtype)
        named("hvp", "hermitian_form", tangents=(tz,), res1=2 * m128 @ z128, res2=(2 * m128 @ tz,), **form)
        hessian = _real_hessian(lambda t, m=m128: 2 * m @ t, n)
        named("hessian", "hermitian_form", res1=2 * m128 @ z128, res2=hessian, **form)

        q, _ = np.linalg.qr(_complex(rng, (n, n), np.complex128))
        u, psi = np.asarray(q, dtype=dtype), np.asarray(np.eye(n)[0] + 0.5j * np.eye(n)[1], dtype=dtype)
        state = _complex(rng, (n,), dtype)
        state128 = state.astype(np.complex128)
        overlap = np.vdot(psi.astype(np.complex128), u.astype(np.complex128) @ state128)
        named(
            "gradient",
            "fidelity",
            f=fidelity,
            x=state,
            contexts=[Constant(u), Constant(psi)],
            res1=_fidelity_gradient(state128, u.astype(np.complex128), psi.astype(np.complex128)),
            y=abs(overlap) ** 2 / np.vdot(state128, state128).real,
            prep_args=PrepArgs(np.ones(n, dtype=dtype), None, (Constant(u), Constant(psi))),  # (0 / 0 at zeros)
        )

        w = _complex(rng, (4,), dtype)
        w128 = w.astype(np.complex128)
        jacobian = np.diag(np.exp(w128) * (1 + w128))
        holomorphic = dict(f=exp_times, x=w, y=np.exp(w128) * w128)
        named("jacobian", "exp_times", res1=jacobian, **holomorphic)
        tw = _complex(rng, (4,), dtype)
        named("pushforward", "exp_times", tangents=(tw,), res1=(jacobian @ tw,), **holomorphic)
        named("pullback", "exp_times", tangents=(tw,), res1=(jacobian.conj().T @ tw,), **holomorphic)
        s = w[:1].reshape(())
        s128 = s.astype(np.complex128)
        named("derivative", "exp_times", f=exp_times, x=s, res1=np.exp(s128) * (1 + s128), y=np.exp(s128) * s128)

        c = _complex(rng, (3, 4), dtype)
        c128 = c.astype(np.complex128)
        linear = dict(f=complex_matmul, x=w, contexts=[Constant(c)], y=c128 @ w128)
        named("jacobian", "matmul", res1=c128, **linear)
        named("pushforward", "matmul", tangents=(tw,), res1=(c128 @ tw,), **linear)
        cw = _complex(rng, (3,), dtype)
        named("pullback", "matmul", tangents=(cw,), res1=(c128.conj().T @ cw,), **linear)
    return scenarios
