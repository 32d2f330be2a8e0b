"""Shared fixtures and helpers: the backends under test, tolerances, array conversion.

Test modules import the helpers directly (``from conftest import ...``); pytest puts
this directory on ``sys.path`` (rootdir-relative ``prepend`` import mode).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest
from functions import SCENARIOS, Scenario
from hypothesis import settings

import di

# --- hypothesis -------------------------------------------------------------------

# By default every run tests the same examples (seeded from each test), so a draw that lands on
# a rounding edge case cannot turn one CI run red by luck; DI_HYPOTHESIS_RANDOM=1 draws afresh
# (with DI_HYPOTHESIS_PROFILE=dev, 200 examples per property) to explore.
settings.register_profile("seeded", derandomize=True, database=None)
settings.register_profile("random")
settings.load_profile("random" if os.environ.get("DI_HYPOTHESIS_RANDOM") else "seeded")

# --- backends ---------------------------------------------------------------------

_CANDIDATES: tuple[tuple[di.AbstractBackend, str], ...] = (
    (di.AutoJAX(), "jax"),
    (di.AutoJAX(jit=True), "jax-jit"),
    (di.AutoTorch(), "torch"),
    (di.AutoAutograd(), "autograd"),
    (di.AutoFiniteDiff(), "fd-central"),
    (di.AutoFiniteDiff(method="forward"), "fd-forward"),
)

BACKENDS: list[di.AbstractBackend] = [b for b, _ in _CANDIDATES if b.is_installed]
_IDS = {b: name for b, name in _CANDIDATES}

# The reference among the backends: exact (AD) derivatives.
AD_BACKENDS = [b for b in BACKENDS if not isinstance(b, di.AutoFiniteDiff)]

FAMILIES = ["numpy"] + [name for name, b in (("torch", di.AutoTorch()), ("jax", di.AutoJAX())) if b.is_installed]


def backend_id(backend: Any) -> str:
    """A short test id for a selector."""
    return _IDS.get(backend, repr(backend))


def backend_params(backends: Iterable[di.AbstractBackend] | None = None) -> list[Any]:
    """``pytest.param`` per backend, with readable ids."""
    return [pytest.param(b, id=backend_id(b)) for b in (BACKENDS if backends is None else backends)]


def can_write_cache(backend: di.AbstractBackend) -> bool:
    """Whether ``f`` may write into a ``Cache`` with ``buf[...] = ...`` on this backend."""
    return isinstance(backend, (di.AutoTorch, di.AutoFiniteDiff))


def supports(backend: di.AbstractBackend, scenario: Scenario) -> bool:
    """Whether the scenario can run on the backend (JAX and autograd cannot write into
    arrays; autograd refuses ``Cache`` altogether)."""
    return not scenario.writes_cache or can_write_cache(backend)


def backend_scenario_params(scenarios: Iterable[Scenario] = SCENARIOS) -> list[Any]:
    """``pytest.param(backend, scenario)`` for every supported pair."""
    return [pytest.param(b, s, id=f"{backend_id(b)}-{s.name}") for s in scenarios for b in BACKENDS if supports(b, s)]


def scenario_params(scenarios: Iterable[Scenario] = SCENARIOS) -> list[Any]:
    return [pytest.param(s, id=s.name) for s in scenarios]


@pytest.fixture
def backends() -> list[di.AbstractBackend]:
    """Every installed backend selector under test."""
    return list(BACKENDS)


@pytest.fixture(params=backend_params())
def backend(request: pytest.FixtureRequest) -> di.AbstractBackend:
    """Each installed backend selector in turn."""
    return request.param


# --- tolerances ---------------------------------------------------------------------


def tolerance(backend: di.AbstractBackend, dtype: Any) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing a result of ``backend`` at ``dtype`` with the exact
    answer; ``atol`` is relative to the largest entry of the exact answer (see
    :func:`assert_close`)."""
    if np.dtype(to_numpy_dtype(dtype)) == np.float32:
        return 1e-4, 1e-5
    if isinstance(backend, di.AutoFiniteDiff):
        if backend.method == "forward":
            return 1e-5, 1e-5  # O(h) truncation, h ~ sqrt(eps): measured worst ~6e-6
        return 1e-7, 1e-8  # O(h^2) with h ~ eps**(1/3): measured worst ~1e-8
    return 1e-10, 1e-12


def to_numpy_dtype(dtype: Any) -> Any:
    """A numpy dtype for a numpy, torch or jax dtype."""
    if isinstance(dtype, type) or isinstance(dtype, np.dtype):
        return np.dtype(dtype)
    return np.dtype(str(dtype).replace("torch.", ""))


def assert_close(actual: Any, expected: Any, backend: di.AbstractBackend, dtype: Any, what: str = "") -> None:
    """``actual`` (any family) matches ``expected`` within the backend's tolerance.

    The absolute tolerance scales with ``max(1, max |expected|)`` so that a
    coordinate whose exact value is near zero is judged against the size of the rest.
    """
    rtol, atol = tolerance(backend, dtype)
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    actual = to_numpy(actual).astype(np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * scale, err_msg=f"{what} on {backend!r}")


# --- arrays ---------------------------------------------------------------------------


def family(value: Any) -> str:
    """``"numpy"``, ``"torch"`` or ``"jax"`` for an array (numpy scalars are numpy),
    else the type's name."""
    if isinstance(value, (np.ndarray, np.generic)):
        return "numpy"
    try:
        import torch

        if isinstance(value, torch.Tensor):
            return "torch"
    except ImportError:  # pragma: no cover - torch missing
        pass
    try:
        import jax

        if isinstance(value, jax.Array):
            return "jax"
    except ImportError:  # pragma: no cover - jax missing
        pass
    return type(value).__name__


def to_numpy(value: Any) -> np.ndarray:
    """A numpy copy of an array of any family (or of a Python scalar)."""
    if family(value) == "torch":
        return value.detach().cpu().numpy().copy()
    return np.array(value, copy=True)


def as_family(x: np.ndarray, name: str) -> Any:
    """A copy of the numpy array ``x`` in family ``name``, with the same dtype (JAX
    arrays are made inside a scoped ``jax.enable_x64`` so float64 stays float64)."""
    if name == "numpy":
        return np.array(x, copy=True)
    if name == "torch":
        import torch

        return torch.from_numpy(np.array(x, copy=True))
    if name == "jax":
        import jax
        import jax.numpy as jnp

        with jax.enable_x64(True):
            result = jnp.asarray(np.array(x, copy=True))
        assert result.dtype == x.dtype
        return result
    raise ValueError(name)


def dtype_name(value: Any) -> str:
    """``"float32"``, ``"float64"``, ... for an array of any family."""
    return str(value.dtype).replace("torch.", "")
