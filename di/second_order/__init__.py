""":class:`di.SecondOrder`: second-order operators by one backend differentiating
another's gradient (a strategy over the adapter protocol)."""

from di.second_order.strategy import SecondOrderSource, SecondOrderStrategy, supported_pairs

__all__ = ["SecondOrderSource", "SecondOrderStrategy", "supported_pairs"]
