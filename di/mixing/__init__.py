"""Mixing engines: ``di.DifferentiateWith``, a function of one engine differentiable
inside another.

:mod:`di.mixing.core` holds the engine-free part (the callable, the choice of
host by the values it is called with), :mod:`di.mixing.calls` the per-signature
preps of the inner backend, and one host module per outer engine, named for it
and imported only once that engine is loaded, makes ``g`` a primitive of its
engine.
"""

from __future__ import annotations

from di.mixing.core import DifferentiateWith

__all__ = ["DifferentiateWith"]
