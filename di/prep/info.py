"""What a strategy records on its preps (``prep.info``)."""

from __future__ import annotations

from typing import Any

__all__ = ["NO_INFO", "StrategyInfo"]


class StrategyInfo:
    """What a strategy found at preparation, kept as ``prep.info``.

    Subclasses set the fields they know; a prep of an engine backend has this
    class's empty instance.

    Attributes:
        plan: the :class:`di.fastest.plan.Plan` of an :class:`di.AutoFastest` prep.
        sparsity: the sparsity pattern of an :class:`di.AutoSparse` jacobian or
            hessian prep.
        colors: its number of colors (pushforwards, pullbacks or hvps per call).
        sparse_result: whether results are sparse matrices (no ``out=``).
        program: the engine program chosen at preparation where an engine has
            several for the operator (eager torch's hvp: ``"double backward"``);
            ``None`` elsewhere.

    Examples:
        >>> from di.prep.info import StrategyInfo
        >>> StrategyInfo().plan is None
        True
        >>> StrategyInfo()
        StrategyInfo(plan=None, sparsity=None, colors=None, sparse_result=False)
    """

    plan: Any = None
    sparsity: Any = None
    colors: int | None = None
    sparse_result: bool = False
    program: str | None = None

    def __init__(self, program: str | None = None) -> None:
        if program is not None:
            self.program = program

    def __repr__(self) -> str:
        # the strategies' subclasses are dataclasses with their own repr; this one is what a
        # dense prep's info shows, so it reads like theirs rather than as an address
        fields = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in ("plan", "sparsity", "colors", "sparse_result")
        )
        if self.program is not None:
            fields += f", program={self.program!r}"
        return f"{type(self).__name__}({fields})"


NO_INFO = StrategyInfo()
