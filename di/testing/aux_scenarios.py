"""Scenarios with auxiliary outputs: ``f`` returns ``(y, aux)`` (``has_aux=True``).

The arguments of :class:`~di.testing.Scenario` (``default_scenarios``' ``"aux"``
group builds them; this module imports nothing from :mod:`di.testing.scenarios`,
so the two do not import each other), one per first-order operator (gradient,
jacobian, derivative, pushforward, pullback), with ``aux`` pytrees that mix arrays computed by the same evaluation of
``f`` (compared with analytic references, expected in ``x``'s family), strings,
ints and ``None`` (returned as they are); with contexts, a pytree ``x``, and
float32 as well as float64. ``python -m di`` runs them on every backend, the
compiled ones included. Every function is written with ``di.array_namespace``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from di.contexts import Constant

__all__ = ["AUX_TAG", "aux_scenario_arguments"]

AUX_TAG = "aux"


def _xp(x: Any) -> Any:
    import di

    return di.array_namespace(x)


# --- the functions -------------------------------------------------------------------------


def loss_with_metrics(x: Any) -> Any:
    """``sum(sin(x) x)``, with its squared norm, a label, the size and ``None``."""
    xp = _xp(x)
    return xp.sum(xp.sin(x) * x), {"norm2": xp.sum(x * x), "label": "loss", "size": x.shape[0], "none": None}


def weighted_residual(x: Any, w: Any) -> Any:
    """``sum(w (x - 1)^2) / 2`` for a ``Constant`` ``w``, with the residual vector."""
    xp = _xp(x)
    residual = x - 1.0
    return xp.sum(w * residual * residual) / 2, (residual, "residual")


def tanh_with_extremes(x: Any, a: Any) -> Any:
    """``tanh(a x)`` (vector to vector), with the largest output and a note."""
    xp = _xp(x)
    y = xp.tanh(a * x)
    return y, {"largest": xp.max(y), "note": "tanh"}


def scalar_curve(t: Any) -> Any:
    """``[t^2, sin t]`` (scalar to vector), with ``t^3``."""
    xp = _xp(t)
    return xp.stack([t * t, xp.sin(t)]), {"cube": t * t * t}


def pytree_loss(x: Any) -> Any:
    """``sum(a^2) b`` for ``x = {"a": ..., "b": ...}``, with ``sum(a)``."""
    xp = _xp(x["a"])
    return xp.sum(x["a"] * x["a"]) * x["b"], {"sum_a": xp.sum(x["a"]), "tag": "pytree"}


# --- the scenarios -------------------------------------------------------------------------------


def _rounded(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random values exactly representable in ``dtype`` (so references are exact)."""
    return np.asarray(rng.uniform(-1.5, 1.5, size=shape), dtype=dtype).astype(np.float64).astype(dtype)


def aux_scenario_arguments(rng: np.random.Generator | None = None) -> list[dict[str, Any]]:
    """The arguments of the ``has_aux`` scenarios, tagged ``"aux"``, with analytic references.

    Args:
        rng: random generator of the points (default: seeded with 0).

    Returns:
        One dict of :class:`~di.testing.Scenario` arguments per scenario, with ``has_aux=True``.

    Examples:
        >>> from di.testing import Scenario
        >>> from di.testing.aux_scenarios import aux_scenario_arguments
        >>> sorted({Scenario(**arguments).operator for arguments in aux_scenario_arguments()})
        ['derivative', 'gradient', 'jacobian', 'pullback', 'pushforward']
    """
    rng = np.random.default_rng(0) if rng is None else rng
    scenarios: list[dict[str, Any]] = []
    for dtype, suffix in ((np.float64, "f64"), (np.float32, "f32")):
        x = _rounded(rng, (5,), dtype)
        x64 = x.astype(np.float64)
        scenarios.append(
            dict(
                operator="gradient",
                f=loss_with_metrics,
                x=x,
                res1=np.sin(x64) + x64 * np.cos(x64),
                has_aux=True,
                aux={"norm2": np.sum(x64 * x64), "label": "loss", "size": 5, "none": None},
                name=f"gradient/aux_metrics/{suffix}",
                tags={AUX_TAG, suffix},
            )
        )
    x = _rounded(rng, (4,), np.float64)
    w = np.abs(_rounded(rng, (4,), np.float64)) + 0.5
    scenarios.append(
        dict(
            operator="gradient",
            f=weighted_residual,
            x=x,
            contexts=[Constant(w)],
            res1=w * (x - 1.0),
            has_aux=True,
            aux=(x - 1.0, "residual"),
            name="gradient/aux_residual_constant/f64",
            tags={AUX_TAG, "constant"},
        )
    )
    a = np.array([0.5, -1.0, 2.0])
    x = _rounded(rng, (3,), np.float64)
    y = np.tanh(a * x)
    jac = np.diag(a * (1 - y * y))
    scenarios.append(
        dict(
            operator="jacobian",
            f=tanh_with_extremes,
            x=x,
            contexts=[Constant(a)],
            res1=jac,
            has_aux=True,
            aux={"largest": np.max(y), "note": "tanh"},
            name="jacobian/aux_extremes/f64",
            tags={AUX_TAG, "constant"},
        )
    )
    tangents = (_rounded(rng, (3,), np.float64), _rounded(rng, (3,), np.float64))
    scenarios.append(
        dict(
            operator="pushforward",
            f=tanh_with_extremes,
            x=x,
            contexts=[Constant(a)],
            tangents=tangents,
            res1=tuple(jac @ t for t in tangents),
            has_aux=True,
            aux={"largest": np.max(y), "note": "tanh"},
            name="pushforward/aux_extremes/f64",
            tags={AUX_TAG, "constant"},
        )
    )
    cotangents = (_rounded(rng, (3,), np.float64),)
    scenarios.append(
        dict(
            operator="pullback",
            f=tanh_with_extremes,
            x=x,
            contexts=[Constant(a)],
            tangents=cotangents,
            res1=tuple(t @ jac for t in cotangents),
            has_aux=True,
            aux={"largest": np.max(y), "note": "tanh"},
            name="pullback/aux_extremes/f64",
            tags={AUX_TAG, "constant"},
        )
    )
    t = np.array(0.75)
    scenarios.append(
        dict(
            operator="derivative",
            f=scalar_curve,
            x=t,
            res1=np.array([2 * t, np.cos(t)]),
            has_aux=True,
            aux={"cube": t**3},
            name="derivative/aux_cube/f64",
            tags={AUX_TAG},
        )
    )
    pa, pb = _rounded(rng, (3,), np.float64), np.array(1.25)
    scenarios.append(
        dict(
            operator="gradient",
            f=pytree_loss,
            x={"a": pa, "b": pb},
            res1={"a": 2 * pa * pb, "b": np.sum(pa * pa)},
            has_aux=True,
            aux={"sum_a": np.sum(pa), "tag": "pytree"},
            name="gradient/aux_pytree_x/f64",
            tags={AUX_TAG, "pytree"},
        )
    )
    return scenarios
