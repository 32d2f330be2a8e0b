""":class:`di.AutoFastest`: its selector (:mod:`.selector`), the strategy that measures
the candidates at preparation (:mod:`.strategy`) and the plans it records and caches
(:mod:`.plan`).

This package imports nothing itself: the strategy is imported when an
``AutoFastest`` backend first prepares.
"""
