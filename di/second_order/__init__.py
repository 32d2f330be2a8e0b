""":class:`di.SecondOrder`: second-order operators by one backend differentiating
another's gradient (a strategy over the adapter protocol).

Its selector is :mod:`.selector`; the strategy (:mod:`.strategy`) is imported
when a ``SecondOrder`` backend first prepares.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SecondOrderSource", "SecondOrderStrategy", "supported_pairs"]


def __getattr__(name: str) -> Any:
    if name in __all__:  # imported on use: the strategy imports the adapter machinery
        from di.second_order import strategy

        return getattr(strategy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
