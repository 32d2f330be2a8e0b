"""The adapter registry keeps a bounded number of adapters: a sweep over thousands
of selector options does not keep one adapter per value (it kept 2,000 for 2,000
``step=`` values)."""

from __future__ import annotations

import numpy as np

import di
from di.backends import registry


def test_a_sweep_over_step_values_keeps_a_bounded_number_of_adapters() -> None:
    f = lambda x: (x**2).sum()
    x = np.array([1.0, 2.0])
    for index in range(2000):
        step = 1e-6 * (1 + index / 2000)
        np.testing.assert_allclose(di.gradient(f, di.AutoFiniteDiff(step=step), x), 2 * x, rtol=1e-5)
    kept = [backend for backend in registry._ADAPTERS if isinstance(backend, di.AutoFiniteDiff)]
    assert len(kept) <= registry._MOST_ADAPTERS
    assert di.AutoFiniteDiff(step=1e-6 * (1 + 1999 / 2000)) in registry._ADAPTERS  # the latest are kept
