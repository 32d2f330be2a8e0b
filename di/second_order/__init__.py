""":class:`di.SecondOrder`: second-order operators by one backend differentiating
another's gradient (a strategy over the adapter protocol).

Its selector is :mod:`.selector`; the strategy (:mod:`.strategy`) is imported
when a ``SecondOrder`` backend first prepares.
"""
