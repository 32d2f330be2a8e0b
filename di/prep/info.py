"""What a strategy records on its preps (``prep.info``)."""

from __future__ import annotations

from typing import Any

__all__ = ["NO_INFO", "StrategyInfo"]


class StrategyInfo:
    """What a strategy found at preparation, kept as ``prep.info``.

    Subclasses set the fields they know; a prep of an engine backend has this
    class's empty instance.

    Attributes:
        plan: the :class:`di.plan.Plan` of an :class:`di.AutoFastest` prep.
        sparsity: the sparsity pattern of an :class:`di.AutoSparse` jacobian or
            hessian prep.
        colors: its number of colors (pushforwards, pullbacks or hvps per call).
        sparse_result: whether results are sparse matrices (no ``out=``).

    Examples:
        >>> from di.prep.info import StrategyInfo
        >>> StrategyInfo().plan is None
        True
    """

    plan: Any = None
    sparsity: Any = None
    colors: int | None = None
    sparse_result: bool = False


NO_INFO = StrategyInfo()
