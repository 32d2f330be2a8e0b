"""Mixing engines: ``di.DifferentiateWith``, a function of one engine differentiable
inside another.

:mod:`di.mixing.core` holds the engine-free part (the callable, the choice of
host by the values it is called with) and :mod:`di.mixing.calls` the
per-signature preps of the inner backend; each engine that can host ``g`` brings
the host that makes it a primitive of that engine (its record's ``host``, in its
own folder), imported only once that engine is loaded.
"""
