"""Complex numbers: one convention on every engine, through the real view.

A complex ``x = a + ib`` is differentiated as the real array ``r`` of shape
``(2, *x.shape)`` holding ``a`` and ``b`` (:class:`~di.complex.view.RealView`):
``f`` is wrapped into the real function ``g(r) = f(r[0] + i r[1])`` (rebuilt on the
engine's own values, so it is traced and compiled with ``f``), whose output is
itself split into ``(Re y, Im y)`` when it is complex; any backend (engine or
strategy) prepares the operator of ``g``, and the results are mapped back
(:mod:`di.complex.strategy`). So every engine agrees by construction: the
gradient of a real-valued ``f`` is ``df/da + i df/db``, the pushforward of a
holomorphic ``f`` is ``J v``, its pullback ``J^H w``. ``docs/complex.md`` states
the convention in full.
"""

from di.complex.strategy import prepare_complex

__all__ = ["prepare_complex"]
