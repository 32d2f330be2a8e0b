"""Finite differences over NumPy: its selector and adapter.

:data:`ENGINE` is the record the registries read. The engine needs no library
beyond NumPy: it is always installed.
"""

from __future__ import annotations

from di.backends.engine import Engine
from di.engines.finitediff.selector import AutoFiniteDiff, tolerances

__all__ = ["ENGINE"]

ENGINE = Engine(
    name="finitediff",
    selectors=(AutoFiniteDiff,),
    adapter="di.engines.finitediff.adapter:FiniteDiffAdapter",
    display="finite differences",
    aliases=("finite_diff", "fd"),
    labels={"finitediff": AutoFiniteDiff(), "finitediff-forward": AutoFiniteDiff(method="forward")},
    default_for=("SecondOrder.outer", "SecondOrder.inner"),
    tolerances=tolerances,
)
"""The finite-difference record: ``SecondOrder()``'s default outer and inner
backend (it differentiates any program, evaluating it); approximate, so it
declares its ``tolerances``."""
